// Making OCI images of our own: a layer stored from a tar stream (gzip, with its diff id), an
// image config that adds a layer and its history to a parent's, and a manifest over them, all
// as blobs in the store so that export and push send exactly these bytes.
import { createHash } from "node:crypto";
import type { Readable } from "node:stream";
import { createGzip, constants as zlib } from "node:zlib";
import type { BlobStore } from "./blobs.js";
import { ImageFormatError, MEDIA, parseManifestDocument, type Descriptor, type Manifest } from "./oci.js";

export const OCI_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip";
export const OCI_CONFIG = "application/vnd.oci.image.config.v1+json";

/** What a commit or a build step may change in the image config (Docker's --change subset). */
export interface ImageChanges {
  cmd?: string[];
  entrypoint?: string[];
  /** "KEY=value" entries set on top of the parent's. */
  env?: string[];
  workdir?: string;
  user?: string;
  labels?: Record<string, string>;
  /** "80/tcp" */
  exposedPorts?: string[];
  /** VOLUME paths, recorded as the image's mount points. */
  volumes?: string[];
  stopSignal?: string;
  /** Docker's Healthcheck: {Test: ["CMD-SHELL", "…"] | ["NONE"], Interval, Timeout, Retries, …} (ns). */
  healthcheck?: Record<string, unknown>;
}

export interface StoredLayer {
  descriptor: Descriptor;
  /** sha256 of the uncompressed tar. */
  diffId: string;
}

/** Compresses a tar stream into a layer blob. */
export async function storeLayer(blobs: BlobStore, tar: AsyncIterable<Buffer>): Promise<StoredLayer> {
  const diff = createHash("sha256");
  const gz = createGzip({ level: zlib.Z_BEST_SPEED });
  const feed = (async () => {
    try {
      for await (const c of tar) {
        diff.update(c);
        if (!gz.write(c)) await new Promise((r) => gz.once("drain", r));
      }
      gz.end();
    } catch (e) {
      gz.destroy(e as Error);
    }
  })();
  const { digest, size } = await blobs.putNew(gz);
  await feed;
  return { descriptor: { mediaType: OCI_LAYER_GZIP, digest, size }, diffId: `sha256:${diff.digest("hex")}` };
}

/** An image config doc: the parent's (or an empty one) with a layer, its history line and `changes` applied. */
export function childConfig(parent: any | null, layer: { diffId: string; createdBy: string; comment?: string } | null, changes: ImageChanges = {}, replaceLayers = false): any {
  const now = new Date().toISOString();
  const base = parent ? structuredClone(parent) : {};
  const cfg = { ...(base.config ?? {}) };
  if (changes.env?.length) {
    const env = new Map<string, string>((cfg.Env ?? []).map((e: string) => [e.split("=")[0], e]));
    for (const e of changes.env) env.set(e.split("=")[0], e);
    cfg.Env = [...env.values()];
  }
  if (changes.cmd) cfg.Cmd = changes.cmd;
  if (changes.entrypoint) {
    cfg.Entrypoint = changes.entrypoint;
    if (!changes.cmd) cfg.Cmd = null; // Docker: a new ENTRYPOINT drops the inherited CMD
  }
  if (changes.workdir !== undefined) cfg.WorkingDir = changes.workdir;
  if (changes.user !== undefined) cfg.User = changes.user;
  if (changes.labels) cfg.Labels = { ...(cfg.Labels ?? {}), ...changes.labels };
  if (changes.exposedPorts?.length) cfg.ExposedPorts = { ...(cfg.ExposedPorts ?? {}), ...Object.fromEntries(changes.exposedPorts.map((p) => [p, {}])) };
  if (changes.volumes?.length) cfg.Volumes = { ...(cfg.Volumes ?? {}), ...Object.fromEntries(changes.volumes.map((v) => [v, {}])) };
  if (changes.stopSignal !== undefined) cfg.StopSignal = changes.stopSignal;
  if (changes.healthcheck !== undefined) cfg.Healthcheck = changes.healthcheck;
  const diffIds: string[] = replaceLayers ? [] : [...(base.rootfs?.diff_ids ?? [])];
  const history: any[] = replaceLayers ? [] : [...(base.history ?? [])];
  if (layer) {
    diffIds.push(layer.diffId);
    history.push({ created: now, created_by: layer.createdBy, ...(layer.comment ? { comment: layer.comment } : {}) });
  } else {
    history.push({ created: now, created_by: "config change", empty_layer: true });
  }
  return {
    ...base,
    created: now,
    architecture: base.architecture ?? "amd64",
    os: base.os ?? "linux",
    config: cfg,
    rootfs: { type: "layers", diff_ids: diffIds },
    history,
  };
}

export interface StoredImage {
  manifestDigest: string;
  manifest: Manifest;
  manifestBytes: Buffer;
  configDigest: string;
  configDoc: any;
  configBytes: Buffer;
}

/** Stores a config and an OCI manifest over `layers`. */
export async function storeImage(blobs: BlobStore, configDoc: any, layers: Descriptor[]): Promise<StoredImage> {
  const configBytes = Buffer.from(JSON.stringify(configDoc));
  const config = await blobs.putNew([configBytes]);
  const manifest: Manifest = { mediaType: MEDIA.ociManifest, config: { mediaType: OCI_CONFIG, digest: config.digest, size: config.size }, layers };
  const manifestBytes = Buffer.from(JSON.stringify({ schemaVersion: 2, ...manifest }));
  const m = await blobs.putNew([manifestBytes]);
  return { manifestDigest: m.digest, manifest, manifestBytes, configDigest: config.digest, configDoc, configBytes };
}

/** An image's manifest and config from the store, or null when either blob is missing. */
export async function readStoredImage(blobs: BlobStore, manifestDigest: string): Promise<StoredImage | null> {
  const manifestBytes = await blobs.read(manifestDigest);
  if (!manifestBytes) return null;
  const doc = parseManifestDocument(manifestBytes);
  if (doc.kind !== "manifest") throw new ImageFormatError(`${manifestDigest} is an index, not an image manifest`);
  const configBytes = await blobs.read(doc.manifest.config.digest);
  if (!configBytes) return null;
  return {
    manifestDigest,
    manifest: doc.manifest,
    manifestBytes,
    configDigest: doc.manifest.config.digest,
    configDoc: JSON.parse(configBytes.toString("utf8")),
    configBytes,
  };
}

/** The sha256 of a layer blob's uncompressed tar (its diff id). */
export async function diffIdOf(stream: Readable): Promise<string> {
  const h = createHash("sha256");
  for await (const c of stream) h.update(c as Buffer);
  return `sha256:${h.digest("hex")}`;
}
