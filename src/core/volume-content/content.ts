// A volume's files without a sandbox of one's own (E2B's volume content API): through the running
// sandbox that mounts it read-write when there is one, else on its image on the host. A volume a
// stopped or paused sandbox holds read-write is out of reach until it runs or goes (its kernel's
// view of the filesystem is saved with it); one mounted read-only can be read but not written.
import { conflict } from "../../http/errors.js";
import type { Sandbox } from "../guest/sandbox.js";
import type { Volumes } from "../volumes.js";
import { GuestFiles } from "./guest-files.js";
import { ImageFiles } from "./image-files.js";
import { InheritOwner } from "./inherit-owner.js";
import type { VolumeFileOps } from "./types.js";

export class VolumeContent {
  constructor(
    private readonly volumes: Volumes,
    private readonly running: (id: string) => Sandbox | null,
    private readonly tmpDir: string,
  ) {}

  /** Runs `fn` on a volume's files the one safe way there is now; `write` when it changes them. */
  async with<T>(name: string, write: boolean, fn: (files: VolumeFileOps) => Promise<T>): Promise<T> {
    const through = this.writer(name);
    if (through) return fn(new InheritOwner(through));
    return this.volumes.withImage(name, async (image) => {
      // Checked again with spawns kept off the image: one may have taken the volume meanwhile.
      if (this.writer(name)) throw conflict(`volume ${name} was mounted meanwhile; try again`);
      const readers = this.volumes.users(name);
      if (write && readers.length) {
        throw conflict(`volume ${name} is mounted read-only by ${readers.map((u) => `${u.id} (${u.state})`).join(", ")}; it cannot be written while they hold it`);
      }
      return fn(new InheritOwner(new ImageFiles(image, this.tmpDir)));
    });
  }

  /** The files through the running sandbox that mounts the volume read-write; null when none does; a 409 when a sandbox that does is not running. */
  private writer(name: string): VolumeFileOps | null {
    const w = this.volumes.users(name).find((u) => !u.mount.read_only);
    if (!w) return null;
    const sb = w.state === "running" ? this.running(w.id) : null;
    if (!sb) throw conflict(`volume ${name} is mounted read-write by sandbox ${w.id} (${w.state}): its files can be reached while that sandbox runs, or once it is destroyed`);
    return new GuestFiles(sb, w.mount.path);
  }
}
