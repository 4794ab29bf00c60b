// Tar headers for the archives we produce (copied trees, image layers): ustar, with a PAX
// record whenever a name, a link target or a size does not fit the fixed fields. The body bytes
// are the caller's, or a host file's (tarFileBody).
import { createReadStream } from "node:fs";

export type TarOutType = "file" | "dir" | "symlink" | "hardlink" | "char" | "block" | "fifo";

export interface TarOutEntry {
  path: string;
  type: TarOutType;
  mode: number;
  size?: number;
  mtime?: number; // seconds
  uid?: number;
  gid?: number;
  linkname?: string;
  devmajor?: number;
  devminor?: number;
}

const BLOCK = 512;
const FLAG: Record<TarOutType, string> = { file: "0", hardlink: "1", symlink: "2", char: "3", block: "4", dir: "5", fifo: "6" };

/** The two zero blocks that end an archive. */
export const TAR_END = Buffer.alloc(2 * BLOCK);

/** Zero bytes that pad a body of `size` bytes to a whole block. */
export function tarPadding(size: number): Buffer {
  return Buffer.alloc((BLOCK - (size % BLOCK)) % BLOCK);
}

function paxRecord(key: string, value: string): Buffer {
  const body = Buffer.from(` ${key}=${value}\n`);
  let len = body.length + 1;
  while (String(len).length + body.length !== len) len = String(len).length + body.length;
  return Buffer.concat([Buffer.from(String(len)), body]);
}

function block(name: string, flag: string, size: number, e: Omit<TarOutEntry, "path" | "type">): Buffer {
  const h = Buffer.alloc(BLOCK);
  const put = (s: string, off: number, len: number) => {
    const b = Buffer.from(s);
    b.copy(h, off, 0, Math.min(b.length, len));
  };
  const oct = (n: number, off: number, len: number) =>
    put(
      `${Math.max(0, Math.floor(n))
        .toString(8)
        .padStart(len - 1, "0")}\0`,
      off,
      len,
    );
  put(name, 0, 100);
  oct(e.mode & 0o7777, 100, 8);
  oct(fits(e.uid ?? 0, 8) ? (e.uid ?? 0) : 0, 108, 8);
  oct(fits(e.gid ?? 0, 8) ? (e.gid ?? 0) : 0, 116, 8);
  oct(fits(size, 12) ? size : 0, 124, 12);
  oct(e.mtime ?? 0, 136, 12);
  h.write("        ", 148, "latin1");
  h.write(flag, 156, "latin1");
  put(e.linkname ?? "", 157, 100);
  h.write("ustar\0" + "00", 257, "latin1");
  if (e.devmajor !== undefined) oct(e.devmajor, 329, 8);
  if (e.devminor !== undefined) oct(e.devminor, 337, 8);
  let sum = 0;
  for (const b of h) sum += b;
  h.write(`${sum.toString(8).padStart(6, "0")}\0 `, 148, "latin1");
  return h;
}

// A number fits an octal field of `len` bytes (len-1 digits and a NUL).
function fits(n: number, len: number): boolean {
  return n < 8 ** (len - 1);
}

/** The header block(s) of one entry: a PAX record first when a field does not fit. */
export function tarHeader(e: TarOutEntry): Buffer {
  const size = e.type === "file" ? (e.size ?? 0) : 0;
  const pax: Buffer[] = [];
  const name = e.type === "dir" && !e.path.endsWith("/") ? `${e.path}/` : e.path;
  if (Buffer.byteLength(name) > 100) pax.push(paxRecord("path", name));
  if (Buffer.byteLength(e.linkname ?? "") > 100) pax.push(paxRecord("linkpath", e.linkname ?? ""));
  if (!fits(size, 12)) pax.push(paxRecord("size", String(size)));
  if (!fits(e.uid ?? 0, 8)) pax.push(paxRecord("uid", String(e.uid)));
  if (!fits(e.gid ?? 0, 8)) pax.push(paxRecord("gid", String(e.gid)));
  const head = block(name, FLAG[e.type], size, e);
  if (!pax.length) return head;
  const records = Buffer.concat(pax);
  return Buffer.concat([block("././@PaxHeader", "x", records.length, { mode: 0o644 }), records, tarPadding(records.length), head]);
}

/**
 * The body of a host file as a tar entry whose header said `size` bytes: cut there if the file
 * grew, zero-filled if it shrank, then padded to a whole block. No empty chunks (they stall a
 * stream made from this).
 */
export async function* tarFileBody(path: string, size: number): AsyncGenerator<Buffer> {
  let sent = 0;
  if (size > 0) {
    for await (const c of createReadStream(path, { end: size - 1 }) as AsyncIterable<Buffer>) {
      sent += c.length;
      if (c.length) yield c;
    }
  }
  if (sent < size) yield Buffer.alloc(size - sent);
  const pad = tarPadding(size);
  if (pad.length) yield pad;
}
