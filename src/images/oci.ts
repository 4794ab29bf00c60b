// OCI and Docker image metadata: media types, manifests, indexes, configs, and the checks on
// them. Every document is parsed as untrusted input.
import { createHash } from "node:crypto";

export const MEDIA = {
  ociIndex: "application/vnd.oci.image.index.v1+json",
  ociManifest: "application/vnd.oci.image.manifest.v1+json",
  dockerList: "application/vnd.docker.distribution.manifest.list.v2+json",
  dockerManifest: "application/vnd.docker.distribution.manifest.v2+json",
} as const;

export const MANIFEST_ACCEPT = [MEDIA.ociIndex, MEDIA.ociManifest, MEDIA.dockerList, MEDIA.dockerManifest].join(", ");

export interface Descriptor {
  mediaType: string;
  digest: string;
  size: number;
  platform?: { os?: string; architecture?: string; variant?: string };
  annotations?: Record<string, string>;
}

export interface Manifest {
  mediaType: string;
  config: Descriptor;
  layers: Descriptor[];
}

export interface ImageConfig {
  Env?: string[];
  Entrypoint?: string[] | null;
  Cmd?: string[] | null;
  WorkingDir?: string;
  User?: string;
  /** The signal a stop sends first (Docker's STOPSIGNAL). */
  StopSignal?: string;
  /** Mount points the image declares (Docker's VOLUME). */
  Volumes?: string[];
  /** Docker's HEALTHCHECK: Test is ["CMD", argv…], ["CMD-SHELL", command] or ["NONE"]; durations in ns. */
  Healthcheck?: { Test: string[]; Interval?: number; Timeout?: number; StartPeriod?: number; Retries?: number };
  /** What boots as init: "systemd" when the image's label org.forgevm.init says so (docs/system-images.md). */
  Init?: "systemd";
}

/** The label that makes an image a system image, booted with systemd as init. */
export const INIT_LABEL = "org.forgevm.init";

export class ImageFormatError extends Error {
  override name = "ImageFormatError";
}

const DIGEST_RE = /^sha256:[a-f0-9]{64}$/;

export function sha256(data: Uint8Array): string {
  return `sha256:${createHash("sha256").update(data).digest("hex")}`;
}

/** Refuses anything but a well-formed sha256 digest (other algorithms are not accepted). */
export function checkDigest(d: unknown, what: string): string {
  if (typeof d !== "string" || !DIGEST_RE.test(d)) throw new ImageFormatError(`${what} has no valid sha256 digest`);
  return d;
}

function descriptor(x: any, what: string): Descriptor {
  if (typeof x !== "object" || x === null) throw new ImageFormatError(`${what} is not a descriptor`);
  const size = Number(x.size);
  if (!Number.isSafeInteger(size) || size < 0) throw new ImageFormatError(`${what} has no valid size`);
  return { mediaType: String(x.mediaType ?? ""), digest: checkDigest(x.digest, what), size, platform: x.platform, annotations: x.annotations };
}

/** Parses a manifest or an index from its bytes. */
export function parseManifestDocument(bytes: Uint8Array, contentType?: string): { kind: "index"; manifests: Descriptor[] } | { kind: "manifest"; manifest: Manifest } {
  let doc: any;
  try {
    doc = JSON.parse(Buffer.from(bytes).toString("utf8"));
  } catch {
    throw new ImageFormatError("manifest is not valid JSON");
  }
  const mt = String(doc?.mediaType ?? contentType ?? "")
    .split(";")[0]
    .trim();
  if (Array.isArray(doc?.manifests) || mt === MEDIA.ociIndex || mt === MEDIA.dockerList) {
    if (!Array.isArray(doc?.manifests)) throw new ImageFormatError("index has no manifests");
    return { kind: "index", manifests: doc.manifests.map((m: unknown, i: number) => descriptor(m, `index entry ${i}`)) };
  }
  if (doc?.schemaVersion !== 2 || !doc.config || !Array.isArray(doc.layers)) {
    throw new ImageFormatError(`unsupported manifest (schemaVersion ${doc?.schemaVersion}, media type "${mt}"): only OCI and Docker v2 images are supported`);
  }
  return {
    kind: "manifest",
    manifest: { mediaType: mt, config: descriptor(doc.config, "config"), layers: doc.layers.map((l: unknown, i: number) => descriptor(l, `layer ${i}`)) },
  };
}

/** The linux/amd64 entry of an index, or an error listing what the index offers. */
export function selectPlatform(manifests: Descriptor[]): Descriptor {
  const pick = manifests.find((m) => m.platform?.os === "linux" && m.platform?.architecture === "amd64");
  if (pick) return pick;
  const offered = manifests.map((m) => `${m.platform?.os ?? "?"}/${m.platform?.architecture ?? "?"}`).join(", ");
  throw new ImageFormatError(`the image has no linux/amd64 variant (it offers ${offered || "nothing"})`);
}

/** The parts of an image config that sandboxes use. */
export function parseImageConfig(bytes: Uint8Array): ImageConfig {
  let doc: any;
  try {
    doc = JSON.parse(Buffer.from(bytes).toString("utf8"));
  } catch {
    throw new ImageFormatError("image config is not valid JSON");
  }
  const c = doc?.config ?? {};
  const strs = (v: unknown) => (Array.isArray(v) && v.every((x) => typeof x === "string") ? (v as string[]) : undefined);
  return {
    Env: strs(c.Env),
    Entrypoint: strs(c.Entrypoint) ?? null,
    Cmd: strs(c.Cmd) ?? null,
    WorkingDir: typeof c.WorkingDir === "string" ? c.WorkingDir : undefined,
    User: typeof c.User === "string" ? c.User : undefined,
    ...(typeof c.StopSignal === "string" && c.StopSignal.length <= 16 ? { StopSignal: c.StopSignal } : {}),
    ...(c.Volumes && typeof c.Volumes === "object" && !Array.isArray(c.Volumes) ? { Volumes: Object.keys(c.Volumes).slice(0, 64) } : {}),
    ...healthcheckOf(c.Healthcheck),
    ...(c.Labels && typeof c.Labels === "object" && c.Labels[INIT_LABEL] === "systemd" ? { Init: "systemd" as const } : {}),
  };
}

/** An image's Healthcheck, when it is well formed (an image is not trusted: a bad one is ignored). */
function healthcheckOf(h: any): Pick<ImageConfig, "Healthcheck"> {
  const test = h?.Test;
  if (!Array.isArray(test) || !test.length || !test.every((x) => typeof x === "string") || test.length > 256) return {};
  const ns = (v: unknown) => (typeof v === "number" && Number.isFinite(v) && v > 0 ? v : undefined);
  const retries = typeof h.Retries === "number" && Number.isInteger(h.Retries) && h.Retries > 0 ? h.Retries : undefined;
  return { Healthcheck: { Test: test, Interval: ns(h.Interval), Timeout: ns(h.Timeout), StartPeriod: ns(h.StartPeriod), Retries: retries } };
}

/** How a layer is compressed, from its media type or, failing that, its first bytes. */
export function layerCompression(mediaType: string, head: Uint8Array): "gzip" | "zstd" | "none" {
  if (mediaType.includes("zstd")) return "zstd";
  if (mediaType.includes("gzip")) return "gzip";
  if (head[0] === 0x1f && head[1] === 0x8b) return "gzip";
  if (head[0] === 0x28 && head[1] === 0xb5 && head[2] === 0x2f && head[3] === 0xfd) return "zstd";
  return "none";
}
