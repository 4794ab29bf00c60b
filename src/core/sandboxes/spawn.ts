// Spawning a sandbox: claim a warm VM, or let a prestarted VMM run, or restore from the base
// snapshot (made on first use, template setup included), or boot cold; then admit it as running.
// Warm pools are filled here, and prestarted VMMs asked for.
import type { PrestartedVm, Vm } from "../../providers/provider.js";
import { BootError } from "../../providers/provider.js";
import type { SnapshotRow } from "../../store/snapshots.js";
import type { Core } from "../core.js";
import { ForgevmError } from "../../http/errors.js";
import { admit, recordFailure } from "./lifecycle.js";
import type { SpawnOptions } from "../options.js";
import { newRow, newSandboxId, plan, type SpawnPlan } from "./plan.js";
import { spawnTenant } from "./pool-mode.js";
import type { Sandbox } from "../guest/sandbox.js";
import { prepareBase, runSetup, useBaseSnapshots, type Pull } from "./spawn-setup.js";
import { Snapshots } from "../snapshots/snapshots.js";
import { POOL_NICE, type PoolTarget } from "../pools/warm-pool.js";

/**
 * Starts a sandbox and returns once its agent answers: restored from its image's (or
 * template's) base snapshot when one exists or can be made, else booted. A failed start is
 * recorded as `error`.
 */
export async function spawn(core: Core, opts: SpawnOptions, pull: Pull): Promise<Sandbox> {
  if (core.closed) throw new ForgevmError("UNAVAILABLE", "the server is shutting down");
  // Pool mode shares the default provider's VMs; a spawn that names another provider gets its own sandbox.
  if (core.tenants && opts.template === undefined && (!opts.provider || opts.provider === core.provider.name)) return spawnTenant(core, opts, pull);
  const p = await plan(core, opts, pull);
  const pooled = await claimPooled(core, p, opts);
  if (pooled) return pooled;
  const pre = await takePrestarted(core, p, opts);
  const row = newRow(core, p, opts, pre?.vm.id);
  try {
    for (const m of p.volumes) core.volumes.checkFree(m); // again: another spawn may have taken one meanwhile
    core.sandboxes.insert(row);
  } catch (e) {
    await pre?.vm.discard(); // taken, so nobody else will
    throw e;
  }
  core.events.emit("sandbox.created", row.id, { image: row.image, memory_mb: row.memory_mb, vcpus: row.vcpus });
  try {
    const { vm, origin } = (pre && (await startPrestarted(core, row.id, p, pre, opts))) ?? (await startVm(core, row.id, p, opts));
    return await admit(core, row, vm, p.image, origin, p.secrets);
  } catch (e) {
    await recordFailure(core, row.id, e);
    throw e;
  }
}

/**
 * A VM for a new sandbox: restored from the base snapshot (made on first use, with the
 * template's setup commands already run), else booted cold with setup run now.
 */
export async function startVm(core: Core, id: string, p: SpawnPlan, opts: SpawnOptions): Promise<{ vm: Vm; origin: string }> {
  const volumes = await core.volumes.disks(p.volumes);
  const spec = { id, memoryMb: p.memoryMb, vcpus: p.vcpus, hostname: opts.hostname ?? id, bootTimeoutMs: opts.bootTimeoutMs, nic: p.nic, volumes, forkable: p.forkable };
  // A base snapshot's machine has no volume disks, and a restore needs the same devices.
  if (useBaseSnapshots(core, p.provider) && !opts.coldBoot && !volumes.length) {
    const base = await core.snaps.base(p, (vm) => prepareBase(core, vm, p));
    if (base) {
      core.sandboxes.update(id, { snapshot_id: base.id });
      try {
        const vm = await p.provider.spawn({ ...spec, restore: { files: Snapshots.files(base) } });
        wantPrestarted(core, p, base);
        return { vm, origin: "snapshot" };
      } catch (e) {
        if (!(e instanceof BootError)) throw e;
        // An unusable snapshot costs this spawn a cold boot, and no later spawn uses it.
        core.snaps.markUnusable(base, e.message);
        core.sandboxes.update(id, { snapshot_id: null });
      }
    }
  }
  const vm = await p.provider.spawn({ ...spec, rootfs: p.image.rootfs, image: p.image.name, diskMb: p.diskMb });
  try {
    await runSetup(core, vm, p);
  } catch (e) {
    await vm.destroy();
    throw e;
  }
  return { vm, origin: "boot" };
}

/** Whether spawns of this plan can take a prestarted VMM: restores of the default provider's base snapshot, with no devices of their own. */
function prestartable(core: Core, p: SpawnPlan, opts: SpawnOptions): boolean {
  return core.prestarts.enabled && !!p.provider.prestart && !opts.coldBoot && !p.volumes.length && !p.forkable && useBaseSnapshots(core, p.provider);
}

/** A prestarted VMM that has this plan's base snapshot loaded, or null. */
async function takePrestarted(core: Core, p: SpawnPlan, opts: SpawnOptions): Promise<{ vm: PrestartedVm; base: SnapshotRow } | null> {
  // The key costs file stats: only worth it when some VMM is held.
  if (!prestartable(core, p, opts) || !core.prestarts.holds()) return null;
  const { key, row } = await core.snaps.readyBase(p);
  const vm = row ? core.prestarts.take(key, row.id) : null;
  return vm && row ? { vm, base: row } : null;
}

/** Lets a prestarted VMM run as sandbox `id`; null when it fails to (the spawn then restores as usual, under the same id). */
async function startPrestarted(core: Core, id: string, p: SpawnPlan, pre: { vm: PrestartedVm; base: SnapshotRow }, opts: SpawnOptions): Promise<{ vm: Vm; origin: string } | null> {
  core.sandboxes.update(id, { snapshot_id: pre.base.id });
  try {
    const vm = await pre.vm.start({ hostname: opts.hostname ?? id, bootTimeoutMs: opts.bootTimeoutMs });
    wantPrestarted(core, p, pre.base);
    return { vm, origin: "prestarted" };
  } catch (e) {
    if (!(e instanceof BootError)) throw e;
    core.sandboxes.update(id, { snapshot_id: null });
    return null;
  }
}

/** Asks for prestarted VMMs of this plan's shape, now that a spawn restored its base. */
function wantPrestarted(core: Core, p: SpawnPlan, base: SnapshotRow): void {
  if (!core.prestarts.enabled || !p.provider.prestart || p.forkable || base.base_key === null) return;
  const provider = p.provider;
  core.prestarts.want({
    key: base.base_key,
    snapshotId: base.id,
    make: () => {
      const id = newSandboxId();
      return provider.prestart!({ id, memoryMb: p.memoryMb, vcpus: p.vcpus, hostname: id, nic: p.nic, restore: { files: Snapshots.files(base) }, nice: POOL_NICE });
    },
  });
}

/** A warm VM for this plan, made into a running sandbox; null when its pool is empty. */
async function claimPooled(core: Core, p: SpawnPlan, opts: SpawnOptions): Promise<Sandbox | null> {
  // Without pools there is nothing to claim: no need to compute the key (file stats) per spawn.
  if (core.warm.empty || opts.coldBoot || opts.hostname || p.volumes.length || !useBaseSnapshots(core, p.provider)) return null;
  const got = core.warm.claim(await poolKey(core, p));
  if (!got) return null;
  const row = { ...newRow(core, p, opts, got.vm.info.id), snapshot_id: got.snapshotId };
  core.sandboxes.insert(row);
  core.events.emit("sandbox.created", row.id, { image: row.image, memory_mb: row.memory_mb, vcpus: row.vcpus });
  void got.vm.setNice(0);
  try {
    return await admit(core, row, got.vm, p.image, "pool", p.secrets);
  } catch (e) {
    await recordFailure(core, row.id, e);
    throw e;
  }
}

/**
 * (Re)sizes the warm pools from the config (default spawns) and the templates' `pool_size`.
 * Resolves once the pools are set; they fill in the background.
 */
export async function configurePools(core: Core, pull: Pull): Promise<void> {
  if (!useBaseSnapshots(core)) return;
  const wanted: { label: string; size: number; opts: SpawnOptions }[] = [];
  if (core.opts.warmPool?.size) wanted.push({ label: `image:${core.defaults.image}`, size: core.opts.warmPool.size, opts: {} });
  for (const t of core.templates.list()) if (t.pool_size) wanted.push({ label: `template:${t.name}`, size: t.pool_size, opts: { template: t.name } });
  const targets: PoolTarget[] = [];
  for (const w of wanted) {
    try {
      const p = await plan(core, w.opts, pull);
      targets.push({ key: await poolKey(core, p), label: w.label, size: w.size, memoryMb: p.memoryMb, make: () => makePooled(core, p) });
    } catch (e) {
      core.events.emit("pool.error", null, { pool: w.label, error: (e as Error).message.split("\n")[0] });
    }
  }
  await core.warm.configure(targets);
  await core.snaps.collect();
}

/** Which warm pool serves a plan: its base snapshot's, apart for forkable VMs (their RAM is a file of their own, not the base's mapped). */
async function poolKey(core: Core, p: SpawnPlan): Promise<string> {
  return `${await core.snaps.baseKey(p)}${p.forkable ? ":forkable" : ""}`;
}

/** Restores one VM for a warm pool, at low priority, under the sandbox id it will have. */
async function makePooled(core: Core, p: SpawnPlan): Promise<{ vm: Vm; snapshotId: string }> {
  const base = await core.snaps.base(p, (vm) => prepareBase(core, vm, p));
  if (!base) throw new Error(`no base snapshot for ${p.image.name}`);
  const id = newSandboxId();
  const vm = await core.provider.spawn({
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
    for (let i = 0; i < 2; i++) await vm.channel.execBuffered({ argv: ["true"], timeout_ms: 30_000 });
  } catch (e) {
    await vm.destroy();
    throw e;
  }
  return { vm, snapshotId: base.id };
}

/** Snapshots that live VMs are restored from (their disks are backed by the snapshot's). */
export function snapshotsInUse(core: Core, exceptSources = false): Set<string> {
  const ids = new Set<string>();
  for (const r of core.sandboxes.list(["created", "creating", "running", "paused", "stopped"])) {
    // The sandbox a snapshot was taken of has its disk built on it, and restores nothing from it.
    if (r.snapshot_id && !(exceptSources && core.snapshotRows.get(r.snapshot_id)?.source_id === r.id)) ids.add(r.snapshot_id);
  }
  for (const id of core.warm.snapshotIds()) ids.add(id);
  for (const id of core.prestarts.snapshotIds()) ids.add(id);
  for (const id of core.tenants?.snapshotIds() ?? []) ids.add(id);
  return ids;
}
