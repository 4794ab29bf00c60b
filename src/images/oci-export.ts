// An image as an OCI archive: a tar of an OCI image layout (oci-layout, index.json, blobs) that
// also carries Docker's manifest.json, so skopeo, Podman, `docker load` and our own import all
// read it. The manifest and blobs are the stored ones, so the digest survives the trip.
import { stat } from "node:fs/promises";
import { Readable } from "node:stream";
import { TAR_END, tarFileBody, tarHeader, tarPadding } from "../util/tar-write.js";
import type { BlobStore } from "./blobs.js";
import type { StoredImage } from "./oci-build.js";
import { MEDIA } from "./oci.js";

export interface ExportRequest {
  image: StoredImage;
  /** The tag ref name ("v1") and the full name ("registry/repo:v1") written into the index. */
  tag: string;
  name: string;
  /** The name Docker shows ("repo:v1"). */
  familiar: string;
}

function jsonFile(path: string, doc: unknown): Buffer[] {
  const body = Buffer.from(JSON.stringify(doc));
  return [tarHeader({ path, type: "file", mode: 0o644, size: body.length, mtime: 0 }), body, tarPadding(body.length)];
}

/** The OCI archive of one stored image, as a stream. */
export function exportArchive(store: BlobStore, req: ExportRequest): Readable {
  const { image } = req;
  const mediaType = image.manifest.mediaType || MEDIA.ociManifest;
  const blobs = [...new Set([image.manifest.config.digest, ...image.manifest.layers.map((l) => l.digest)])];
  async function* chunks(): AsyncGenerator<Buffer> {
    yield* jsonFile("oci-layout", { imageLayoutVersion: "1.0.0" });
    yield* jsonFile("index.json", {
      schemaVersion: 2,
      mediaType: MEDIA.ociIndex,
      manifests: [
        {
          mediaType,
          digest: image.manifestDigest,
          size: image.manifestBytes.length,
          annotations: { "org.opencontainers.image.ref.name": req.tag, "io.containerd.image.name": req.name },
        },
      ],
    });
    yield* jsonFile("manifest.json", [
      { Config: `blobs/sha256/${image.configDigest.slice(7)}`, RepoTags: [req.familiar], Layers: image.manifest.layers.map((l) => `blobs/sha256/${l.digest.slice(7)}`) },
    ]);
    yield tarHeader({ path: "blobs", type: "dir", mode: 0o755, mtime: 0 });
    yield tarHeader({ path: "blobs/sha256", type: "dir", mode: 0o755, mtime: 0 });
    for (const [digest, body] of [[image.manifestDigest, image.manifestBytes] as const, ...blobs.map((d) => [d, null] as const)]) {
      const path = `blobs/sha256/${digest.slice(7)}`;
      if (body) {
        yield tarHeader({ path, type: "file", mode: 0o644, size: body.length, mtime: 0 });
        yield body;
        yield tarPadding(body.length);
        continue;
      }
      const size = (await stat(store.path(digest))).size;
      yield tarHeader({ path, type: "file", mode: 0o644, size, mtime: 0 });
      yield* tarFileBody(store.path(digest), size);
    }
    yield TAR_END;
  }
  return Readable.from(
    (async function* () {
      for await (const c of chunks()) if (c.length) yield c; // an empty chunk would stall the stream
    })(),
  );
}
