// A streaming reader of tar archives (ustar, GNU long names, PAX), for image layers and copied trees. It reads
// headers and hands out each entry's body as a stream; the bytes are never trusted: sizes,
// checksums and names are checked before anything is written.

export type TarEntryType = "file" | "dir" | "symlink" | "hardlink" | "char" | "block" | "fifo";

export interface TarEntry {
  path: string;
  type: TarEntryType;
  mode: number;
  uid: number;
  gid: number;
  size: number;
  mtime: number;
  linkname: string;
  devmajor: number;
  devminor: number;
  /** Extended attributes from PAX SCHILY.xattr.* records (file capabilities, …). */
  xattrs: Record<string, Buffer>;
}

export class TarError extends Error {
  override name = "TarError";
}

const BLOCK = 512;
const MAX_META = 1024 * 1024; // long names and PAX headers larger than this are refused

/** Pulls exact byte counts out of an async iterable of chunks. */
class ByteReader {
  private buf = Buffer.alloc(0);
  private done = false;
  constructor(private readonly it: AsyncIterator<Buffer>) {}

  private async fill(n: number): Promise<boolean> {
    while (this.buf.length < n && !this.done) {
      const r = await this.it.next();
      if (r.done) this.done = true;
      else this.buf = this.buf.length ? Buffer.concat([this.buf, r.value]) : Buffer.from(r.value);
    }
    return this.buf.length >= n;
  }

  /** Exactly n bytes, or null at a clean end of input. */
  async read(n: number): Promise<Buffer | null> {
    if (!(await this.fill(n))) {
      if (this.buf.length === 0) return null;
      throw new TarError("archive ends in the middle of a record");
    }
    const out = this.buf.subarray(0, n);
    this.buf = this.buf.subarray(n);
    return out;
  }

  /** Up to `max` bytes that are available now or after one more chunk. */
  async readSome(max: number): Promise<Buffer> {
    if (!this.buf.length) await this.fill(1);
    if (!this.buf.length) throw new TarError("archive ends inside a file");
    const out = this.buf.subarray(0, Math.min(max, this.buf.length));
    this.buf = this.buf.subarray(out.length);
    return out;
  }
}

function str(b: Buffer, off: number, len: number): string {
  const s = b.subarray(off, off + len);
  const z = s.indexOf(0);
  return (z >= 0 ? s.subarray(0, z) : s).toString("utf8");
}

function num(b: Buffer, off: number, len: number, what: string): number {
  const f = b.subarray(off, off + len);
  if (f[0] & 0x80) {
    // GNU base-256 for values that do not fit in octal
    let v = 0;
    for (let i = 1; i < f.length; i++) v = v * 256 + f[i];
    if (f[0] & 0x40) throw new TarError(`negative ${what} in tar header`);
    return v + (f[0] & 0x3f) * 256 ** (f.length - 1);
  }
  const s = str(b, off, len).trim();
  if (!s) return 0;
  if (!/^[0-7]+$/.test(s)) throw new TarError(`bad ${what} field "${s}" in tar header`);
  return parseInt(s, 8);
}

function parsePax(data: Buffer): Map<string, Buffer> {
  const out = new Map<string, Buffer>();
  let off = 0;
  while (off < data.length) {
    const sp = data.indexOf(0x20, off);
    if (sp < 0) break;
    const len = Number(data.subarray(off, sp).toString());
    if (!Number.isInteger(len) || len <= 0 || off + len > data.length) throw new TarError("malformed PAX header");
    const rec = data.subarray(sp + 1, off + len - 1); // drop the trailing newline
    const eq = rec.indexOf(0x3d);
    if (eq > 0) out.set(rec.subarray(0, eq).toString("utf8"), rec.subarray(eq + 1));
    off += len;
  }
  return out;
}

const TYPES: Record<string, TarEntryType> = { "0": "file", "\0": "file", "7": "file", "1": "hardlink", "2": "symlink", "3": "char", "4": "block", "5": "dir", "6": "fifo" };

/**
 * Reads entries one by one; the caller must consume (or skip) `body` before asking for the next.
 * With `nonEmpty`, input that holds no bytes at all is an error rather than an empty archive.
 */
export async function* readTar(
  source: AsyncIterable<Buffer> | Iterable<Buffer>,
  opts: { nonEmpty?: boolean } = {},
): AsyncGenerator<{ entry: TarEntry; body: AsyncIterable<Buffer> }> {
  const r = new ByteReader(
    Symbol.asyncIterator in source
      ? source[Symbol.asyncIterator]()
      : (async function* () {
          yield* source;
        })(),
  );
  let longName: string | null = null;
  let longLink: string | null = null;
  let pax = new Map<string, Buffer>();
  for (let first = true; ; first = false) {
    const h = await r.read(BLOCK);
    if (!h && first && opts.nonEmpty) throw new TarError("the body is empty");
    if (!h) return;
    if (h.every((x) => x === 0)) return; // end-of-archive marker
    let sum = 0;
    for (let i = 0; i < BLOCK; i++) sum += i >= 148 && i < 156 ? 32 : h[i];
    if (sum !== num(h, 148, 8, "checksum")) throw new TarError("tar header checksum mismatch");
    const flag = String.fromCharCode(h[156]);
    const size = num(h, 124, 12, "size");
    const padded = Math.ceil(size / BLOCK) * BLOCK;
    if (flag === "L" || flag === "K" || flag === "x" || flag === "g") {
      if (size > MAX_META) throw new TarError(`tar metadata record of ${size} bytes is too large`);
      const data = (await r.read(padded))?.subarray(0, size);
      if (!data) throw new TarError("archive ends inside a metadata record");
      if (flag === "L") longName = str(data, 0, data.length);
      else if (flag === "K") longLink = str(data, 0, data.length);
      else if (flag === "x") pax = parsePax(data);
      continue; // global headers ('g') carry nothing layers need
    }
    const type = TYPES[flag];
    const prefix = h.subarray(257, 262).toString() === "ustar" ? str(h, 345, 155) : "";
    const name = longName ?? pax.get("path")?.toString("utf8") ?? (prefix ? `${prefix}/${str(h, 0, 100)}` : str(h, 0, 100));
    const entry: TarEntry = {
      path: name,
      type: type ?? "file",
      mode: num(h, 100, 8, "mode") & 0o7777,
      uid: pax.has("uid") ? Number(pax.get("uid")) : num(h, 108, 8, "uid"),
      gid: pax.has("gid") ? Number(pax.get("gid")) : num(h, 116, 8, "gid"),
      size: pax.has("size") ? Number(pax.get("size")) : size,
      mtime: pax.has("mtime") ? Math.floor(Number(pax.get("mtime"))) : num(h, 136, 12, "mtime"),
      linkname: longLink ?? pax.get("linkpath")?.toString("utf8") ?? str(h, 157, 100),
      devmajor: num(h, 329, 8, "devmajor"),
      devminor: num(h, 337, 8, "devminor"),
      xattrs: {},
    };
    for (const [k, v] of pax) if (k.startsWith("SCHILY.xattr.")) entry.xattrs[k.slice(13)] = v;
    longName = longLink = null;
    pax = new Map();
    if (!Number.isSafeInteger(entry.size) || entry.size < 0) throw new TarError(`bad size for ${entry.path}`);
    const bodySize = entry.type === "file" ? entry.size : size;
    let left = bodySize;
    const body = (async function* () {
      while (left > 0) {
        const c = await r.readSome(Math.min(left, 1 << 20));
        left -= c.length;
        yield c;
      }
    })();
    if (!type) {
      // Unknown entry types (sparse files, vendor extensions) are refused, not guessed at.
      throw new TarError(`unsupported tar entry type '${flag}' for ${entry.path}`);
    }
    yield { entry, body };
    // Whatever the caller did not read is skipped, then the block padding.
    while (left > 0) {
      const c = await r.readSome(Math.min(left, 1 << 20));
      left -= c.length;
    }
    const pad = Math.ceil(bodySize / BLOCK) * BLOCK - bodySize;
    if (pad && !(await r.read(pad))) throw new TarError("archive ends inside padding");
  }
}

/** An entry's path relative to where it is unpacked, or null for the archive's own "./"; a TarError for one that would land outside. */
export function safeEntryPath(raw: string): string | null {
  const p = raw.replace(/^(\.\/)+/, "").replace(/\/+$/, "");
  if (p === "" || p === ".") return null;
  if (p.startsWith("/")) throw new TarError(`entry "${raw}" is an absolute path: entries must be relative`);
  if (p.split("/").includes("..")) throw new TarError(`entry "${raw}" contains "..": entries must stay inside the target directory`);
  if (p.includes("\0")) throw new TarError(`entry "${raw}" contains a NUL byte`);
  return p.replace(/\/{2,}/g, "/");
}
