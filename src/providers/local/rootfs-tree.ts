// An image's root filesystem as a directory tree, for sandboxes that see it through an overlay
// instead of a disk. Extracted once per image file (debugfs reads ext4 without mounting it) into
// the provider's own directory, and removed when its image file is gone.
import { randomBytes } from "node:crypto";
import { mkdir, readdir, rename, rm, stat } from "node:fs/promises";
import { join } from "node:path";
import { run } from "../../util/process.js";

/** Where trees live and which are being made, per provider. */
export class RootfsTrees {
  private readonly making = new Map<string, Promise<string>>();

  constructor(private readonly dir: string) {}

  /** The tree of `rootfs` (an ext4 image file), extracted now unless it already is. */
  async of(rootfs: string): Promise<string> {
    const s = await stat(rootfs);
    // The image file is replaced, never changed in place: its inode and mtime name its content.
    const key = `${s.ino}-${Math.floor(s.mtimeMs)}-${s.size}`;
    const tree = join(this.dir, key);
    if (await stat(tree).catch(() => null)) return tree;
    let p = this.making.get(key);
    if (!p) {
      p = this.extract(rootfs, tree).finally(() => this.making.delete(key));
      this.making.set(key, p);
    }
    return p;
  }

  /** Removes trees not named in `keep` (their images are gone or were replaced). */
  async prune(keep: (key: string) => boolean): Promise<void> {
    for (const name of await readdir(this.dir).catch(() => [] as string[])) {
      if (name.includes(".tmp-") || !keep(name)) await rm(join(this.dir, name), { recursive: true, force: true });
    }
  }

  /** The key a tree of `rootfs` has (for prune). */
  static async keyOf(rootfs: string): Promise<string | null> {
    const s = await stat(rootfs).catch(() => null);
    return s ? `${s.ino}-${Math.floor(s.mtimeMs)}-${s.size}` : null;
  }

  private async extract(rootfs: string, tree: string): Promise<string> {
    const tmp = `${tree}.tmp-${randomBytes(4).toString("hex")}`;
    await mkdir(tmp, { recursive: true });
    try {
      // rdump keeps modes, owners, times and symlinks; it drops setuid bits and device nodes,
      // which a sandbox on the host's kernel is better without.
      const { stderr } = await run("debugfs", ["-R", `rdump / ${tmp}`, rootfs]);
      if (/^rdump:/m.test(stderr)) throw new Error(`extracting ${rootfs}: ${stderr.trim().slice(0, 400)}`);
      await rename(tmp, tree).catch(async (e) => {
        // Another server process made it meanwhile: keep theirs.
        if ((e as NodeJS.ErrnoException).code !== "ENOTEMPTY" && (e as NodeJS.ErrnoException).code !== "EEXIST") throw e;
        await rm(tmp, { recursive: true, force: true });
      });
      return tree;
    } catch (e) {
      await rm(tmp, { recursive: true, force: true });
      throw e;
    }
  }
}
