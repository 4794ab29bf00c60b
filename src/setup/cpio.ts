// A writer for the "newc" cpio format the kernel unpacks as an initramfs. Written here so the
// archive is byte-for-byte reproducible (fixed mtimes, owners and inode numbers).

export interface CpioEntry {
  name: string;
  /** Full mode including the file type bits, e.g. 0o100755 or 0o040755. */
  mode: number;
  data?: Buffer;
}

function field(n: number): string {
  return n.toString(16).padStart(8, "0");
}

function pad4(n: number): Buffer {
  return Buffer.alloc((4 - (n % 4)) % 4);
}

/** Serialises entries (parents before children) into one archive ending with TRAILER!!!. */
export function cpioNewc(entries: CpioEntry[]): Buffer {
  const parts: Buffer[] = [];
  let ino = 1;
  for (const e of [...entries, { name: "TRAILER!!!", mode: 0 }]) {
    const data = e.data ?? Buffer.alloc(0);
    const name = Buffer.from(`${e.name}\0`);
    const header =
      "070701" +
      field(e.name === "TRAILER!!!" ? 0 : ino++) +
      field(e.mode) +
      field(0) +
      field(0) + // uid, gid
      field(e.mode & 0o040000 ? 2 : 1) + // nlink
      field(0) + // mtime
      field(data.length) +
      field(0) +
      field(0) +
      field(0) +
      field(0) + // dev and rdev major/minor
      field(name.length) +
      field(0); // check
    const h = Buffer.from(header, "ascii");
    parts.push(h, name, pad4(h.length + name.length), data, pad4(data.length));
  }
  return Buffer.concat(parts);
}
