// A client of the OCI distribution protocol (registry API v2): manifests and blobs over HTTP(S),
// anonymous bearer tokens or Basic credentials, manifest lists, digest pinning, and every byte
// verified before it is kept.
import { readFile } from "node:fs/promises";
import { homedir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { setTimeout as sleep } from "node:timers/promises";
import type { BlobStore } from "./blobs.js";
import { DigestMismatchError } from "./blobs.js";
import { MANIFEST_ACCEPT, parseImageConfig, parseManifestDocument, selectPlatform, sha256, type ImageConfig, type Manifest } from "./oci.js";
import { DOCKER_HUB, type ImageReference } from "./reference.js";

export type PullErrorKind = "unreachable" | "not_found" | "unauthorized" | "invalid";

export class PullError extends Error {
  override name = "PullError";
  constructor(
    readonly kind: PullErrorKind,
    message: string,
  ) {
    super(message);
  }
}

export interface Credentials {
  username: string;
  password: string;
}

export interface PullResult {
  manifestDigest: string;
  manifest: Manifest;
  config: ImageConfig;
  /** The manifest and config exactly as served, kept so export and push send the same bytes. */
  manifestBytes: Buffer;
  configBytes: Buffer;
}

const MAX_MANIFEST = 4 * 1024 * 1024;
const MAX_CONFIG = 16 * 1024 * 1024;

/** Credentials for a registry from ~/.docker/config.json ("auths"), if any. */
export async function dockerConfigCredentials(registry: string, file = join(homedir(), ".docker", "config.json")): Promise<Credentials | undefined> {
  let cfg: any;
  try {
    cfg = JSON.parse(await readFile(file, "utf8"));
  } catch {
    return undefined;
  }
  const keys = registry === DOCKER_HUB ? ["https://index.docker.io/v1/", "index.docker.io", "docker.io", DOCKER_HUB] : [registry, `https://${registry}`, `http://${registry}`];
  for (const k of keys) {
    const a = cfg?.auths?.[k];
    if (!a) continue;
    if (typeof a.auth === "string") {
      const [username, ...rest] = Buffer.from(a.auth, "base64").toString("utf8").split(":");
      return { username, password: rest.join(":") };
    }
    if (typeof a.username === "string" && typeof a.password === "string") return { username: a.username, password: a.password };
  }
  return undefined;
}

/** Loopback registries speak plain HTTP (as Docker allows); everything else HTTPS. */
function baseUrl(registry: string): string {
  const host = registry.replace(/:\d+$/, "");
  const plain = host === "localhost" || host.startsWith("127.") || host === "[::1]";
  return `${plain ? "http" : "https"}://${registry}`;
}

function parseChallenge(h: string): { scheme: string; params: Record<string, string> } {
  const m = /^(\w+)\s*(.*)$/.exec(h.trim());
  const params: Record<string, string> = {};
  for (const p of (m?.[2] ?? "").matchAll(/(\w+)="([^"]*)"/g)) params[p[1]] = p[2];
  return { scheme: (m?.[1] ?? "").toLowerCase(), params };
}

export interface RegistryOptions {
  credentials?: (registry: string) => Promise<Credentials | undefined>;
  retries?: number;
  log?: (m: string) => void;
  /** Bytes received so far of a layer being downloaded (for progress bars). */
  onLayerBytes?: (layer: { index: number; count: number; digest: string; size: number }, received: number) => void;
}

export class RegistryClient {
  private readonly tokens = new Map<string, string>();

  constructor(private readonly opts: RegistryOptions = {}) {}

  /** Fetches the manifest and config and stores every missing layer in `blobs`, verified. */
  async pull(ref: ImageReference, blobs: BlobStore): Promise<PullResult> {
    const log = this.opts.log ?? (() => {});
    let { bytes, contentType } = await this.getManifest(ref, ref.digest ?? ref.tag!);
    let digest = sha256(bytes);
    if (ref.digest && digest !== ref.digest)
      throw new DigestMismatchError(`the manifest ${ref.registry} served for ${ref.canonical} does not match the pinned digest (got ${digest})`);
    let doc = parseManifestDocument(bytes, contentType);
    if (doc.kind === "index") {
      const pick = selectPlatform(doc.manifests);
      ({ bytes, contentType } = await this.getManifest(ref, pick.digest));
      digest = sha256(bytes);
      if (digest !== pick.digest) throw new DigestMismatchError(`the linux/amd64 manifest of ${ref.canonical} does not match its digest ${pick.digest}`);
      doc = parseManifestDocument(bytes, contentType);
      if (doc.kind !== "manifest") throw new PullError("invalid", `${ref.canonical}: an index inside an index is not supported`);
    }
    const manifest = doc.manifest;
    const configBytes = await this.getBlobBytes(ref, manifest.config.digest, MAX_CONFIG);
    if (sha256(configBytes) !== manifest.config.digest) throw new DigestMismatchError(`the config of ${ref.canonical} does not match its digest ${manifest.config.digest}`);
    for (const [i, layer] of manifest.layers.entries()) {
      if (await blobs.has(layer.digest)) {
        log(`layer ${i + 1}/${manifest.layers.length} ${layer.digest.slice(7, 19)}: already present`);
        continue;
      }
      const res = await this.request(ref, `/blobs/${layer.digest}`, {});
      const t0 = performance.now();
      const info = { index: i, count: manifest.layers.length, digest: layer.digest, size: layer.size };
      await blobs.put(layer.digest, Readable.fromWeb(res.body as any), layer.size, `layer ${layer.digest} of ${ref.canonical}`, (n) => this.opts.onLayerBytes?.(info, n));
      log(`layer ${i + 1}/${manifest.layers.length} ${layer.digest.slice(7, 19)}: ${(layer.size / 1048576).toFixed(1)} MiB in ${Math.round(performance.now() - t0)} ms`);
    }
    return { manifestDigest: digest, manifest, config: parseImageConfig(configBytes), manifestBytes: bytes, configBytes };
  }

  private async getManifest(ref: ImageReference, tagOrDigest: string): Promise<{ bytes: Buffer; contentType: string }> {
    const res = await this.request(ref, `/manifests/${tagOrDigest}`, { Accept: MANIFEST_ACCEPT });
    const bytes = await readLimited(res, MAX_MANIFEST, `manifest of ${ref.canonical}`);
    return { bytes, contentType: res.headers.get("content-type") ?? "" };
  }

  private async getBlobBytes(ref: ImageReference, digest: string, max: number): Promise<Buffer> {
    return readLimited(await this.request(ref, `/blobs/${digest}`, {}), max, `blob ${digest}`);
  }

  // One GET with auth, retries and redirects. Redirects are followed by hand so that the
  // registry's token never travels to another origin (blob storage).
  private async request(ref: ImageReference, path: string, headers: Record<string, string>): Promise<Response> {
    const url = `${baseUrl(ref.registry)}/v2/${ref.repository}${path}`;
    const scope = `repository:${ref.repository}:pull`;
    const tries = (this.opts.retries ?? 3) + 1;
    let authTried = false;
    for (let attempt = 1; ; attempt++) {
      let res: Response;
      try {
        res = await this.follow(url, { ...headers, ...this.authHeader(ref.registry, scope) });
      } catch (e) {
        if (attempt < tries) {
          await sleep(250 * 3 ** (attempt - 1));
          continue;
        }
        const cause = (e as Error & { cause?: Error }).cause?.message ?? (e as Error).message;
        throw new PullError("unreachable", `cannot reach registry ${ref.registry} (${cause}); check the name and this machine's network`);
      }
      if (res.status === 401 && !authTried) {
        authTried = true;
        await res.body?.cancel();
        await this.authenticate(ref, res.headers.get("www-authenticate") ?? "", scope);
        attempt--;
        continue;
      }
      if ((res.status === 429 || res.status >= 500) && attempt < tries) {
        await res.body?.cancel();
        await sleep(250 * 3 ** (attempt - 1));
        continue;
      }
      if (res.ok) return res;
      await res.body?.cancel();
      if (res.status === 401 || res.status === 403) {
        throw new PullError("unauthorized", `registry ${ref.registry} refused access to ${ref.repository} (HTTP ${res.status}): add credentials for it to ~/.docker/config.json`);
      }
      if (res.status === 404) throw new PullError("not_found", `${ref.canonical} was not found in registry ${ref.registry}`);
      throw new PullError("unreachable", `registry ${ref.registry} answered HTTP ${res.status} for ${ref.canonical}`);
    }
  }

  /**
   * One request of any method to the registry's API for `ref`, authenticated for `access`
   * ("pull" or "pull,push"); `body` is called again when a 401 makes the request go twice.
   * The response is returned whatever its status; only an unreachable registry throws.
   */
  async send(ref: ImageReference, pathOrUrl: string, o: { method: string; access: string; headers?: Record<string, string>; body?: () => Buffer | Readable }): Promise<Response> {
    // "/blobs/…" is a path of the repository's API; "/v2/…" (an upload Location) or a URL is taken as it is.
    const api = pathOrUrl.startsWith("/") && !pathOrUrl.startsWith("/v2/");
    const url = api ? `${baseUrl(ref.registry)}/v2/${ref.repository}${pathOrUrl}` : new URL(pathOrUrl, baseUrl(ref.registry)).toString();
    const scope = `repository:${ref.repository}:${o.access}`;
    for (let attempt = 1; ; attempt++) {
      let res: Response;
      try {
        const body = o.body?.();
        res = await fetch(url, {
          method: o.method,
          headers: { ...o.headers, ...this.authHeader(ref.registry, scope) },
          body: body instanceof Readable ? (Readable.toWeb(body) as ReadableStream) : body,
          redirect: "manual",
          ...(body instanceof Readable ? { duplex: "half" } : {}),
        } as RequestInit);
      } catch (e) {
        const cause = (e as Error & { cause?: Error }).cause?.message ?? (e as Error).message;
        throw new PullError("unreachable", `cannot reach registry ${ref.registry} (${cause}); check the name and this machine's network`);
      }
      if (res.status === 401 && attempt === 1) {
        await res.body?.cancel();
        await this.authenticate(ref, res.headers.get("www-authenticate") ?? "", scope);
        continue;
      }
      return res;
    }
  }

  private async follow(url: string, headers: Record<string, string>): Promise<Response> {
    const origin = new URL(url).origin;
    let current = url;
    for (let hop = 0; hop < 6; hop++) {
      const sameOrigin = new URL(current).origin === origin;
      const h = sameOrigin ? headers : Object.fromEntries(Object.entries(headers).filter(([k]) => k.toLowerCase() !== "authorization"));
      const res = await fetch(current, { headers: h, redirect: "manual" });
      if (res.status >= 300 && res.status < 400 && res.headers.get("location")) {
        await res.body?.cancel();
        current = new URL(res.headers.get("location")!, current).toString();
        continue;
      }
      return res;
    }
    throw new Error("too many redirects");
  }

  private authHeader(registry: string, scope: string): Record<string, string> {
    const t = this.tokens.get(`${registry}|${scope}`);
    return t ? { Authorization: t } : {};
  }

  private async authenticate(ref: ImageReference, challenge: string, scope: string): Promise<void> {
    const creds = await (this.opts.credentials ?? dockerConfigCredentials)(ref.registry);
    const basic = creds ? `Basic ${Buffer.from(`${creds.username}:${creds.password}`).toString("base64")}` : undefined;
    const c = parseChallenge(challenge);
    if (c.scheme === "basic") {
      if (!basic) throw new PullError("unauthorized", `registry ${ref.registry} requires a login: add credentials for it to ~/.docker/config.json`);
      this.tokens.set(`${ref.registry}|${scope}`, basic);
      return;
    }
    if (c.scheme !== "bearer" || !c.params.realm) throw new PullError("unauthorized", `registry ${ref.registry} asked for unsupported authentication "${challenge}"`);
    const u = new URL(c.params.realm);
    if (c.params.service) u.searchParams.set("service", c.params.service);
    u.searchParams.set("scope", c.params.scope ?? scope);
    let res: Response;
    try {
      res = await fetch(u, { headers: basic ? { Authorization: basic } : {} });
    } catch (e) {
      throw new PullError(
        "unreachable",
        `cannot reach the token service of ${ref.registry} at ${u.origin} (${(e as Error & { cause?: Error }).cause?.message ?? (e as Error).message})`,
      );
    }
    if (!res.ok) {
      await res.body?.cancel();
      throw new PullError(
        "unauthorized",
        `the token service of ${ref.registry} refused access to ${ref.repository} (HTTP ${res.status})${basic ? "" : ": add credentials for it to ~/.docker/config.json"}`,
      );
    }
    const body = (await res.json().catch(() => ({}))) as { token?: string; access_token?: string };
    const token = body.token ?? body.access_token;
    if (!token) throw new PullError("unauthorized", `the token service of ${ref.registry} returned no token`);
    this.tokens.set(`${ref.registry}|${scope}`, `Bearer ${token}`);
  }
}

async function readLimited(res: Response, max: number, what: string): Promise<Buffer> {
  const len = Number(res.headers.get("content-length") ?? 0);
  if (len > max) {
    await res.body?.cancel();
    throw new PullError("invalid", `${what} is ${len} bytes, more than the ${max} byte limit`);
  }
  const parts: Buffer[] = [];
  let size = 0;
  for await (const c of res.body as unknown as AsyncIterable<Uint8Array>) {
    size += c.length;
    if (size > max) throw new PullError("invalid", `${what} is larger than the ${max} byte limit`);
    parts.push(Buffer.from(c));
  }
  return Buffer.concat(parts);
}
