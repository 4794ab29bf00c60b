// A volume's files on its ext4 image, read and written on the host by e2fsprogs' debugfs, which
// needs neither a mount nor a VM. Only for an image no VM has attached (content.ts decides, and
// Volumes keeps spawns off it meanwhile): two writers of one ext4 corrupt it. Paths are checked
// before they reach debugfs's command line, where a quote or a line break would end the request.
import { createReadStream, createWriteStream } from "node:fs";
import { mkdir, rm } from "node:fs/promises";
import { randomBytes } from "node:crypto";
import { join } from "node:path";
import type { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { badRequest, conflict, ForgevmError, notFound } from "../../http/errors.js";
import { run } from "../../util/process.js";
import { ignore } from "../../util/ignore.js";
import { basename, checkPath, parentOf } from "./paths.js";
import type { EntryMetadata, VolumeEntry, VolumeFileOps } from "./types.js";

const BANNER = /^debugfs \S+ \(.*\)$/;
const TYPE_BITS = 0o170000;
const S_IFREG = 0o100000;
const S_IFDIR = 0o040000;

/** One entry of `ls -p`: /inode/mode/uid/gid/name/size/. */
interface Listed {
  mode: number;
  uid: number;
  gid: number;
  name: string;
  size: number;
}

function typeOf(mode: number): VolumeEntry["type"] {
  const t = mode & TYPE_BITS;
  return t === S_IFREG ? "file" : t === S_IFDIR ? "directory" : t === 0o120000 ? "symlink" : "unknown";
}

/** A debugfs complaint as our error: a missing path 404, an existing one 409, a full image 507. */
function debugfsError(message: string, path: string): Error {
  if (/not found|No such file/i.test(message)) return notFound(`${path}: no such file or directory in the volume`);
  if (/already exists|File exists/i.test(message)) return conflict(`${path}: exists already`);
  if (/Could not allocate|No free space|no space/i.test(message)) return new ForgevmError("INSUFFICIENT_STORAGE", `the volume is full: ${message}`);
  if (/Directory not empty/i.test(message)) return conflict(`${path}: the directory is not empty`);
  return new ForgevmError("INTERNAL_ERROR", `debugfs on the volume's image: ${message}`);
}

export class ImageFiles implements VolumeFileOps {
  constructor(
    /** The volume's ext4 image. */
    private readonly image: string,
    /** Where files pass through on their way in and out. */
    private readonly tmpDir: string,
  ) {}

  /** Runs debugfs requests (one per line); throws on the first complaint, naming `path`. */
  private async debugfs(requests: string[], path: string, write = false): Promise<string> {
    const { stdout, stderr } = await run("debugfs", [...(write ? ["-w"] : []), "-f", "-", this.image], { input: `${requests.join("\n")}\n` });
    const complaint = stderr.split("\n").find((l) => l.trim() && !BANNER.test(l.trim()));
    if (complaint) throw debugfsError(complaint.trim(), path);
    return stdout;
  }

  /** The metadata `stat` prints, or null when `path` does not exist. */
  private async statOrNull(path: string): Promise<VolumeEntry | null> {
    try {
      return await this.stat(path);
    } catch (e) {
      if ((e as ForgevmError).code === "NOT_FOUND") return null;
      throw e;
    }
  }

  async stat(path: string): Promise<VolumeEntry> {
    checkPath(path);
    const out = await this.debugfs([`stat "${path}"`], path);
    return parseStat(out, path);
  }

  /** A directory's entries (not . and ..) as `ls -p` gives them. */
  private async listed(dir: string): Promise<Listed[]> {
    const out = await this.debugfs([`ls -p "${dir}"`], dir);
    const entries: Listed[] = [];
    for (const line of out.split("\n")) {
      const m = /^\/(\d+)\/(\d+)\/(\d+)\/(\d+)\/(.*)\/(\d*)\/$/.exec(line.trim());
      // Inode 0 is an unused slot (lost+found keeps some).
      if (!m || m[1] === "0" || !m[5] || m[5] === "." || m[5] === "..") continue;
      entries.push({ mode: parseInt(m[2], 8), uid: Number(m[3]), gid: Number(m[4]), name: m[5], size: Number(m[6] || 0) });
    }
    return entries;
  }

  async list(path: string, depth: number): Promise<VolumeEntry[]> {
    checkPath(path);
    const top = await this.stat(path);
    if (top.type !== "directory") throw badRequest(`path: ${path} is not a directory`);
    const out: VolumeEntry[] = [];
    const walk = async (dir: string, level: number) => {
      for (const l of await this.listed(dir)) {
        const child = dir === "/" ? `/${l.name}` : `${dir}/${l.name}`;
        // A name debugfs cannot be given back (a quote, a line break) is listed from `ls` alone.
        const entry = safeName(l.name) ? await this.stat(child) : { ...fromListed(l, child), mtime: EPOCH, atime: EPOCH, ctime: EPOCH };
        out.push(entry);
        if (entry.type === "directory" && level < depth && safeName(l.name)) await walk(child, level + 1);
      }
    };
    await walk(path, 1);
    return out;
  }

  async mkdir(path: string, meta: EntryMetadata, parents: boolean): Promise<VolumeEntry> {
    checkPath(path);
    if (path === "/") throw conflict("/: exists already");
    const existing = await this.statOrNull(path);
    if (existing) {
      if (existing.type !== "directory") throw conflict(`${path}: exists and is not a directory`);
      if (!parents) throw conflict(`${path}: exists already`);
      return existing;
    }
    const parent = await this.statOrNull(parentOf(path));
    if (!parent) {
      if (!parents) throw notFound(`${parentOf(path)}: no such directory in the volume (force creates it)`);
      await this.mkdir(parentOf(path), {}, true);
    } else if (parent.type !== "directory") throw conflict(`${parentOf(path)}: not a directory`);
    await this.debugfs([`mkdir "${path}"`, ...metaRequests(path, S_IFDIR, { mode: 0o755, ...meta })], path, true);
    return this.stat(path);
  }

  async read(path: string): Promise<Readable> {
    const st = await this.stat(path);
    if (st.type !== "file") throw badRequest(`path: ${path} is not a file`);
    const tmp = await this.tmpFile();
    try {
      await this.debugfs([`dump "${path}" "${tmp}"`], path);
    } catch (e) {
      await rm(tmp, { force: true });
      throw e;
    }
    const stream = createReadStream(tmp);
    stream.once("close", () => void rm(tmp, { force: true }).catch(ignore("a temporary copy of a read file")));
    return stream;
  }

  async write(path: string, data: Readable, meta: EntryMetadata, parents: boolean): Promise<VolumeEntry> {
    checkPath(path);
    if (path === "/") throw badRequest("path: / is the volume's root, not a file");
    const tmp = await this.tmpFile();
    try {
      // The bytes arrive in full before the image is touched: a cut-off upload changes nothing.
      await pipeline(data, createWriteStream(tmp, { mode: 0o600 }));
      const existing = await this.statOrNull(path);
      if (existing?.type === "directory") throw conflict(`${path}: exists already as a directory`);
      const parent = await this.statOrNull(parentOf(path));
      if (!parent) {
        if (!parents) throw notFound(`${parentOf(path)}: no such directory in the volume (force creates it)`);
        await this.mkdir(parentOf(path), {}, true);
      } else if (parent.type !== "directory") throw conflict(`${parentOf(path)}: not a directory`);
      const keep = existing ? { uid: existing.uid, gid: existing.gid, mode: existing.mode } : { mode: 0o644 };
      await this.debugfs([...(existing ? [`rm "${path}"`] : []), `write "${tmp}" "${path}"`, ...metaRequests(path, S_IFREG, { ...keep, ...meta })], path, true);
    } finally {
      await rm(tmp, { force: true });
    }
    return this.stat(path);
  }

  async setMetadata(path: string, meta: EntryMetadata): Promise<VolumeEntry> {
    const st = await this.stat(path);
    const type = st.type === "file" ? S_IFREG : st.type === "directory" ? S_IFDIR : st.type === "symlink" ? 0o120000 : null;
    if (type === null) throw badRequest(`path: ${path} is neither a file, a directory nor a symlink`);
    await this.debugfs(metaRequests(path, type, meta), path, true);
    return this.stat(path);
  }

  async remove(path: string): Promise<void> {
    const st = await this.stat(path);
    if (path === "/") throw badRequest("path: the volume's root cannot be removed");
    if (st.type === "directory") {
      for (const l of await this.listed(path)) {
        if (!safeName(l.name)) throw conflict(`${path}: holds "${l.name.slice(0, 80)}", a name that can only be removed from a sandbox that mounts the volume`);
        await this.remove(`${path}/${l.name}`);
      }
      await this.debugfs([`rmdir "${path}"`], path, true);
    } else await this.debugfs([`rm "${path}"`], path, true);
  }

  private async tmpFile(): Promise<string> {
    await mkdir(this.tmpDir, { recursive: true, mode: 0o700 });
    return join(this.tmpDir, `volume-${randomBytes(8).toString("hex")}`);
  }
}

const EPOCH = new Date(0).toISOString();

/** Whether debugfs can be given this name back inside quotes. */
function safeName(name: string): boolean {
  return !/["\\\n\r\t]/.test(name);
}

function fromListed(l: Listed, path: string): Omit<VolumeEntry, "atime" | "mtime" | "ctime"> {
  return { name: l.name, path, type: typeOf(l.mode), size: l.size, mode: l.mode & 0o7777, uid: l.uid, gid: l.gid };
}

/** set_inode_field requests for ownership and permissions (the type bits kept). */
function metaRequests(path: string, typeBits: number, meta: EntryMetadata): string[] {
  const out: string[] = [];
  if (meta.mode !== undefined) out.push(`set_inode_field "${path}" mode 0${(typeBits | (meta.mode & 0o7777)).toString(8)}`);
  if (meta.uid !== undefined) out.push(`set_inode_field "${path}" uid ${meta.uid}`);
  if (meta.gid !== undefined) out.push(`set_inode_field "${path}" gid ${meta.gid}`);
  return out;
}

/** An entry from what `stat` printed. */
export function parseStat(out: string, path: string): VolumeEntry {
  const type = /Type:\s+(\S+(?: special)?)/.exec(out)?.[1] ?? "";
  const mode = parseInt(/Mode:\s+0?([0-7]+)/.exec(out)?.[1] ?? "0", 8);
  const num = (re: RegExp) => Number(re.exec(out)?.[1] ?? 0);
  const time = (name: string) => {
    const hex = new RegExp(`${name}:\\s+0x([0-9a-f]+)`).exec(out)?.[1];
    return hex ? new Date(parseInt(hex, 16) * 1000).toISOString() : EPOCH;
  };
  const kind: VolumeEntry["type"] = type === "regular" ? "file" : type === "directory" ? "directory" : type === "symlink" ? "symlink" : "unknown";
  const target = /Fast link dest:\s+"(.*)"/.exec(out)?.[1];
  return {
    name: path === "/" ? "/" : basename(path),
    path,
    type: kind,
    size: num(/Size:\s+(\d+)/),
    mode: mode & 0o7777,
    uid: num(/User:\s+(\d+)/),
    gid: num(/Group:\s+(\d+)/),
    atime: time("atime"),
    mtime: time("mtime"),
    ctime: time("ctime"),
    ...(target !== undefined ? { target } : {}),
  };
}
