// A volume's files through the running sandbox that mounts it read-write: the only safe way to
// them while a VM's kernel holds the filesystem. Every path is taken below the mount point.
import type { Readable } from "node:stream";
import type { DirEntry, FileStat } from "../../agent-client/index.js";
import { badRequest, conflict, notFound } from "../../http/errors.js";
import type { Sandbox } from "../guest/sandbox.js";
import { basename, checkPath, parentOf } from "./paths.js";
import type { EntryMetadata, VolumeEntry, VolumeFileOps } from "./types.js";

function typeOf(t: FileStat["type"]): VolumeEntry["type"] {
  return t === "file" ? "file" : t === "dir" ? "directory" : t === "symlink" ? "symlink" : "unknown";
}

function entryOf(st: FileStat, path: string): VolumeEntry {
  const mtime = new Date(st.mtime_ms).toISOString();
  const ctime = st.ctime ? new Date(Number(st.ctime.split(".")[0]) * 1000).toISOString() : mtime;
  return {
    name: path === "/" ? "/" : basename(path),
    path,
    type: typeOf(st.type),
    size: st.size,
    mode: st.mode & 0o7777,
    uid: st.uid,
    gid: st.gid,
    atime: mtime,
    mtime,
    ctime,
    ...(st.target !== undefined ? { target: st.target } : {}),
  };
}

export class GuestFiles implements VolumeFileOps {
  constructor(
    private readonly sb: Sandbox,
    /** Where the volume is mounted in the guest. */
    private readonly mount: string,
  ) {}

  private at(path: string): string {
    checkPath(path);
    return path === "/" ? this.mount : `${this.mount}${path}`;
  }

  async stat(path: string): Promise<VolumeEntry> {
    return entryOf(await this.sb.stat(this.at(path)), path);
  }

  async list(path: string, depth: number): Promise<VolumeEntry[]> {
    const top = await this.stat(path);
    if (top.type !== "directory") throw badRequest(`path: ${path} is not a directory`);
    const out: VolumeEntry[] = [];
    const walk = async (dir: string, level: number) => {
      const entries: DirEntry[] = await this.sb.listAllFiles(this.at(dir));
      for (const e of entries) {
        const child = dir === "/" ? `/${e.name}` : `${dir}/${e.name}`;
        const entry = entryOf(e, child);
        out.push(entry);
        if (entry.type === "directory" && level < depth) await walk(child, level + 1);
      }
    };
    await walk(path, 1);
    return out;
  }

  async mkdir(path: string, meta: EntryMetadata, parents: boolean): Promise<VolumeEntry> {
    const existing = await this.stat(path).catch(() => null);
    if (existing) {
      if (existing.type !== "directory" || !parents) throw conflict(`${path}: exists already`);
      return existing;
    }
    if (!parents) {
      const parent = await this.stat(parentOf(path)).catch(() => null);
      if (!parent) throw notFound(`${parentOf(path)}: no such directory in the volume (force creates it)`);
      if (parent.type !== "directory") throw conflict(`${parentOf(path)}: not a directory`);
    }
    await this.sb.mkdir(this.at(path), meta.mode ?? 0o755);
    return this.setMetadata(path, { uid: meta.uid, gid: meta.gid });
  }

  async read(path: string): Promise<Readable> {
    const st = await this.stat(path);
    if (st.type !== "file") throw badRequest(`path: ${path} is not a file`);
    const r = this.sb.readFileStream(this.at(path));
    await Promise.race([r.stat, r.done]);
    return r.stream as Readable;
  }

  async write(path: string, data: Readable, meta: EntryMetadata, parents: boolean): Promise<VolumeEntry> {
    if (path === "/") throw badRequest("path: / is the volume's root, not a file");
    const existing = await this.stat(path).catch(() => null);
    if (existing?.type === "directory") throw conflict(`${path}: exists already as a directory`);
    const parent = await this.stat(parentOf(path)).catch(() => null);
    if (!parent && !parents) throw notFound(`${parentOf(path)}: no such directory in the volume (force creates it)`);
    if (parent && parent.type !== "directory") throw conflict(`${parentOf(path)}: not a directory`);
    if (!parent) await this.sb.mkdir(this.at(parentOf(path)));
    await this.sb.writeFile(this.at(path), data, { mode: meta.mode ?? existing?.mode ?? 0o644 });
    return this.setMetadata(path, { uid: meta.uid, gid: meta.gid, mode: meta.mode });
  }

  async setMetadata(path: string, meta: EntryMetadata): Promise<VolumeEntry> {
    if (meta.mode !== undefined) await this.sb.chmod(this.at(path), meta.mode);
    if (meta.uid !== undefined || meta.gid !== undefined) {
      const st = await this.stat(path);
      const r = await this.sb.exec(["chown", "-h", `${meta.uid ?? st.uid}:${meta.gid ?? st.gid}`, "--", this.at(path)], { user: "root" });
      if (r.exitCode !== 0) throw badRequest(`cannot change the owner of ${path}: ${r.stderr.trim()}`);
    }
    return this.stat(path);
  }

  async remove(path: string): Promise<void> {
    if (path === "/") throw badRequest("path: the volume's root cannot be removed");
    await this.stat(path);
    await this.sb.remove(this.at(path), true);
  }
}
