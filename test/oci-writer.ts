// Test helper: writes OCI image layouts (the tests' own images: layers, configs, manifests,
// multi-arch indexes), so image import and pulls are tested without any outside registry.
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { gzipSync } from "node:zlib";
import { tarOf, type WriteEntry } from "./tar-writer.js";

export interface LayerSpec {
  entries: WriteEntry[];
  compression?: "gzip" | "zstd" | "none";
}

export interface ImageSpec {
  layers: LayerSpec[];
  config?: { Env?: string[]; WorkingDir?: string; User?: string; Cmd?: string[] };
  architecture?: string;
}

const sha = (b: Buffer) => `sha256:${createHash("sha256").update(b).digest("hex")}`;

export async function writeBlob(layout: string, data: Buffer): Promise<{ digest: string; size: number }> {
  const digest = sha(data);
  await mkdir(join(layout, "blobs", "sha256"), { recursive: true });
  await writeFile(join(layout, "blobs", "sha256", digest.slice(7)), data);
  return { digest, size: data.length };
}

function compress(tar: Buffer, how: LayerSpec["compression"]): { data: Buffer; mediaType: string } {
  if (how === "zstd") {
    const r = spawnSync("zstd", ["-q", "-c"], { input: tar, maxBuffer: 1 << 30 });
    if (r.status !== 0) throw new Error("zstd failed");
    return { data: r.stdout, mediaType: "application/vnd.oci.image.layer.v1.tar+zstd" };
  }
  if (how === "none") return { data: tar, mediaType: "application/vnd.oci.image.layer.v1.tar" };
  return { data: gzipSync(tar), mediaType: "application/vnd.oci.image.layer.v1.tar+gzip" };
}

/** Writes one image's blobs; returns its manifest descriptor. */
export async function writeImage(layout: string, spec: ImageSpec) {
  const layers = [];
  const diffIds = [];
  for (const l of spec.layers) {
    const tar = tarOf(l.entries);
    diffIds.push(sha(tar));
    const c = compress(tar, l.compression);
    layers.push({ mediaType: c.mediaType, ...(await writeBlob(layout, c.data)) });
  }
  const arch = spec.architecture ?? "amd64";
  const config = Buffer.from(JSON.stringify({ architecture: arch, os: "linux", config: spec.config ?? {}, rootfs: { type: "layers", diff_ids: diffIds } }));
  const cfg = await writeBlob(layout, config);
  const manifest = Buffer.from(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: "application/vnd.oci.image.manifest.v1+json",
      config: { mediaType: "application/vnd.oci.image.config.v1+json", ...cfg },
      layers,
    }),
  );
  const m = await writeBlob(layout, manifest);
  return { mediaType: "application/vnd.oci.image.manifest.v1+json", ...m, platform: { os: "linux", architecture: arch } };
}

/** Writes index.json naming each top-level descriptor by tag. */
export async function writeIndex(layout: string, tagged: { tag: string; descriptor: object }[]): Promise<void> {
  await writeFile(join(layout, "oci-layout"), JSON.stringify({ imageLayoutVersion: "1.0.0" }));
  const manifests = tagged.map((t) => ({ ...t.descriptor, annotations: { "org.opencontainers.image.ref.name": t.tag } }));
  await writeFile(join(layout, "index.json"), JSON.stringify({ schemaVersion: 2, mediaType: "application/vnd.oci.image.index.v1+json", manifests }));
}

/** Writes a multi-arch index blob over the given manifests; returns its descriptor. */
export async function writeMultiArch(layout: string, manifests: object[]) {
  const idx = Buffer.from(JSON.stringify({ schemaVersion: 2, mediaType: "application/vnd.oci.image.index.v1+json", manifests }));
  return { mediaType: "application/vnd.oci.image.index.v1+json", ...(await writeBlob(layout, idx)) };
}

/**
 * An OCI layout at `dir` with one image (tag "v1"): the host's static busybox with these applets,
 * root and its group, /tmp, and any extra entries; returns the layout directory.
 */
export async function writeBusyboxImage(dir: string, applets: string[], extra: WriteEntry[] = [], config?: ImageSpec["config"]): Promise<string> {
  const busybox = await readFile("/bin/busybox");
  const layout = join(dir, "layout");
  const desc = await writeImage(layout, {
    layers: [
      {
        entries: [
          { path: "bin/", type: "dir" },
          { path: "bin/busybox", data: busybox, mode: 0o755 },
          ...applets.map((a) => ({ path: `bin/${a}`, type: "symlink" as const, linkname: "busybox" })),
          { path: "etc/passwd", data: "root:x:0:0:root:/root:/bin/sh\n" },
          { path: "etc/group", data: "root:x:0:\n" },
          { path: "tmp/", type: "dir", mode: 0o1777 },
          ...extra,
        ],
      },
    ],
    ...(config ? { config } : {}),
  });
  await writeIndex(layout, [{ tag: "v1", descriptor: desc }]);
  return layout;
}
