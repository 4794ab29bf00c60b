// Past 500 lines because it is one protocol: each handler is a few lines next to its codec.
// The host side of a shared directory: a FUSE server (protocol 7.31) answering the guest
// kernel's requests from one host directory. Everything in a request is the guest's to choose,
// so: every message is length-checked before it is read; names are single path components (no
// "/", no "..", no NUL); a node is a path relative to the share, and before each operation every
// directory on the way to it is checked to be a real directory (a symbolic link is never followed
// on the host: its target is handed to the guest, which resolves it in its own filesystem);
// files are opened with O_NOFOLLOW; requests are answered one at a time, so no guest request can
// change the tree between another's check and its use. New files belong to the share's owner,
// set-id and sticky bits are dropped, device nodes cannot be made and owners cannot be changed.
import { constants as C } from "node:fs";
import { chmod, chown, lchown, link, lstat, mkdir, open, readdir, readlink, rename, rmdir, statfs, symlink, truncate, unlink, utimes, type FileHandle } from "node:fs/promises";
import type { Stats } from "node:fs";
import { join } from "node:path";
import type { Readable, Writable } from "node:stream";
import { ignore } from "../util/ignore.js";

const OP = {
  LOOKUP: 1,
  FORGET: 2,
  GETATTR: 3,
  SETATTR: 4,
  READLINK: 5,
  SYMLINK: 6,
  MKNOD: 8,
  MKDIR: 9,
  UNLINK: 10,
  RMDIR: 11,
  RENAME: 12,
  LINK: 13,
  OPEN: 14,
  READ: 15,
  WRITE: 16,
  STATFS: 17,
  RELEASE: 18,
  FSYNC: 20,
  FLUSH: 25,
  INIT: 26,
  OPENDIR: 27,
  READDIR: 28,
  RELEASEDIR: 29,
  FSYNCDIR: 30,
  ACCESS: 34,
  CREATE: 35,
  INTERRUPT: 36,
  DESTROY: 38,
  BATCH_FORGET: 42,
  RENAME2: 45,
} as const;

const O_ACCMODE = 3;
const IN_HDR = 40;
const OUT_HDR = 16;
const MAX_WRITE = 128 * 1024;
const MAX_REQUEST = MAX_WRITE + 4096;
const TTL_S = 1; // how long the guest may trust an entry or attributes: host changes show within it

// errno values as the guest kernel expects them (negated in replies)
const E: Record<string, number> = {
  EPERM: 1,
  ENOENT: 2,
  EIO: 5,
  EBADF: 9,
  EACCES: 13,
  EEXIST: 17,
  EXDEV: 18,
  ENOTDIR: 20,
  EISDIR: 21,
  EINVAL: 22,
  EFBIG: 27,
  ENOSPC: 28,
  EROFS: 30,
  EMLINK: 31,
  ENAMETOOLONG: 36,
  ENOSYS: 38,
  ENOTEMPTY: 39,
  ELOOP: 40,
  ENODATA: 61,
};

class FsError extends Error {
  constructor(readonly errno: number) {
    super(`errno ${errno}`);
  }
}
const fail = (code: keyof typeof E): never => {
  throw new FsError(E[code]);
};

interface Node {
  rel: string; // "" for the root
  lookups: number;
}

interface Handle {
  fh?: FileHandle;
  entries?: { name: string; ino: number; type: number }[];
}

export interface ShareOptions {
  /** The host directory, resolved (no symbolic links in it). */
  root: string;
  readOnly: boolean;
  /** Owner of what the guest creates (the share's owner), when the server may chown. */
  owner?: { uid: number; gid: number };
}

/** Serves FUSE requests read from `requests`, writing replies to `replies`, until either ends. */
export function serveShare(requests: Readable, replies: Writable, o: ShareOptions): Promise<void> {
  return new FuseServer(o, replies).run(requests);
}

class FuseServer {
  private readonly nodes = new Map<bigint, Node>([[1n, { rel: "", lookups: 1 }]]);
  private readonly byPath = new Map<string, bigint>([["", 1n]]);
  private nextNode = 2n;
  private readonly handles = new Map<bigint, Handle>();
  private nextHandle = 1n;

  constructor(
    private readonly o: ShareOptions,
    private readonly out: Writable,
  ) {}

  async run(requests: Readable): Promise<void> {
    let buf: Buffer = Buffer.alloc(0);
    try {
      for await (const chunk of requests) {
        buf = buf.length ? Buffer.concat([buf, chunk as Buffer]) : (chunk as Buffer);
        while (buf.length >= 4) {
          const len = buf.readUInt32LE(0);
          if (len < IN_HDR || len > MAX_REQUEST) throw new Error(`a FUSE request of ${len} bytes`);
          if (buf.length < len) break;
          const msg = buf.subarray(0, len);
          buf = buf.subarray(len);
          await this.handle(msg); // one at a time: see the top of the file
        }
      }
    } finally {
      for (const h of this.handles.values()) await h.fh?.close().catch(ignore("closing: a handle already closed"));
      this.handles.clear();
    }
  }

  private reply(unique: bigint, error: number, body: Buffer = Buffer.alloc(0)): void {
    const h = Buffer.alloc(OUT_HDR);
    h.writeUInt32LE(OUT_HDR + (error ? 0 : body.length), 0);
    h.writeInt32LE(-error, 4);
    h.writeBigUInt64LE(unique, 8);
    this.out.write(error ? h : Buffer.concat([h, body]));
  }

  private async handle(msg: Buffer): Promise<void> {
    const opcode = msg.readUInt32LE(4);
    const unique = msg.readBigUInt64LE(8);
    const nodeid = msg.readBigUInt64LE(16);
    const arg = msg.subarray(IN_HDR);
    if (opcode === OP.FORGET) return this.forget(nodeid, arg.length >= 8 ? arg.readBigUInt64LE(0) : 0n);
    if (opcode === OP.BATCH_FORGET) {
      const count = arg.length >= 8 ? arg.readUInt32LE(0) : 0;
      for (let i = 0; i < count && 8 + (i + 1) * 16 <= arg.length; i++) this.forget(arg.readBigUInt64LE(8 + i * 16), arg.readBigUInt64LE(16 + i * 16));
      return;
    }
    if (opcode === OP.INTERRUPT) return; // requests are answered in order, soon enough
    try {
      const body = await this.op(opcode, nodeid, arg);
      this.reply(unique, 0, body);
    } catch (e) {
      this.reply(unique, e instanceof FsError ? e.errno : errnoOf(e));
    }
  }

  private async op(opcode: number, nodeid: bigint, arg: Buffer): Promise<Buffer> {
    const writes = new Set<number>([OP.SETATTR, OP.SYMLINK, OP.MKNOD, OP.MKDIR, OP.UNLINK, OP.RMDIR, OP.RENAME, OP.RENAME2, OP.LINK, OP.WRITE, OP.CREATE]);
    if (this.o.readOnly && writes.has(opcode)) fail("EROFS");
    switch (opcode) {
      case OP.INIT:
        return this.init(arg);
      case OP.DESTROY:
        return Buffer.alloc(0);
      case OP.LOOKUP:
        return this.entry(this.child(nodeid, cstring(arg, 0)));
      case OP.GETATTR:
        return attrOut(await this.stat(this.node(nodeid).rel));
      case OP.SETATTR:
        return this.setattr(nodeid, arg);
      case OP.READLINK:
        return Buffer.from(await readlink(await this.host(this.node(nodeid).rel)));
      case OP.SYMLINK: {
        const name = cstring(arg, 0);
        const target = cstring(arg, Buffer.byteLength(name) + 1);
        const rel = this.child(nodeid, name);
        await symlink(target, await this.host(rel));
        await this.own(rel, true);
        return this.entry(rel);
      }
      case OP.MKNOD: {
        need(arg, 16);
        const mode = arg.readUInt32LE(0);
        if ((mode & C.S_IFMT) !== C.S_IFREG) fail("EPERM"); // no devices, FIFOs or sockets on the host
        const rel = this.child(nodeid, cstring(arg, 16));
        const fh = await open(await this.host(rel), C.O_CREAT | C.O_EXCL | C.O_WRONLY | C.O_NOFOLLOW, mode & 0o777);
        await fh.close();
        await this.own(rel);
        return this.entry(rel);
      }
      case OP.MKDIR: {
        need(arg, 8);
        const rel = this.child(nodeid, cstring(arg, 8));
        await mkdir(await this.host(rel), arg.readUInt32LE(0) & 0o777);
        await this.own(rel);
        return this.entry(rel);
      }
      case OP.UNLINK: {
        const rel = this.child(nodeid, cstring(arg, 0));
        await unlink(await this.host(rel));
        return Buffer.alloc(0);
      }
      case OP.RMDIR: {
        const rel = this.child(nodeid, cstring(arg, 0));
        await rmdir(await this.host(rel));
        return Buffer.alloc(0);
      }
      case OP.RENAME:
      case OP.RENAME2: {
        const head = opcode === OP.RENAME ? 8 : 16;
        need(arg, head);
        const newdir = arg.readBigUInt64LE(0);
        if (opcode === OP.RENAME2 && arg.readUInt32LE(8) !== 0) fail("EINVAL"); // RENAME_NOREPLACE/EXCHANGE: not offered
        const oldName = cstring(arg, head);
        const newName = cstring(arg, head + Buffer.byteLength(oldName) + 1);
        const from = this.child(nodeid, oldName);
        const to = this.child(newdir, newName);
        await rename(await this.host(from), await this.host(to));
        this.moved(from, to);
        return Buffer.alloc(0);
      }
      case OP.LINK: {
        need(arg, 8);
        const src = this.node(arg.readBigUInt64LE(0)).rel;
        const rel = this.child(nodeid, cstring(arg, 8));
        await link(await this.host(src), await this.host(rel));
        return this.entry(rel);
      }
      case OP.OPEN:
      case OP.OPENDIR:
        return this.open(opcode, nodeid, arg);
      case OP.CREATE: {
        need(arg, 16);
        const flags = arg.readUInt32LE(0);
        const mode = arg.readUInt32LE(4);
        const rel = this.child(nodeid, cstring(arg, 16));
        const fh = await open(await this.host(rel), openFlags(flags) | C.O_CREAT | C.O_NOFOLLOW, mode & 0o777);
        await this.own(rel);
        const id = this.nextHandle++;
        this.handles.set(id, { fh });
        return Buffer.concat([await this.entry(rel), openOut(id)]);
      }
      case OP.READ: {
        need(arg, 24);
        const h = this.fileHandle(arg.readBigUInt64LE(0));
        if (!h.fh) fail("EBADF");
        const size = Math.min(arg.readUInt32LE(16), MAX_WRITE);
        const buf = Buffer.alloc(size);
        const { bytesRead } = await h.fh!.read(buf, 0, size, Number(arg.readBigUInt64LE(8)));
        return buf.subarray(0, bytesRead);
      }
      case OP.WRITE: {
        need(arg, 40);
        const h = this.fileHandle(arg.readBigUInt64LE(0));
        if (!h.fh) fail("EBADF");
        const size = arg.readUInt32LE(16);
        if (40 + size > arg.length) fail("EINVAL");
        const { bytesWritten } = await h.fh!.write(arg.subarray(40, 40 + size), 0, size, Number(arg.readBigUInt64LE(8)));
        const out = Buffer.alloc(8);
        out.writeUInt32LE(bytesWritten, 0);
        return out;
      }
      case OP.READDIR:
        return this.readdir(arg);
      case OP.RELEASE:
      case OP.RELEASEDIR: {
        need(arg, 8);
        const id = arg.readBigUInt64LE(0);
        await this.handles.get(id)?.fh?.close().catch(ignore("a handle already closed"));
        this.handles.delete(id);
        return Buffer.alloc(0);
      }
      case OP.FLUSH:
      case OP.FSYNCDIR:
        return Buffer.alloc(0);
      case OP.FSYNC: {
        need(arg, 8);
        await this.handles.get(arg.readBigUInt64LE(0))?.fh?.sync();
        return Buffer.alloc(0);
      }
      case OP.STATFS:
        return this.statfs();
      case OP.ACCESS:
        await this.host(this.node(nodeid).rel);
        return Buffer.alloc(0);
      default:
        return fail("ENOSYS");
    }
  }

  private init(arg: Buffer): Buffer {
    need(arg, 16);
    const major = arg.readUInt32LE(0);
    if (major < 7) fail("EINVAL");
    const out = Buffer.alloc(64);
    out.writeUInt32LE(7, 0);
    out.writeUInt32LE(Math.min(31, arg.readUInt32LE(4)), 4);
    out.writeUInt32LE(arg.readUInt32LE(8), 8); // max_readahead as offered
    // BIG_WRITES (1<<5), AUTO_INVAL_DATA (1<<12: host changes drop the guest's cached pages), MAX_PAGES (1<<22)
    out.writeUInt32LE(((1 << 5) | (1 << 12) | (1 << 22)) & arg.readUInt32LE(12), 12);
    out.writeUInt16LE(16, 16); // max_background
    out.writeUInt16LE(12, 18); // congestion_threshold
    out.writeUInt32LE(MAX_WRITE, 20);
    out.writeUInt32LE(1, 24); // time_gran: nanoseconds
    out.writeUInt16LE(MAX_WRITE / 4096, 28); // max_pages
    return out;
  }

  private forget(nodeid: bigint, n: bigint): void {
    const node = this.nodes.get(nodeid);
    if (!node || nodeid === 1n) return;
    node.lookups -= Number(n);
    if (node.lookups <= 0) {
      this.nodes.delete(nodeid);
      if (this.byPath.get(node.rel) === nodeid) this.byPath.delete(node.rel);
    }
  }

  private node(nodeid: bigint): Node {
    const n = this.nodes.get(nodeid);
    if (!n) fail("ENOENT");
    return n!;
  }

  private fileHandle(id: bigint): Handle {
    const h = this.handles.get(id);
    if (!h) fail("EBADF");
    return h!;
  }

  /** The path of `name` in directory `parent`; the name must be one plain component. */
  private child(parent: bigint, name: string): string {
    if (!name || name === "." || name === ".." || name.includes("/") || name.includes("\0")) fail("EINVAL");
    if (Buffer.byteLength(name) > 255) fail("ENAMETOOLONG");
    const dir = this.node(parent).rel;
    return dir ? `${dir}/${name}` : name;
  }

  /**
   * The host path of a share path, after checking that every directory on the way is a real
   * directory inside the share (the last component may be anything, and is not followed).
   */
  private async host(rel: string): Promise<string> {
    const parts = rel ? rel.split("/") : [];
    let cur = this.o.root;
    for (let i = 0; i < parts.length - 1; i++) {
      cur = join(cur, parts[i]);
      const st = await lstat(cur).catch(() => fail("ENOENT"));
      if (!st.isDirectory()) fail(st.isSymbolicLink() ? "ELOOP" : "ENOTDIR");
    }
    return parts.length ? join(cur, parts[parts.length - 1]) : cur;
  }

  private async stat(rel: string): Promise<Stats> {
    return lstat(await this.host(rel), { bigint: false });
  }

  /** Looks a path up: a node for it (counted), with its attributes. */
  private async entry(rel: string): Promise<Buffer> {
    const st = await this.stat(rel);
    let id = this.byPath.get(rel);
    if (id === undefined) {
      id = this.nextNode++;
      this.byPath.set(rel, id);
      this.nodes.set(id, { rel, lookups: 0 });
    }
    this.nodes.get(id)!.lookups++;
    const out = Buffer.alloc(40);
    out.writeBigUInt64LE(id, 0);
    out.writeBigUInt64LE(0n, 8); // generation
    out.writeBigUInt64LE(BigInt(TTL_S), 16);
    out.writeBigUInt64LE(BigInt(TTL_S), 24);
    return Buffer.concat([out, attr(st)]);
  }

  // A rename moves the node and everything under it.
  private moved(from: string, to: string): void {
    for (const [path, id] of [...this.byPath]) {
      if (path !== from && !path.startsWith(`${from}/`)) continue;
      const next = to + path.slice(from.length);
      this.byPath.delete(path);
      const old = this.byPath.get(next);
      if (old !== undefined && this.nodes.get(old)) this.nodes.get(old)!.rel = `\0gone/${old}`; // replaced: its node no longer has a path
      this.byPath.set(next, id);
      const n = this.nodes.get(id);
      if (n) n.rel = next;
    }
  }

  /** New files and directories belong to the share's owner (when this server may say so). */
  private async own(rel: string, isLink = false): Promise<void> {
    if (!this.o.owner) return;
    const p = await this.host(rel);
    await (isLink ? lchown : chown)(p, this.o.owner.uid, this.o.owner.gid).catch(ignore("not root: the file is the server's own already"));
  }

  private async setattr(nodeid: bigint, arg: Buffer): Promise<Buffer> {
    need(arg, 88);
    const valid = arg.readUInt32LE(0);
    const rel = this.node(nodeid).rel;
    const p = await this.host(rel);
    const st = await lstat(p);
    if (valid & (2 | 4)) {
      // Owners stay as they are on the host: a change to the same owner is allowed, anything else refused.
      const uid = arg.readUInt32LE(76);
      const gid = arg.readUInt32LE(80);
      if ((valid & 2 && uid !== st.uid) || (valid & 4 && gid !== st.gid)) fail("EPERM");
    }
    if (valid & 1 && !st.isSymbolicLink()) await chmod(p, arg.readUInt32LE(68) & 0o777); // no set-id or sticky bits
    if (valid & 8) {
      if (st.isDirectory()) fail("EISDIR");
      if (!st.isFile()) fail("EINVAL"); // truncate(2) would follow a link out of the share
      const fh = valid & 64 ? this.handles.get(arg.readBigUInt64LE(8))?.fh : undefined;
      if (fh) await fh.truncate(Number(arg.readBigUInt64LE(16)));
      else await truncate(p, Number(arg.readBigUInt64LE(16)));
    }
    if (valid & (16 | 32 | 128 | 256) && !st.isSymbolicLink()) {
      const now = Date.now() / 1000;
      const at = valid & 128 ? now : valid & 16 ? Number(arg.readBigUInt64LE(32)) + arg.readUInt32LE(56) / 1e9 : st.atimeMs / 1000;
      const mt = valid & 256 ? now : valid & 32 ? Number(arg.readBigUInt64LE(40)) + arg.readUInt32LE(60) / 1e9 : st.mtimeMs / 1000;
      await utimes(p, at, mt);
    }
    return attrOut(await lstat(p));
  }

  private async open(opcode: number, nodeid: bigint, arg: Buffer): Promise<Buffer> {
    need(arg, 8);
    const rel = this.node(nodeid).rel;
    const p = await this.host(rel);
    const id = this.nextHandle++;
    if (opcode === OP.OPENDIR) {
      const st = await lstat(p);
      if (!st.isDirectory()) fail("ENOTDIR");
      const dirents = await readdir(p, { withFileTypes: true });
      const entries = [
        { name: ".", ino: st.ino, type: 4 },
        { name: "..", ino: st.ino, type: 4 },
      ];
      for (const d of dirents) {
        const t = d.isDirectory() ? 4 : d.isSymbolicLink() ? 10 : d.isFile() ? 8 : d.isFIFO() ? 1 : d.isSocket() ? 12 : d.isCharacterDevice() ? 2 : d.isBlockDevice() ? 6 : 0;
        entries.push({ name: d.name, ino: 0, type: t });
      }
      this.handles.set(id, { entries });
      return openOut(id);
    }
    const flags = openFlags(arg.readUInt32LE(0));
    if (this.o.readOnly && (flags & O_ACCMODE) !== C.O_RDONLY) fail("EROFS");
    const fh = await open(p, flags | C.O_NOFOLLOW);
    this.handles.set(id, { fh });
    return openOut(id);
  }

  private readdir(arg: Buffer): Buffer {
    need(arg, 24);
    const h = this.fileHandle(arg.readBigUInt64LE(0));
    if (!h.entries) fail("EBADF");
    const offset = Number(arg.readBigUInt64LE(8));
    const size = arg.readUInt32LE(16);
    const parts: Buffer[] = [];
    let used = 0;
    for (let i = offset; i < h.entries!.length; i++) {
      const e = h.entries![i];
      const name = Buffer.from(e.name);
      const len = 24 + name.length;
      const padded = (len + 7) & ~7;
      if (used + padded > size) break;
      const d = Buffer.alloc(padded);
      d.writeBigUInt64LE(BigInt(e.ino || i + 1), 0);
      d.writeBigUInt64LE(BigInt(i + 1), 8); // the offset of the next entry
      d.writeUInt32LE(name.length, 16);
      d.writeUInt32LE(e.type, 20);
      name.copy(d, 24);
      parts.push(d);
      used += padded;
    }
    return Buffer.concat(parts);
  }

  private async statfs(): Promise<Buffer> {
    const s = await statfs(this.o.root);
    const out = Buffer.alloc(80);
    out.writeBigUInt64LE(BigInt(s.blocks), 0);
    out.writeBigUInt64LE(BigInt(s.bfree), 8);
    out.writeBigUInt64LE(BigInt(s.bavail), 16);
    out.writeBigUInt64LE(BigInt(s.files), 24);
    out.writeBigUInt64LE(BigInt(s.ffree), 32);
    out.writeUInt32LE(s.bsize, 40);
    out.writeUInt32LE(255, 44);
    out.writeUInt32LE(s.bsize, 48);
    return out;
  }
}

function need(arg: Buffer, n: number): void {
  if (arg.length < n) fail("EINVAL");
}

/** A NUL-terminated string at `off` (the guest must terminate it within the message). */
function cstring(arg: Buffer, off: number): string {
  const end = arg.indexOf(0, off);
  if (off > arg.length || end < 0) fail("EINVAL");
  return arg.subarray(off, end).toString("utf8");
}

/** The open(2) flags a request may pass on: access mode, append, truncate, exclusive. */
function openFlags(f: number): number {
  return f & (O_ACCMODE | C.O_APPEND | C.O_TRUNC | C.O_EXCL);
}

function openOut(id: bigint): Buffer {
  const out = Buffer.alloc(16);
  out.writeBigUInt64LE(id, 0);
  return out;
}

function attr(st: Stats): Buffer {
  const a = Buffer.alloc(88);
  const sec = (ms: number) => BigInt(Math.floor(ms / 1000));
  const nsec = (ms: number) => Math.round((ms % 1000) * 1e6) % 1e9;
  a.writeBigUInt64LE(BigInt(st.ino), 0);
  a.writeBigUInt64LE(BigInt(st.size), 8);
  a.writeBigUInt64LE(BigInt(st.blocks), 16);
  a.writeBigUInt64LE(sec(st.atimeMs), 24);
  a.writeBigUInt64LE(sec(st.mtimeMs), 32);
  a.writeBigUInt64LE(sec(st.ctimeMs), 40);
  a.writeUInt32LE(nsec(st.atimeMs), 48);
  a.writeUInt32LE(nsec(st.mtimeMs), 52);
  a.writeUInt32LE(nsec(st.ctimeMs), 56);
  a.writeUInt32LE(st.mode >>> 0, 60);
  a.writeUInt32LE(Math.min(st.nlink, 0xffffffff), 64);
  a.writeUInt32LE(st.uid, 68);
  a.writeUInt32LE(st.gid, 72);
  a.writeUInt32LE(0, 76); // rdev: devices are not shown as such
  a.writeUInt32LE(4096, 80);
  return a;
}

function attrOut(st: Stats): Buffer {
  const h = Buffer.alloc(16);
  h.writeBigUInt64LE(BigInt(TTL_S), 0);
  return Buffer.concat([h, attr(st)]);
}

function errnoOf(e: unknown): number {
  const code = (e as NodeJS.ErrnoException)?.code;
  return (code && E[code]) || E.EIO;
}
