// Importing image archives: `docker save` tarballs (the classic manifest.json form and the OCI
// form newer Dockers write) and OCI archives (a tarred OCI layout). The archive is unpacked into
// a private temporary directory — regular files and directories only — then imported.
import { createReadStream, createWriteStream } from "node:fs";
import { mkdir, mkdtemp, readFile, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import type { Paths } from "../config/paths.js";
import type { BlobStore } from "./blobs.js";
import { archiveComponents } from "./flatten.js";
import { installImage } from "./install.js";
import { importOciLayout } from "./oci-layout.js";
import { ImageFormatError, parseImageConfig, sha256, type Manifest } from "./oci.js";
import type { ImageMeta } from "./store.js";
import { readTar } from "./tar.js";

const DOCKER_LAYER = "application/vnd.docker.image.rootfs.diff.tar";

async function unpack(archive: string, into: string): Promise<void> {
  for await (const { entry, body } of readTar(createReadStream(archive))) {
    const comps = archiveComponents(entry.path);
    if (!comps.length) continue;
    const dest = join(into, ...comps);
    if (entry.type === "dir") await mkdir(dest, { recursive: true });
    else if (entry.type === "file") {
      await mkdir(dirname(dest), { recursive: true });
      await pipeline(Readable.from(body), createWriteStream(dest, { flags: "wx" }));
    } else if (entry.type === "symlink" || entry.type === "hardlink") {
      // Classic `docker save` links duplicate layers; anything else has no business here.
      throw new ImageFormatError(`image archive entry ${entry.path} is a link; only files and directories are expected`);
    }
  }
}

async function exists(p: string): Promise<boolean> {
  return stat(p).then(() => true, () => false);
}

/**
 * Imports from an archive file. `name` is required for OCI archives; for `docker save` it
 * defaults to the archive's first RepoTag. `tag` picks one image of several.
 */
export async function importArchive(paths: Paths, blobs: BlobStore, archive: string, name: (n: string) => string, requested?: string, tag?: string, log?: (m: string) => void): Promise<ImageMeta> {
  const dir = await mkdtemp(join(tmpdir(), "forgevm-import-"));
  try {
    await unpack(archive, dir);
    const hasLayout = await exists(join(dir, "index.json"));
    const hasDockerManifest = await exists(join(dir, "manifest.json"));
    if (hasDockerManifest) {
      const entries = JSON.parse(await readFile(join(dir, "manifest.json"), "utf8")) as { Config?: string; RepoTags?: string[]; Layers?: string[] }[];
      if (!Array.isArray(entries) || !entries.length) throw new ImageFormatError("manifest.json in the archive lists no images");
      const pick = tag ? entries.find((e) => e.RepoTags?.includes(tag) || e.RepoTags?.some((t) => t.endsWith(`:${tag}`))) : entries[0];
      if (!pick) throw new ImageFormatError(`no image tagged "${tag}" in ${archive} (tags: ${entries.flatMap((e) => e.RepoTags ?? []).join(", ")})`);
      const imageName = requested ?? pick.RepoTags?.[0];
      if (!imageName) throw new ImageFormatError(`${archive} has no tag for its image: give it a name (--name)`);
      if (typeof pick.Config !== "string" || !Array.isArray(pick.Layers)) throw new ImageFormatError("manifest.json entry has no Config or Layers");
      const configBytes = await readFile(join(dir, ...archiveComponents(pick.Config)));
      const layers = [];
      for (const l of pick.Layers) {
        const file = join(dir, ...archiveComponents(l));
        const digest = sha256(await readFile(file));
        await blobs.put(digest, createReadStream(file), (await stat(file)).size, `layer ${l}`);
        layers.push({ mediaType: DOCKER_LAYER, digest, size: (await stat(file)).size });
      }
      const config = { mediaType: "application/vnd.docker.container.image.v1+json", digest: sha256(configBytes), size: configBytes.length };
      const manifest: Manifest = { mediaType: "application/vnd.docker.distribution.manifest.v2+json", config, layers };
      const manifestDigest = sha256(Buffer.from(JSON.stringify({ schemaVersion: 2, ...manifest })));
      return installImage(paths, blobs, { name: name(imageName), source: `docker-archive:${archive}`, manifestDigest, manifest, config: parseImageConfig(configBytes) }, log);
    }
    if (hasLayout) {
      if (!requested) throw new ImageFormatError(`${archive} is an OCI archive: give the image a name (--name)`);
      return await importOciLayout(paths, blobs, dir, name(requested), tag, log);
    }
    throw new ImageFormatError(`${archive} is neither a docker save tarball (manifest.json) nor an OCI archive (index.json)`);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
