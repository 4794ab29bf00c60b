// New entries of a volume belong to whoever owns the directory they are made in, unless the call
// names an owner: a volume made for the E2B default user (its root is that user's) stays usable
// by that user whatever the content API writes into it, as E2B's volumes are.
import { parentOf } from "./paths.js";
import type { EntryMetadata, VolumeEntry, VolumeFileOps } from "./types.js";

export class InheritOwner implements VolumeFileOps {
  constructor(private readonly files: VolumeFileOps) {}

  /** `meta` with the owner of the nearest directory above `path` that exists, where it names none. */
  private async owned(path: string, meta: EntryMetadata): Promise<EntryMetadata> {
    if (meta.uid !== undefined && meta.gid !== undefined) return meta;
    let dir = parentOf(path);
    for (;;) {
      const st = await this.files.stat(dir).catch(() => null);
      if (st) return { ...meta, uid: meta.uid ?? st.uid, gid: meta.gid ?? st.gid };
      if (dir === "/") return meta;
      dir = parentOf(dir);
    }
  }

  stat(path: string): Promise<VolumeEntry> {
    return this.files.stat(path);
  }

  list(path: string, depth: number): Promise<VolumeEntry[]> {
    return this.files.list(path, depth);
  }

  async mkdir(path: string, meta: EntryMetadata, parents: boolean): Promise<VolumeEntry> {
    const own = await this.owned(path, meta);
    if (parents) await this.makeParents(path, own);
    return this.files.mkdir(path, own, parents);
  }

  /** The missing directories above `path`, made one by one so that each gets `meta`'s owner. */
  private async makeParents(path: string, meta: EntryMetadata): Promise<void> {
    const missing: string[] = [];
    for (let d = parentOf(path); d !== "/" && !(await this.files.stat(d).catch(() => null)); d = parentOf(d)) missing.unshift(d);
    for (const d of missing) await this.files.mkdir(d, { uid: meta.uid, gid: meta.gid }, false);
  }

  read(path: string) {
    return this.files.read(path);
  }

  async write(path: string, data: Parameters<VolumeFileOps["write"]>[1], meta: EntryMetadata, parents: boolean): Promise<VolumeEntry> {
    // A file that exists keeps its owner unless the call names one.
    const existing = await this.files.stat(path).catch(() => null);
    const own = existing ? meta : await this.owned(path, meta);
    if (parents && !existing) await this.makeParents(path, own);
    return this.files.write(path, data, own, parents);
  }

  setMetadata(path: string, meta: EntryMetadata): Promise<VolumeEntry> {
    return this.files.setMetadata(path, meta);
  }

  remove(path: string): Promise<void> {
    return this.files.remove(path);
  }
}
