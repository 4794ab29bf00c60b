// Test helper: writes tar archives entry by entry (ustar headers, PAX for long names and
// xattrs), including entries no well-behaved tool would produce.
export interface WriteEntry {
  path: string;
  type?: "file" | "dir" | "symlink" | "hardlink" | "char" | "fifo";
  data?: Buffer | string;
  mode?: number;
  uid?: number;
  gid?: number;
  linkname?: string;
  devmajor?: number;
  devminor?: number;
  xattrs?: Record<string, Buffer>;
}

const FLAGS = { file: "0", hardlink: "1", symlink: "2", char: "3", dir: "5", fifo: "6" } as const;

function header(name: string, flag: string, size: number, e: WriteEntry): Buffer {
  const h = Buffer.alloc(512);
  const put = (s: string, off: number, len: number) => h.write(s.slice(0, len), off, "utf8");
  const oct = (n: number, off: number, len: number) => put(`${n.toString(8).padStart(len - 1, "0")}\0`, off, len);
  put(name, 0, 100);
  oct(e.mode ?? (flag === "5" ? 0o755 : 0o644), 100, 8);
  oct(e.uid ?? 0, 108, 8);
  oct(e.gid ?? 0, 116, 8);
  oct(size, 124, 12);
  oct(1700000000, 136, 12);
  h.write("        ", 148);
  h.write(flag, 156);
  put(e.linkname ?? "", 157, 100);
  h.write("ustar\0" + "00", 257, "binary");
  oct(e.devmajor ?? 0, 329, 8);
  oct(e.devminor ?? 0, 337, 8);
  let sum = 0;
  for (const b of h) sum += b;
  h.write(`${sum.toString(8).padStart(6, "0")}\0 `, 148, "binary");
  return h;
}

function pad(n: number): Buffer {
  return Buffer.alloc((512 - (n % 512)) % 512);
}

function paxRecord(key: string, value: Buffer): Buffer {
  const body = Buffer.concat([Buffer.from(` ${key}=`), value, Buffer.from("\n")]);
  let len = body.length + 1;
  while (String(len).length + body.length !== len) len = String(len).length + body.length;
  return Buffer.concat([Buffer.from(String(len)), body]);
}

export function tarOf(entries: WriteEntry[]): Buffer {
  const out: Buffer[] = [];
  for (const e of entries) {
    const type = e.type ?? "file";
    const data = type === "file" ? Buffer.from(e.data ?? "") : Buffer.alloc(0);
    const pax: Buffer[] = [];
    if (Buffer.byteLength(e.path) > 99) pax.push(paxRecord("path", Buffer.from(e.path)));
    for (const [k, v] of Object.entries(e.xattrs ?? {})) pax.push(paxRecord(`SCHILY.xattr.${k}`, v));
    if (pax.length) {
      const p = Buffer.concat(pax);
      out.push(header("PaxHeader", "x", p.length, { path: "PaxHeader" }), p, pad(p.length));
    }
    out.push(header(e.path, FLAGS[type], data.length, e), data, pad(data.length));
  }
  out.push(Buffer.alloc(1024));
  return Buffer.concat(out);
}
