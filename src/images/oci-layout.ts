// Importing from an OCI image layout directory (index.json + blobs/sha256/…), as written by
// skopeo, buildah, `docker buildx --output type=oci` and friends. Every blob is verified.
import { createReadStream } from "node:fs";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import type { Paths } from "../config/paths.js";
import { type BlobStore, DigestMismatchError } from "./blobs.js";
import { installImage } from "./install.js";
import { ImageFormatError, checkDigest, parseImageConfig, parseManifestDocument, selectPlatform, sha256, type Descriptor } from "./oci.js";
import type { ImageMeta } from "./store.js";

async function readVerified(layout: string, d: Descriptor, what: string): Promise<Buffer> {
  const bytes = await readFile(join(layout, "blobs", "sha256", checkDigest(d.digest, what).slice(7))).catch(() => {
    throw new ImageFormatError(`${what} ${d.digest} is missing from the layout`);
  });
  if (sha256(bytes) !== d.digest) throw new DigestMismatchError(`${what} in the layout does not match its digest ${d.digest}`);
  return bytes;
}

/** Imports the image whose ref name is `tag` (or the only one) from an OCI layout under the name `name`. */
export async function importOciLayout(paths: Paths, blobs: BlobStore, layout: string, name: string, tag?: string, log?: (m: string) => void): Promise<ImageMeta> {
  let index: any;
  try {
    index = JSON.parse(await readFile(join(layout, "index.json"), "utf8"));
  } catch {
    throw new ImageFormatError(`${layout} is not an OCI image layout (no readable index.json)`);
  }
  const entries = parseManifestDocument(Buffer.from(JSON.stringify({ manifests: index?.manifests ?? [] })));
  if (entries.kind !== "index" || !entries.manifests.length) throw new ImageFormatError(`${layout}/index.json lists no images`);
  const tagOf = (d: Descriptor) => d.annotations?.["org.opencontainers.image.ref.name"];
  let top: Descriptor | undefined;
  if (tag) top = entries.manifests.find((d) => tagOf(d) === tag);
  else if (entries.manifests.length === 1) top = entries.manifests[0];
  if (!top) {
    const tags = entries.manifests.map(tagOf).filter(Boolean).join(", ");
    throw new ImageFormatError(tag ? `no image tagged "${tag}" in ${layout} (tags: ${tags || "none"})` : `${layout} holds several images; name one of: ${tags}`);
  }
  let manifestDesc = top;
  let doc = parseManifestDocument(await readVerified(layout, top, "manifest"), top.mediaType);
  if (doc.kind === "index") {
    manifestDesc = selectPlatform(doc.manifests);
    doc = parseManifestDocument(await readVerified(layout, manifestDesc, "manifest"), manifestDesc.mediaType);
    if (doc.kind !== "manifest") throw new ImageFormatError("an index inside an index is not supported");
  }
  const manifest = doc.manifest;
  const configBytes = await readVerified(layout, manifest.config, "config");
  const manifestBytes = await readVerified(layout, manifestDesc, "manifest");
  const config = parseImageConfig(configBytes);
  for (const l of manifest.layers) {
    await blobs.put(l.digest, createReadStream(join(layout, "blobs", "sha256", checkDigest(l.digest, "layer").slice(7))), l.size, `layer ${l.digest}`);
  }
  return installImage(
    paths,
    blobs,
    { name, source: `oci-layout:${layout}${tag ? `:${tag}` : ""}`, manifestDigest: manifestDesc.digest, manifest, config, manifestBytes, configBytes },
    log,
  );
}
