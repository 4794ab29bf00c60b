// Named volumes: data that outlives sandboxes. Each is an ext4 filesystem in a sparse file under
// <data>/volumes, attached to a VM as a virtio disk and mounted by the agent: a real block device,
// as fast as the root disk (docs/benchmarks.md). One writer or any number of readers at a time:
// ext4 cannot be shared by two kernels when one of them writes.
import { mkdir, rm, stat } from "node:fs/promises";
import { join, posix } from "node:path";
import type { VolumeDisk } from "../providers/provider.js";
import type { SandboxStore, VolumeMount } from "../store/sandboxes.js";
import type { VolumeRow, VolumeStore } from "../store/volumes.js";
import { repairExt4 } from "../images/ext4.js";
import { run } from "../util/process.js";
import { badRequest, conflict, notFound } from "../http/errors.js";
import { ignore } from "../util/ignore.js";

/** A volume as every interface shows it. */
export interface VolumeInfo extends VolumeRow {
  /** Bytes its file holds on the host (it is sparse). */
  used_bytes: number;
  /** Sandboxes that mount it, and how. */
  mounted_by: { sandbox: string; path: string; read_only: boolean }[];
}

const NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$/;
/** Sandbox states whose sandboxes hold their volumes (a stopped one mounts them again when it starts). */
const HOLDING = ["created", "creating", "running", "paused", "stopped"] as const;
export const DEFAULT_VOLUME_MB = 1024;
const MAX_VOLUME_MB = 1024 * 1024;
const MAX_MOUNTS = 16;

export class Volumes {
  constructor(
    private readonly dir: string,
    private readonly rows: VolumeStore,
    private readonly sandboxes: SandboxStore,
  ) {}

  private file(name: string): string {
    return join(this.dir, `${name}.ext4`);
  }

  /** Volumes whose image the host is reading or writing (the content API): no VM attaches them meanwhile. */
  private readonly editing = new Map<string, Promise<unknown>>();

  /** The image file of an existing volume. */
  async image(name: string): Promise<string> {
    await this.info(name);
    return this.file(name);
  }

  /** Runs `fn` on a volume's image with no VM attaching it meanwhile, one at a time per volume. */
  async withImage<T>(name: string, fn: (image: string) => Promise<T>): Promise<T> {
    const image = await this.image(name);
    for (let p = this.editing.get(name); p; p = this.editing.get(name)) await p.catch(ignore("the previous edit's error is its own caller's"));
    const run = fn(image);
    this.editing.set(name, run);
    try {
      return await run;
    } finally {
      this.editing.delete(name);
    }
  }

  /** Creates an empty volume of `sizeMb` (its file is sparse: it costs what is written). */
  /** Makes a volume; its root directory belongs to `owner` (root's by default). */
  async create(name: string, sizeMb = DEFAULT_VOLUME_MB, labels?: Record<string, string>, owner: { uid: number; gid: number } = { uid: 0, gid: 0 }): Promise<VolumeInfo> {
    if (!NAME.test(name)) throw badRequest(`name: "${name}" must be 1-63 letters, digits, "_", "." or "-", starting with a letter or digit`);
    if (!Number.isInteger(sizeMb) || sizeMb < 16 || sizeMb > MAX_VOLUME_MB) throw badRequest(`size: a volume is 16 MiB to 1 TiB, got ${sizeMb} MiB`);
    if (!this.rows.insert({ name, size_mb: sizeMb, created_at: new Date().toISOString(), labels: labels ?? null })) throw conflict(`volume ${name} exists already`);
    try {
      await mkdir(this.dir, { recursive: true, mode: 0o700 });
      await run("mkfs.ext4", ["-q", "-F", "-L", name.slice(0, 16), "-m", "0", "-E", `root_owner=${owner.uid}:${owner.gid},lazy_itable_init=1`, this.file(name), `${sizeMb}M`]);
    } catch (e) {
      this.rows.delete(name);
      await rm(this.file(name), { force: true });
      throw e;
    }
    return this.info(name);
  }

  /** One volume, with who mounts it. */
  async info(name: string): Promise<VolumeInfo> {
    const row = this.rows.get(name);
    if (!row)
      throw notFound(
        `no volume ${name} (volumes: ${
          this.rows
            .list()
            .map((v) => v.name)
            .join(", ") || "none"
        })`,
      );
    const st = await stat(this.file(name)).catch(() => null);
    return { ...row, used_bytes: st ? st.blocks * 512 : 0, mounted_by: this.users(name).map((u) => ({ sandbox: u.id, path: u.mount.path, read_only: u.mount.read_only })) };
  }

  async list(): Promise<VolumeInfo[]> {
    return Promise.all(this.rows.list().map((r) => this.info(r.name)));
  }

  /** Deletes a volume and its data; refused while a sandbox mounts it. */
  async remove(name: string): Promise<void> {
    await this.info(name);
    const users = this.users(name);
    if (users.length) throw conflict(`volume ${name} is mounted by ${users.map((u) => `${u.id} (${u.state})`).join(", ")}: destroy those first`);
    this.rows.delete(name);
    await rm(this.file(name), { force: true });
  }

  /** Sandboxes holding a volume. */
  users(name: string): { id: string; state: string; mount: VolumeMount }[] {
    return this.sandboxes.list([...HOLDING]).flatMap((r) => (r.volumes ?? []).filter((m) => m.name === name).map((mount) => ({ id: r.id, state: r.state, mount })));
  }

  /**
   * The mounts "NAME:/path[:ro]" asks for, checked: volumes that do not exist are created (as
   * Docker does), and one another sandbox writes to, or reads while this one would write, is
   * refused. `self` is the sandbox asking (when it holds them already).
   */
  async plan(specs: string[] | undefined, self?: string): Promise<VolumeMount[]> {
    if (!specs?.length) return [];
    if (specs.length > MAX_MOUNTS) throw badRequest(`volumes: at most ${MAX_MOUNTS} per sandbox`);
    const mounts = specs.map(parseMount);
    const paths = new Set<string>();
    for (const m of mounts) {
      if (paths.has(m.path)) throw badRequest(`volumes: two volumes at ${m.path}`);
      paths.add(m.path);
      if (mounts.filter((x) => x.name === m.name).length > 1) throw badRequest(`volumes: ${m.name} is named twice`);
    }
    for (const m of mounts) {
      if (!this.rows.get(m.name)) await this.create(m.name).catch((e) => (this.rows.get(m.name) ? undefined : Promise.reject(e)));
      this.checkFree(m, self);
    }
    return mounts;
  }

  /** Refuses a mount that would share a written filesystem (call again just before the row is written). */
  checkFree(m: VolumeMount, self?: string): void {
    if (this.editing.has(m.name)) throw conflict(`volume ${m.name} is being read or written through its content API; try again in a moment`);
    for (const u of this.users(m.name)) {
      if (u.id === self) continue;
      if (!m.read_only || !u.mount.read_only) {
        throw conflict(
          `volume ${m.name} is mounted ${u.mount.read_only ? "read-only" : "read-write"} by sandbox ${u.id} (${u.state}): a volume has one writer or any number of readers`,
        );
      }
    }
  }

  /** The disks a VM gets for these mounts, in order. */
  async disks(mounts: VolumeMount[] | null): Promise<VolumeDisk[]> {
    const out: VolumeDisk[] = [];
    for (const m of mounts ?? []) {
      const row = this.rows.get(m.name);
      const st = await stat(this.file(m.name)).catch(() => null);
      if (!row || !st) throw conflict(`volume ${m.name} no longer exists`);
      if (m.read_only) await this.settle(m.name);
      out.push({ file: this.file(m.name), readOnly: m.read_only, bytes: st.size });
    }
    return out;
  }

  private settling = new Map<string, Promise<void>>();

  // A writer that was killed leaves its journal to replay, which a read-only disk cannot do in
  // the guest; with no writer left (mounts allow readers only then), it is replayed here.
  private settle(name: string): Promise<void> {
    const running = this.settling.get(name);
    if (running) return running;
    const p = (async () => {
      const { stdout } = await run("dumpe2fs", ["-h", this.file(name)]).catch(() => ({ stdout: "" }));
      if (/^Filesystem features:.*\bneeds_recovery\b/m.test(stdout)) await repairExt4(this.file(name), true);
    })().finally(() => this.settling.delete(name));
    this.settling.set(name, p);
    return p;
  }
}

/** "NAME:/path" or "NAME:/path:ro" (or ":rw"). */
export function parseMount(spec: string): VolumeMount {
  if (typeof spec !== "string") throw badRequest("volumes: each entry is a string NAME:/path[:ro]");
  const parts = spec.split(":");
  const [name, path, mode] = parts;
  if (parts.length < 2 || parts.length > 3 || (mode !== undefined && mode !== "ro" && mode !== "rw")) {
    throw badRequest(`volumes: "${spec}" is not NAME:/path[:ro]`);
  }
  if (name.startsWith("/") || name.startsWith("."))
    throw badRequest(`volumes: "${spec}" names a host directory; only named volumes can be mounted (host directories are not supported yet)`);
  if (!NAME.test(name)) throw badRequest(`volumes: "${name}" is not a volume name (letters, digits, "_", "." or "-")`);
  if (!path?.startsWith("/")) throw badRequest(`volumes: the mount point in "${spec}" must be an absolute path`);
  const norm = posix.normalize(path);
  if (norm === "/" || /^\/(proc|sys|dev)(\/|$)/.test(norm)) throw badRequest(`volumes: cannot mount over ${norm}`);
  return { name, path: norm.replace(/\/+$/, ""), read_only: mode === "ro" };
}
