// Turning verified blobs into an installed image: layers flattened into a staging tree, packed
// into a read-only ext4, metadata written, then renamed into place in one step.
import { spawn } from "node:child_process";
import { createReadStream } from "node:fs";
import { mkdir, open, rename, rm, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import { createGunzip } from "node:zlib";
import type { Readable } from "node:stream";
import type { Paths } from "../config/paths.js";
import type { BlobStore } from "./blobs.js";
import { buildExt4 } from "./ext4.js";
import { saveIndex, type FileIndex } from "./file-index.js";
import { applyLayer } from "./flatten.js";
import { layerCompression, type ImageConfig, type Manifest } from "./oci.js";
import { imageDir, storedImageDir, type ImageMeta } from "./store.js";
import { parseReference } from "./reference.js";
import { ignore } from "../util/ignore.js";

export interface InstallRequest {
  name: string;
  /** Where it came from, for `images`: a registry reference or a file path. */
  source: string;
  manifestDigest: string;
  manifest: Manifest;
  config: ImageConfig;
  /** Kept as blobs beside the layers, so that export and push send the same bytes. */
  manifestBytes?: Buffer;
  configBytes?: Buffer;
}

/** A layer blob's uncompressed tar, whatever its compression. */
export async function layerStream(path: string, mediaType: string): Promise<Readable> {
  const fh = await open(path, "r");
  const head = Buffer.alloc(4);
  await fh.read(head, 0, 4, 0);
  await fh.close();
  const kind = layerCompression(mediaType, head);
  const raw = createReadStream(path);
  if (kind === "gzip") return raw.pipe(createGunzip());
  if (kind === "zstd") {
    const z = spawn("zstd", ["-dcq"], { stdio: ["pipe", "pipe", "ignore"] });
    raw.pipe(z.stdin);
    z.stdin.on("error", () => {});
    z.on("exit", (code) => {
      if (code) z.stdout.destroy(new Error(`zstd could not decompress ${path} (exit ${code})`));
    });
    return z.stdout;
  }
  return raw;
}

const pending = new Map<string, Promise<ImageMeta>>();

/** Installs an image whose blobs are all in `blobs`; concurrent installs of one name share work. */
export function installImage(paths: Paths, blobs: BlobStore, req: InstallRequest, log: (m: string) => void = () => {}): Promise<ImageMeta> {
  const running = pending.get(req.name);
  if (running) return running;
  const p = doInstall(paths, blobs, req, log).finally(() => pending.delete(req.name));
  pending.set(req.name, p);
  return p;
}

async function doInstall(paths: Paths, blobs: BlobStore, req: InstallRequest, log: (m: string) => void): Promise<ImageMeta> {
  await mkdir(paths.imagesDir, { recursive: true });
  const staging = join(paths.imagesDir, `.staging-${randomBytes(4).toString("hex")}`);
  const root = join(staging, "root");
  await mkdir(root, { recursive: true, mode: 0o755 });
  try {
    for (const [i, layer] of req.manifest.layers.entries()) {
      const { entries } = await applyLayer(root, await layerStream(blobs.path(layer.digest), layer.mediaType));
      log(`layer ${i + 1}/${req.manifest.layers.length} ${layer.digest.slice(7, 19)}: ${entries} entries`);
    }
    const size = await buildExt4(root, join(staging, "rootfs.ext4"), "forgevm-root");
    await rm(root, { recursive: true, force: true });
    const meta: ImageMeta = {
      name: req.name,
      source: req.source,
      createdAt: new Date().toISOString(),
      size,
      digest: req.manifestDigest,
      layers: req.manifest.layers.map((l) => l.digest),
      config: req.config,
    };
    if (req.manifestBytes && req.configBytes) {
      await blobs.put(req.manifestDigest, [req.manifestBytes], undefined, "manifest");
      await blobs.put(req.manifest.config.digest, [req.configBytes], undefined, "config");
      meta.configDigest = req.manifest.config.digest;
    }
    await publish(paths, staging, meta);
    return meta;
  } catch (e) {
    await rm(staging, { recursive: true, force: true });
    throw e;
  }
}

export interface RootfsInstall {
  name: string;
  source: string;
  /** A finished ext4 image; it is moved into the image's directory. */
  rootfs: string;
  manifestDigest: string;
  configDigest: string;
  layers: string[];
  config: ImageConfig;
  parent?: string;
  /** Written beside the rootfs before the image appears. */
  index?: FileIndex;
}

/** Installs an image whose root filesystem is already built (a commit's disk), replacing one of the same name. */
export async function installRootfs(paths: Paths, req: RootfsInstall): Promise<ImageMeta> {
  await mkdir(paths.imagesDir, { recursive: true });
  const staging = join(paths.imagesDir, `.staging-${randomBytes(4).toString("hex")}`);
  await mkdir(staging);
  try {
    await rename(req.rootfs, join(staging, "rootfs.ext4"));
    const st = await stat(join(staging, "rootfs.ext4"));
    const meta: ImageMeta = {
      name: req.name,
      source: req.source,
      createdAt: new Date().toISOString(),
      size: st.blocks * 512, // the copy is sparse: what it holds, not the disk it came from
      digest: req.manifestDigest,
      configDigest: req.configDigest,
      layers: req.layers,
      config: req.config,
      ...(req.parent ? { parent: req.parent } : {}),
    };
    if (req.index) await saveIndex(staging, req.index);
    await publish(paths, staging, meta);
    return meta;
  } catch (e) {
    await rm(staging, { recursive: true, force: true });
    throw e;
  }
}

// The finished staging directory becomes the image: its metadata written, then renamed into
// place. The old directory of the same name goes aside first, so the name never points at half an image.
async function publish(paths: Paths, staging: string, meta: ImageMeta): Promise<void> {
  // The one reference parser decides what may be a name (no NUL, no "..", nothing that is no reference).
  if (!meta.name.startsWith("forgevm/")) parseReference(meta.name);
  await writeFile(join(staging, "image.json"), `${JSON.stringify(meta, null, 2)}\n`);
  const dir = imageDir(paths, meta.name);
  // The old image of this name goes aside, whether in its own directory or an earlier release's.
  const previous = await storedImageDir(paths, meta.name);
  const old = `${dir}.old-${randomBytes(4).toString("hex")}`;
  await rename(previous, old).catch(ignore("no earlier image of this name"));
  await rename(staging, dir);
  await rm(old, { recursive: true, force: true });
}

/** Rewrites an installed image's metadata (after its layers were made or found). */
export async function updateImageMeta(dir: string, meta: ImageMeta): Promise<void> {
  const tmp = join(dir, ".image.json.tmp");
  await writeFile(tmp, `${JSON.stringify(meta, null, 2)}\n`);
  await rename(tmp, join(dir, "image.json"));
}
