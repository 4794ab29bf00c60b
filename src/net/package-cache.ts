// The egress proxy's package cache: package files fetched over plain HTTP (wheels and sdists,
// npm tarballs, Debian packages) are kept on the host by their URL, so the next sandbox that
// installs the same version gets it from here. Only files whose URL names a version are kept
// (index pages and metadata change, so they always go upstream), only whole 200 responses that
// do not say no-store, and within a byte budget: the least recently used go first. HTTPS
// through CONNECT is a tunnel the proxy cannot see into, and is never cached.
import { createHash, randomBytes } from "node:crypto";
import { createWriteStream } from "node:fs";
import { mkdir, readdir, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";

/** URLs of files that a version names once and for all. */
const PACKAGE_FILE = /\.(whl|tar\.gz|tgz|tar\.bz2|tar\.xz|zip|deb|udeb|gem|crate|egg|apk)$/i;

export interface CachedFile {
  url: string;
  size: number;
  contentType: string;
  storedAt: string;
  lastUsed: number;
}

export interface CacheStats {
  entries: number;
  bytes: number;
  hits: number;
  misses: number;
}

/** Whether a proxied request may be answered from, or stored in, the cache. */
export function cacheable(method: string, url: URL, headers: Map<string, string>): boolean {
  if (method !== "GET") return false;
  if (headers.has("range") || headers.has("authorization") || headers.has("cookie")) return false;
  return PACKAGE_FILE.test(url.pathname);
}

/** A response that may be kept: 200, a known or no length, and nothing saying not to. */
export function storable(status: number, headers: Record<string, string | string[] | undefined>): boolean {
  const cc = String(headers["cache-control"] ?? "").toLowerCase();
  return status === 200 && !/no-store|private/.test(cc) && !headers["content-range"] && !headers["set-cookie"];
}

export class PackageCache {
  private readonly index = new Map<string, CachedFile>();
  private bytes = 0;
  private loaded: Promise<void> | null = null;
  private hits = 0;
  private misses = 0;
  /** The last use stamped: uses within one millisecond still get distinct, ordered stamps, so the least recent goes first. */
  private lastStamp = 0;

  constructor(
    private readonly dir: string,
    private readonly maxBytes: number,
  ) {}

  private stamp(): number {
    this.lastStamp = Math.max(Date.now(), this.lastStamp + 1);
    return this.lastStamp;
  }

  private key(url: string): string {
    return createHash("sha256").update(url).digest("hex");
  }

  private body(key: string): string {
    return join(this.dir, `${key}.data`);
  }

  private load(): Promise<void> {
    this.loaded ??= (async () => {
      await mkdir(this.dir, { recursive: true, mode: 0o700 });
      for (const f of await readdir(this.dir)) {
        if (f.startsWith(".")) await rm(join(this.dir, f), { force: true }); // a store cut short
        if (!f.endsWith(".json")) continue;
        const meta = await readFile(join(this.dir, f), "utf8").then(
          (t) => JSON.parse(t) as CachedFile,
          () => null,
        );
        const size = await stat(this.body(f.slice(0, -5))).then(
          (s) => s.size,
          () => -1,
        );
        if (!meta || size !== meta.size) {
          await this.drop(f.slice(0, -5));
          continue;
        }
        this.index.set(f.slice(0, -5), meta);
        this.lastStamp = Math.max(this.lastStamp, meta.lastUsed);
        this.bytes += meta.size;
      }
    })();
    return this.loaded;
  }

  /** The cached file for a URL (marked used now), or null. */
  async lookup(url: string): Promise<{ file: string; meta: CachedFile } | null> {
    await this.load();
    const key = this.key(url);
    const meta = this.index.get(key);
    if (!meta) {
      this.misses++;
      return null;
    }
    this.hits++;
    meta.lastUsed = this.stamp();
    return { file: this.body(key), meta };
  }

  /**
   * Starts storing a response body for `url`: write the bytes, then `commit` (kept when the byte
   * count matches `expected`, if given) or `abort`.
   */
  async store(url: string, contentType: string, expected: number | null): Promise<CacheWriter | null> {
    await this.load();
    if (expected !== null && expected > this.maxBytes / 4) return null; // one file may not empty the cache
    const key = this.key(url);
    const tmp = join(this.dir, `.${key}.${randomBytes(4).toString("hex")}`);
    const out = createWriteStream(tmp, { mode: 0o600 });
    let written = 0;
    let failed = false;
    out.on("error", () => {
      failed = true;
    });
    return {
      write: (chunk: Buffer) => {
        written += chunk.length;
        if (written > this.maxBytes / 4) failed = true;
        if (!failed) out.write(chunk);
      },
      commit: async () => {
        await new Promise<void>((r) => out.end(r));
        if (failed || (expected !== null && written !== expected)) return void (await rm(tmp, { force: true }));
        const meta: CachedFile = { url, size: written, contentType, storedAt: new Date().toISOString(), lastUsed: this.stamp() };
        await rename(tmp, this.body(key));
        await writeFile(join(this.dir, `${key}.json`), JSON.stringify(meta));
        if (!this.index.has(key)) this.bytes += written;
        this.index.set(key, meta);
        await this.evict();
      },
      abort: async () => {
        out.destroy();
        await rm(tmp, { force: true });
      },
    };
  }

  /** Removes the least recently used files until the cache fits its budget. */
  private async evict(): Promise<void> {
    if (this.bytes <= this.maxBytes) return;
    const byAge = [...this.index.entries()].sort((a, b) => a[1].lastUsed - b[1].lastUsed);
    for (const [key, meta] of byAge) {
      if (this.bytes <= this.maxBytes) break;
      this.index.delete(key);
      this.bytes -= meta.size;
      await this.drop(key);
    }
  }

  private async drop(key: string): Promise<void> {
    await rm(this.body(key), { force: true });
    await rm(join(this.dir, `${key}.json`), { force: true });
  }

  async stats(): Promise<CacheStats> {
    await this.load();
    return { entries: this.index.size, bytes: this.bytes, hits: this.hits, misses: this.misses };
  }
}

export interface CacheWriter {
  write(chunk: Buffer): void;
  commit(): Promise<void>;
  abort(): Promise<void>;
}
