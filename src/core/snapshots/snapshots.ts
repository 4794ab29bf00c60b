// Snapshots: where their files live, which ones may still be used, base snapshots that make
// spawns restore instead of boot, and removing what nothing needs any more.
import { createHash, randomBytes } from "node:crypto";
import { mkdir, readdir, rm, stat } from "node:fs/promises";
import { join } from "node:path";
import type { Paths } from "../../config/paths.js";
import type { LocalImage } from "../../images/store.js";
import type { CaptureResult, Provider, SnapshotFiles, Vm } from "../../providers/provider.js";
import type { SandboxRow } from "../../store/sandboxes.js";
import type { SnapshotKind, SnapshotRow, SnapshotStore } from "../../store/snapshots.js";
import type { TemplateRow } from "../../store/templates.js";
import { ForgevmError } from "../../http/errors.js";
import { hasNic } from "../network.js";
import type { EventBus } from "../events.js";

/** What a base snapshot is a snapshot of; every field is part of its key. */
export interface BaseSpec {
  image: LocalImage;
  memoryMb: number;
  vcpus: number;
  diskMb: number;
  template?: TemplateRow;
  /** "systemd": a system image's base holds a booted systemd, so it is another base. */
  init?: "systemd" | null;
  /** With a network device (network "full"): a different machine, so a different base. */
  nic?: boolean;
}

export interface SnapshotDeps {
  paths: Paths;
  provider: Provider;
  store: SnapshotStore;
  events: EventBus;
  /** Ids of snapshots that running VMs are restored from (their disks are backed by them). */
  inUse: () => Set<string>;
  /** The same, less the sandboxes each snapshot was taken of (whose disk is only built on it). */
  restoredFrom: () => Set<string>;
}

/** Base snapshots kept at most (least recently used go first; ones in use stay). */
export const MAX_BASES = 8;
/** A base snapshot no spawn restored from for this long is dropped when another is made. */
export const BASE_IDLE_MS = 7 * 86_400_000;

/** After a base snapshot fails to build, spawns of that key boot cold for this long. */
const BASE_RETRY_MS = 10 * 60_000;

export class Snapshots {
  private readonly building = new Map<string, Promise<SnapshotRow | null>>();
  private readonly failedUntil = new Map<string, number>();

  constructor(private readonly d: SnapshotDeps) {}

  /** The files a restore needs. */
  static files(row: SnapshotRow): SnapshotFiles {
    return {
      state: join(row.dir, "state"),
      memory: row.format === "mapped" ? join(row.dir, "memory") : undefined,
      disk: row.disk_bytes ? join(row.dir, "disk.qcow2") : undefined,
      diskBytes: row.disk_bytes ?? undefined,
      console: join(row.dir, "console.log"),
    };
  }

  /**
   * Identifies a base snapshot: the image's content, the template (setup commands and env run
   * before the snapshot), the VM's size, and everything the guest's memory depends on (kernel,
   * initramfs with the agent, the provider's machine: VMM build and accelerator).
   */
  async baseKey(spec: BaseSpec): Promise<string> {
    const fileId = async (p: string) => {
      const st = await stat(p).catch(() => null);
      return st ? `${st.size}:${Math.round(st.mtimeMs)}` : "missing";
    };
    const parts = {
      image: spec.image.name,
      rootfs: await fileId(spec.image.rootfs),
      digest: spec.image.digest ?? null,
      template: spec.template ? { name: spec.template.name, updated: spec.template.updated_at, setup: spec.template.setup ?? [], env: spec.template.env ?? {} } : null,
      memoryMb: spec.memoryMb,
      vcpus: spec.vcpus,
      diskMb: spec.diskMb,
      nic: !!spec.nic,
      kernel: await fileId(this.d.paths.kernel),
      initramfs: await fileId(this.d.paths.initramfs),
      machine: await this.d.provider.machineKey(),
      // Only when set, so that the keys of every other base stay what they were.
      ...(spec.init ? { init: spec.init } : {}),
    };
    return createHash("sha256").update(JSON.stringify(parts)).digest("hex").slice(0, 32);
  }

  /** The ready base snapshot for this spec and its key, without making one. */
  async readyBase(spec: BaseSpec): Promise<{ key: string; row: SnapshotRow | null }> {
    const key = await this.baseKey(spec);
    return { key, row: this.d.store.base(key) ?? null };
  }

  /**
   * The base snapshot for `spec`, built on first use: a VM boots with its RAM in a file, `prepare`
   * runs (template setup), and the VM is frozen. Concurrent callers share one build. Resolves
   * null when no snapshot can be had (the caller boots cold); a ForgevmError from `prepare`
   * (a failing setup command) is passed on.
   */
  async base(spec: BaseSpec, prepare: (vm: Vm) => Promise<void>): Promise<SnapshotRow | null> {
    const { key, row: ready } = await this.readyBase(spec);
    if (ready) {
      this.d.store.update(ready.id, { last_used_at: new Date().toISOString() });
      return ready;
    }
    if ((this.failedUntil.get(key) ?? 0) > Date.now()) return null;
    let p = this.building.get(key);
    if (!p) {
      p = this.buildBase(key, spec, prepare).finally(() => this.building.delete(key));
      this.building.set(key, p);
    }
    return p;
  }

  private async buildBase(key: string, spec: BaseSpec, prepare: (vm: Vm) => Promise<void>): Promise<SnapshotRow | null> {
    const row = await this.begin({
      kind: "base",
      image: spec.image.name,
      template: spec.template?.name ?? null,
      memory_mb: spec.memoryMb,
      vcpus: spec.vcpus,
      disk_mb: spec.diskMb,
      format: "mapped",
      base_key: key,
      nic: spec.nic,
    });
    let vm: Vm | null = null;
    this.d.events.emit("snapshot.building", null, { snapshot_id: row.id, kind: "base", image: spec.image.name, template: spec.template?.name ?? null });
    try {
      vm = await this.d.provider.spawn({
        id: `base-${row.id.slice(5)}`,
        rootfs: spec.image.rootfs,
        memoryMb: spec.memoryMb,
        vcpus: spec.vcpus,
        diskMb: spec.diskMb,
        hostname: "forgevm",
        memoryFile: join(row.dir, "memory"),
        nic: spec.nic,
        ...(spec.init ? { init: spec.init } : {}),
      });
      await prepare(vm);
      const r = await vm.freeze(row.dir);
      vm = null;
      const done = await this.finish(row, r);
      await this.evictBases(done);
      return done;
    } catch (e) {
      await vm?.destroy();
      await this.abort(row);
      if (e instanceof ForgevmError) throw e;
      this.failedUntil.set(key, Date.now() + BASE_RETRY_MS);
      this.d.events.emit("snapshot.error", null, { image: spec.image.name, error: (e as Error).message.split("\n")[0] });
      return null;
    }
  }

  /** Reserves a directory and a row for a snapshot about to be taken. */
  async begin(f: {
    kind: SnapshotKind;
    image: string;
    template: string | null;
    memory_mb: number;
    vcpus: number;
    disk_mb: number;
    format: SnapshotRow["format"];
    base_key?: string;
    name?: string | null;
    source?: SandboxRow;
    nic?: boolean;
    /** For a snapshot that has no source here (an import): the env and user its sandbox had. */
    env?: Record<string, string> | null;
    exec_user?: string | null;
  }): Promise<SnapshotRow> {
    const id = `snap-${randomBytes(4).toString("hex")}`;
    const dir = join(this.d.paths.snapshotsDir, id);
    await mkdir(dir, { recursive: true, mode: 0o700 });
    const row: SnapshotRow = {
      id,
      name: f.name ?? null,
      kind: f.kind,
      base_key: f.base_key ?? null,
      state: "creating",
      source_id: f.source?.id ?? null,
      parent_id: f.source?.snapshot_id ?? null,
      image: f.image,
      template: f.template,
      memory_mb: f.memory_mb,
      vcpus: f.vcpus,
      disk_mb: f.disk_mb,
      disk_bytes: null,
      format: f.format,
      dir,
      size_bytes: 0,
      env: f.env ?? f.source?.env ?? null,
      exec_user: f.exec_user ?? f.source?.exec_user ?? null,
      nic: (f.nic ?? hasNic(f.source?.network)) ? 1 : 0,
      created_at: new Date().toISOString(),
      last_used_at: null,
      error: null,
    };
    this.d.store.insert(row);
    return row;
  }

  /** Reserves a snapshot of a running sandbox (its RAM goes into the migration stream). */
  beginOf(source: SandboxRow, kind: "sandbox" | "fork" | "pause", name: string | null = null): Promise<SnapshotRow> {
    const { image, template, memory_mb, vcpus, disk_mb } = source;
    return this.begin({ kind, name, image, template, memory_mb, vcpus, disk_mb, format: "stream", source });
  }

  /** Marks a snapshot taken. */
  async finish(row: SnapshotRow, r: CaptureResult): Promise<SnapshotRow> {
    const size = await allocatedBytes(row.dir, r.memoryShared ? ["memory"] : []);
    // A forkable VM's fork or pause keeps its RAM as a file beside the stream: a mapped snapshot.
    const format = r.files.memory ? "mapped" : row.format;
    this.d.store.update(row.id, { state: "ready", size_bytes: size, disk_bytes: r.files.diskBytes ?? null, format });
    this.d.events.emit("snapshot.created", row.source_id, { snapshot_id: row.id, kind: row.kind, bytes: size, pause_ms: r.pauseMs });
    return this.d.store.get(row.id)!;
  }

  /**
   * Forgets a snapshot that could not be taken. With `runsOn`, the VM it was taken from goes on
   * and may already be on a new overlay backed by the snapshot's disk link (the disk switches
   * before the copy): that link then stays, in a row that only holds it (state `deleted`, kept
   * while its chain is in use), and true says the sandbox's snapshot_id must name it.
   */
  async abort(row: SnapshotRow, runsOn = false): Promise<boolean> {
    const disk = join(row.dir, "disk.qcow2");
    if (runsOn && (await stat(disk).catch(() => null))) {
      for (const f of await readdir(row.dir)) if (f !== "disk.qcow2") await rm(join(row.dir, f), { recursive: true, force: true });
      this.d.store.update(row.id, { state: "deleted", name: null, error: "not taken: kept only as a disk its sandbox's overlay is backed by" });
      return true;
    }
    await rm(row.dir, { recursive: true, force: true });
    this.d.store.remove(row.id);
    return false;
  }

  /** A snapshot failed to restore: no spawn uses it again. */
  markUnusable(row: SnapshotRow, reason: string): void {
    this.d.store.update(row.id, { state: "deleted", error: reason.split("\n")[0] });
    this.d.events.emit("snapshot.error", null, { snapshot_id: row.id, error: reason.split("\n")[0] });
  }

  /**
   * Drops base snapshots no spawn will use again: those `made` replaces (the same image,
   * template and VM size under a key that no longer matches: the image, kernel, agent or VMM
   * changed, and each such change used to leave a few hundred MiB behind), those unused for
   * BASE_IDLE_MS, and past MAX_BASES the least recently used. A base a running sandbox was
   * restored from goes once that sandbox does.
   */
  private async evictBases(made: SnapshotRow): Promise<void> {
    const bases = this.d.store
      .list(["ready"])
      .filter((r) => r.kind === "base" && r.id !== made.id)
      .sort((a, b) => (b.last_used_at ?? b.created_at).localeCompare(a.last_used_at ?? a.created_at));
    const same = (r: SnapshotRow) =>
      r.image === made.image && r.template === made.template && r.memory_mb === made.memory_mb && r.vcpus === made.vcpus && r.disk_mb === made.disk_mb && r.nic === made.nic;
    const idleSince = Date.now() - BASE_IDLE_MS;
    const drop = new Set(bases.filter((r, i) => same(r) || Date.parse(r.last_used_at ?? r.created_at) < idleSince || i >= MAX_BASES - 1).map((r) => r.id));
    if (drop.size) await this.dropBases((r) => drop.has(r.id));
  }

  /** Deletes the base snapshots that match (their template or image changed or went away). */
  async dropBases(match: (row: SnapshotRow) => boolean): Promise<void> {
    for (const row of this.d.store.list(["ready"])) if (row.kind === "base" && match(row)) this.d.store.update(row.id, { state: "deleted" });
    await this.collect();
  }

  /** Deletes a snapshot; its files stay until no sandbox restored from it runs. */
  async remove(row: SnapshotRow): Promise<void> {
    this.d.store.update(row.id, { state: "deleted" });
    this.d.events.emit("snapshot.deleted", null, { snapshot_id: row.id });
    await this.collect();
  }

  /**
   * Removes the files of deleted snapshots and of fork snapshots whose children are all gone,
   * once no VM is restored from them; and, at startup, whatever an interrupted capture left.
   */
  async collect(startup = false): Promise<void> {
    const rows = this.d.store.list(["ready", "deleted", "creating"]);
    const byId = new Map(rows.map((r) => [r.id, r]));
    const keep = this.d.inUse();
    // Fork and pause snapshots stay only while a sandbox uses them.
    for (const r of rows) if ((r.state === "ready" && r.kind !== "fork" && r.kind !== "pause") || (r.state === "creating" && !startup)) keep.add(r.id);
    // A fork's snapshot whose children are all gone is a layer of its parent's disk and nothing
    // more: no one can restore it, so it is listed no more (deleted) and its memory goes now; its
    // disk goes with the parent's.
    const restored = this.d.restoredFrom();
    for (const r of rows) {
      if (r.state !== "ready" || r.kind !== "fork" || restored.has(r.id)) continue;
      const files = Snapshots.files(r);
      for (const f of [files.state, files.memory]) if (f) await rm(f, { force: true });
      this.d.store.update(r.id, { state: "deleted" });
      r.state = "deleted";
      this.d.events.emit("snapshot.deleted", null, { snapshot_id: r.id });
    }
    // A kept snapshot's disk is backed by its parent's: keep the whole chain.
    for (const id of [...keep]) {
      for (let p = byId.get(id)?.parent_id; p && !keep.has(p); p = byId.get(p)?.parent_id) keep.add(p);
    }
    for (const row of rows) {
      if (keep.has(row.id)) continue;
      await rm(row.dir, { recursive: true, force: true });
      this.d.store.remove(row.id);
    }
    if (startup) {
      const known = new Set(this.d.store.list(["ready", "deleted", "creating"]).map((r) => r.id));
      for (const name of await readdir(this.d.paths.snapshotsDir).catch(() => [] as string[])) {
        if (!known.has(name)) await rm(join(this.d.paths.snapshotsDir, name), { recursive: true, force: true });
      }
    }
  }
}

/** Disk space a directory's files really use (RAM files and overlays are sparse), but for `shared` ones. */
async function allocatedBytes(dir: string, shared: string[]): Promise<number> {
  let total = 0;
  for (const name of await readdir(dir)) {
    if (shared.includes(name)) continue;
    const st = await stat(join(dir, name)).catch(() => null);
    if (st?.isFile()) total += st.blocks * 512;
  }
  return total;
}
