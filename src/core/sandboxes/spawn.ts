// Spawning a sandbox: claim a warm VM, or let a prestarted VMM run, or restore from the base
// snapshot (made on first use, template setup included), or boot cold; then admit it as running.
// Warm pools are filled here, and prestarted VMMs asked for.
import type { PrestartedVm, Vm } from "../../providers/provider.js";
import { BootError } from "../../providers/provider.js";
import type { SnapshotRow } from "../../store/snapshots.js";
import type { SandboxStore } from "../../store/sandboxes.js";
import type { SnapshotStore } from "../../store/snapshots.js";
import type { TemplateStore } from "../../store/templates.js";
import type { Provider } from "../../providers/provider.js";
import type { EventBus } from "../events.js";
import type { Volumes } from "../volumes.js";
import type { ForgeOptions, SpawnDefaults } from "../options.js";
import type { Prestarts } from "../pools/prestart.js";
import type { TenantPool } from "../pools/tenant-pool.js";
import type { WarmPools } from "../pools/warm-pool.js";
import type { SandboxTable } from "./table.js";
import type { Lifecycle } from "./lifecycle.js";
import type { Planner } from "./plan.js";
import type { TenantSpawner } from "./pool-mode.js";
import { ForgevmError } from "../../http/errors.js";
import type { SpawnOptions } from "../options.js";
import { newSandboxId, type SpawnPlan } from "./plan.js";
import type { Sandbox } from "../guest/sandbox.js";
import { prepareBase, runSetup, useBaseSnapshots, type SetupDeps } from "./spawn-setup.js";
import { Snapshots } from "../snapshots/snapshots.js";
import { POOL_NICE, type PoolTarget } from "../pools/warm-pool.js";

/**
 * What a spawn takes: the plan, the VMs made ahead (warm pools, prestarted VMMs, pool mode's
 * shared VMs), the base snapshots, the new sandbox's row, and its admission as running.
 */
export interface SpawnerDeps extends SetupDeps {
  readonly opts: Pick<ForgeOptions, "baseSnapshots" | "warmPool">;
  readonly defaults: Pick<SpawnDefaults, "image">;
  /** The default provider: base snapshots, warm pools and prestarted VMMs are its. */
  readonly provider: Provider;
  readonly sandboxes: SandboxStore;
  readonly templates: Pick<TemplateStore, "list">;
  readonly table: Pick<SandboxTable, "closed">;
  readonly events: EventBus;
  readonly snaps: Snapshots;
  readonly warm: WarmPools;
  readonly prestarts: Prestarts;
  readonly volumes: Pick<Volumes, "checkFree" | "disks">;
  readonly planner: Pick<Planner, "plan" | "newRow">;
  readonly lifecycle: Pick<Lifecycle, "admit" | "recordFailure">;
  /** Pool mode's spawns, when the server runs in pool mode. */
  readonly tenantSpawner: Pick<TenantSpawner, "spawn"> | null;
}

/** Spawns sandboxes, and keeps the warm pools and prestarted VMMs that make spawns fast. */
export class Spawner {
  constructor(private readonly d: SpawnerDeps) {}

  /**
   * Starts a sandbox and returns once its agent answers: restored from its image's (or
   * template's) base snapshot when one exists or can be made, else booted. A failed start is
   * recorded as `error`.
   */
  async spawn(opts: SpawnOptions): Promise<Sandbox> {
    if (this.d.table.closed) throw new ForgevmError("UNAVAILABLE", "the server is shutting down");
    // Pool mode shares the default provider's VMs; a spawn that names another provider gets its own sandbox.
    const tenants = this.d.tenantSpawner;
    if (tenants && opts.template === undefined && !opts.system && (!opts.provider || opts.provider === this.d.provider.name)) return tenants.spawn(opts);
    const p = await this.d.planner.plan(opts);
    const pooled = await this.claimPooled(p, opts);
    if (pooled) return pooled;
    const pre = await this.takePrestarted(p, opts);
    const row = this.d.planner.newRow(p, opts, pre?.vm.id);
    try {
      for (const m of p.volumes) this.d.volumes.checkFree(m); // again: another spawn may have taken one meanwhile
      this.d.sandboxes.insert(row);
    } catch (e) {
      await pre?.vm.discard(); // taken, so nobody else will
      throw e;
    }
    this.d.events.emit("sandbox.created", row.id, { image: row.image, memory_mb: row.memory_mb, vcpus: row.vcpus });
    try {
      const { vm, origin } = (pre && (await this.startPrestarted(row.id, p, pre, opts))) ?? (await this.startVm(row.id, p, opts));
      return await this.d.lifecycle.admit(row, vm, p.image, origin, p.secrets);
    } catch (e) {
      await this.d.lifecycle.recordFailure(row.id, e);
      throw e;
    }
  }

  /**
   * A VM for a new sandbox: restored from the base snapshot (made on first use, with the
   * template's setup commands already run), else booted cold with setup run now.
   */
  async startVm(id: string, p: SpawnPlan, opts: SpawnOptions): Promise<{ vm: Vm; origin: string }> {
    const volumes = await this.d.volumes.disks(p.volumes);
    const spec = {
      id,
      memoryMb: p.memoryMb,
      vcpus: p.vcpus,
      hostname: opts.hostname ?? id,
      bootTimeoutMs: opts.bootTimeoutMs,
      nic: p.nic,
      volumes,
      forkable: p.forkable,
      ...(p.init ? { init: p.init } : {}),
    };
    // A base snapshot's machine has no volume disks, and a restore needs the same devices.
    if (useBaseSnapshots(this.d, p.provider) && !opts.coldBoot && !volumes.length) {
      const base = await this.d.snaps.base(p, (vm) => prepareBase(this.d, vm, p));
      if (base) {
        this.d.sandboxes.update(id, { snapshot_id: base.id });
        try {
          const vm = await p.provider.spawn({ ...spec, restore: { files: Snapshots.files(base) } });
          this.wantPrestarted(p, base);
          return { vm, origin: "snapshot" };
        } catch (e) {
          if (!(e instanceof BootError)) throw e;
          // An unusable snapshot costs this spawn a cold boot, and no later spawn uses it.
          this.d.snaps.markUnusable(base, e.message);
          this.d.sandboxes.update(id, { snapshot_id: null });
        }
      }
    }
    const vm = await p.provider.spawn({ ...spec, rootfs: p.image.rootfs, image: p.image.name, diskMb: p.diskMb });
    try {
      await runSetup(this.d, vm, p);
    } catch (e) {
      await vm.destroy();
      throw e;
    }
    return { vm, origin: "boot" };
  }

  /** Whether spawns of this plan can take a prestarted VMM: restores of the default provider's base snapshot, with no devices of their own. */
  private prestartable(p: SpawnPlan, opts: SpawnOptions): boolean {
    return this.d.prestarts.enabled && !!p.provider.prestart && !opts.coldBoot && !p.volumes.length && !p.forkable && useBaseSnapshots(this.d, p.provider);
  }

  /** A prestarted VMM that has this plan's base snapshot loaded, or null. */
  private async takePrestarted(p: SpawnPlan, opts: SpawnOptions): Promise<{ vm: PrestartedVm; base: SnapshotRow } | null> {
    // The key costs file stats: only worth it when some VMM is held.
    if (!this.prestartable(p, opts) || !this.d.prestarts.holds()) return null;
    const { key, row } = await this.d.snaps.readyBase(p);
    const vm = row ? this.d.prestarts.take(key, row.id) : null;
    return vm && row ? { vm, base: row } : null;
  }

  /** Lets a prestarted VMM run as sandbox `id`; null when it fails to (the spawn then restores as usual, under the same id). */
  private async startPrestarted(id: string, p: SpawnPlan, pre: { vm: PrestartedVm; base: SnapshotRow }, opts: SpawnOptions): Promise<{ vm: Vm; origin: string } | null> {
    this.d.sandboxes.update(id, { snapshot_id: pre.base.id });
    try {
      const vm = await pre.vm.start({ hostname: opts.hostname ?? id, bootTimeoutMs: opts.bootTimeoutMs });
      this.wantPrestarted(p, pre.base);
      return { vm, origin: "prestarted" };
    } catch (e) {
      if (!(e instanceof BootError)) throw e;
      this.d.sandboxes.update(id, { snapshot_id: null });
      return null;
    }
  }

  /** Asks for prestarted VMMs of this plan's shape, now that a spawn restored its base. */
  private wantPrestarted(p: SpawnPlan, base: SnapshotRow): void {
    if (!this.d.prestarts.enabled || !p.provider.prestart || p.forkable || base.base_key === null) return;
    const provider = p.provider;
    this.d.prestarts.want({
      key: base.base_key,
      snapshotId: base.id,
      make: () => {
        const id = newSandboxId();
        return provider.prestart!({ id, memoryMb: p.memoryMb, vcpus: p.vcpus, hostname: id, nic: p.nic, restore: { files: Snapshots.files(base) }, nice: POOL_NICE });
      },
    });
  }

  /** A warm VM for this plan, made into a running sandbox; null when its pool is empty. */
  private async claimPooled(p: SpawnPlan, opts: SpawnOptions): Promise<Sandbox | null> {
    // Without pools there is nothing to claim: no need to compute the key (file stats) per spawn.
    if (this.d.warm.empty || opts.coldBoot || opts.hostname || p.volumes.length || !useBaseSnapshots(this.d, p.provider)) return null;
    const got = this.d.warm.claim(await this.poolKey(p));
    if (!got) return null;
    const row = { ...this.d.planner.newRow(p, opts, got.vm.info.id), snapshot_id: got.snapshotId };
    this.d.sandboxes.insert(row);
    this.d.events.emit("sandbox.created", row.id, { image: row.image, memory_mb: row.memory_mb, vcpus: row.vcpus });
    // Back to normal priority beside the admission, and done before the sandbox is handed out.
    const reniced = got.vm.setNice(0);
    try {
      const [sb] = await Promise.all([this.d.lifecycle.admit(row, got.vm, p.image, "pool", p.secrets), reniced]);
      return sb;
    } catch (e) {
      await this.d.lifecycle.recordFailure(row.id, e);
      throw e;
    }
  }

  /**
   * (Re)sizes the warm pools from the config (default spawns) and the templates' `pool_size`.
   * Resolves once the pools are set; they fill in the background.
   */
  async configurePools(): Promise<void> {
    if (!useBaseSnapshots(this.d)) return;
    const wanted: { label: string; size: number; opts: SpawnOptions }[] = [];
    if (this.d.opts.warmPool?.size) wanted.push({ label: `image:${this.d.defaults.image}`, size: this.d.opts.warmPool.size, opts: {} });
    for (const t of this.d.templates.list()) if (t.pool_size) wanted.push({ label: `template:${t.name}`, size: t.pool_size, opts: { template: t.name } });
    const targets: PoolTarget[] = [];
    for (const w of wanted) {
      try {
        const p = await this.d.planner.plan(w.opts);
        targets.push({ key: await this.poolKey(p), label: w.label, size: w.size, memoryMb: p.memoryMb, make: () => this.makePooled(p) });
      } catch (e) {
        this.d.events.emit("pool.error", null, { pool: w.label, error: (e as Error).message.split("\n")[0] });
      }
    }
    await this.d.warm.configure(targets);
    await this.d.snaps.collect();
  }

  /** Which warm pool serves a plan: its base snapshot's, apart for forkable VMs (their RAM is a file of their own, not the base's mapped). */
  private async poolKey(p: SpawnPlan): Promise<string> {
    return `${await this.d.snaps.baseKey(p)}${p.forkable ? ":forkable" : ""}`;
  }

  /** Restores one VM for a warm pool, at low priority, under the sandbox id it will have. */
  private async makePooled(p: SpawnPlan): Promise<{ vm: Vm; snapshotId: string }> {
    const base = await this.d.snaps.base(p, (vm) => prepareBase(this.d, vm, p));
    if (!base) throw new Error(`no base snapshot for ${p.image.name}`);
    const id = newSandboxId();
    const vm = await this.d.provider.spawn({
      id,
      memoryMb: p.memoryMb,
      vcpus: p.vcpus,
      hostname: id,
      restore: { files: Snapshots.files(base) },
      nice: POOL_NICE,
      nic: p.nic,
      forkable: p.forkable,
    });
    // A first exec in a restored VM costs ~5× a later one (under TCG the code it runs is
    // translated afresh in every QEMU); pay it here, not in the claimer's first command.
    try {
      for (let i = 0; i < 2; i++) await vm.guest.execBuffered({ argv: ["true"], timeout_ms: 30_000 });
    } catch (e) {
      await vm.destroy();
      throw e;
    }
    return { vm, snapshotId: base.id };
  }
}

/** What knows which snapshots live VMs are restored from. */
export interface InUseDeps {
  readonly sandboxes: Pick<SandboxStore, "list">;
  readonly snapshotRows: Pick<SnapshotStore, "get">;
  readonly warm: Pick<WarmPools, "snapshotIds">;
  readonly prestarts: Pick<Prestarts, "snapshotIds">;
  readonly tenants: Pick<TenantPool, "snapshotIds"> | null;
}

/** Snapshots that live VMs are restored from (their disks are backed by the snapshot's). */
export function snapshotsInUse(d: InUseDeps, exceptSources = false): Set<string> {
  const ids = new Set<string>();
  for (const r of d.sandboxes.list(["created", "creating", "running", "paused", "stopped"])) {
    // The sandbox a snapshot was taken of has its disk built on it, and restores nothing from it.
    if (r.snapshot_id && !(exceptSources && d.snapshotRows.get(r.snapshot_id)?.source_id === r.id)) ids.add(r.snapshot_id);
  }
  for (const id of d.warm.snapshotIds()) ids.add(id);
  for (const id of d.prestarts.snapshotIds()) ids.add(id);
  for (const id of d.tenants?.snapshotIds() ?? []) ids.add(id);
  return ids;
}
