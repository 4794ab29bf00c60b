// Pool mode's side of spawning: a sandbox that is a user of its own in a shared VM
// (core/pools/tenant-pool.ts seats it), and the shared VMs themselves.
import { randomBytes } from "node:crypto";
import type { Vm } from "../../providers/provider.js";
import { BootError } from "../../providers/provider.js";
import { canonicalName } from "../../images/store.js";
import type { SandboxStore } from "../../store/sandboxes.js";
import type { EventBus } from "../events.js";
import type { ForgeOptions, SpawnDefaults } from "../options.js";
import type { TenantPool } from "../pools/tenant-pool.js";
import type { SandboxTable } from "./table.js";
import type { Lifecycle } from "./lifecycle.js";
import type { Planner } from "./plan.js";
import type { Provider } from "../../providers/provider.js";
import { badRequest, ForgevmError } from "../../http/errors.js";
import { execDefaults } from "./exec-defaults.js";
import type { SpawnOptions } from "../options.js";
import { Sandbox } from "../guest/sandbox.js";
import { Snapshots } from "../snapshots/snapshots.js";
import { prepareBase, useBaseSnapshots, type SetupDeps } from "./spawn-setup.js";

/** What a pool-mode spawn takes: the pool's settings, the plan, the seat in a shared VM, and the sandbox's row and admission. */
export interface TenantSpawnerDeps {
  readonly opts: Pick<ForgeOptions, "pool">;
  readonly defaults: Pick<SpawnDefaults, "image">;
  readonly sandboxes: SandboxStore;
  readonly table: Pick<SandboxTable, "admit" | "closed">;
  readonly events: EventBus;
  readonly tenants: Pick<TenantPool, "join" | "leave">;
  readonly planner: Pick<Planner, "plan" | "newRow">;
  readonly lifecycle: Pick<Lifecycle, "destroy" | "recordFailure" | "watch">;
}

/** Spawns pool mode's sandboxes, each a user of its own in a shared VM. */
export class TenantSpawner {
  constructor(private readonly d: TenantSpawnerDeps) {}

  /** Pool mode: a sandbox that is a user of its own in a shared VM. */
  async spawn(opts: SpawnOptions): Promise<Sandbox> {
    const pool = this.d.opts.pool!;
    const image = pool.image || this.d.defaults.image;
    if (opts.network && opts.network !== "none") throw badRequest(`network: in pool mode sandboxes share a VM and have no network; only "none" is available`);
    if (opts.secrets && Object.keys(opts.secrets).length) throw badRequest("secrets: in pool mode sandboxes share a VM, where other tenants' processes could read them");
    if (opts.volumes?.length) throw badRequest("volumes: in pool mode sandboxes share a VM, which has no disks of theirs to mount");
    if (opts.allow?.length || opts.ports?.length) throw badRequest(`${opts.allow?.length ? "allow" : "ports"}: in pool mode sandboxes share a VM and have no network`);
    if (opts.image && canonicalName(opts.image) !== canonicalName(image)) {
      throw badRequest(`image: in pool mode every sandbox shares VMs of ${image}; "${opts.image}" is not available`);
    }
    const p = await this.d.planner.plan({ ...opts, image, memoryMb: pool.memoryMb, vcpus: pool.vcpus, user: undefined, network: "none" });
    const row = this.d.planner.newRow(p, opts);
    this.d.sandboxes.insert(row);
    this.d.events.emit("sandbox.created", row.id, { image: row.image, pool: true });
    try {
      const { host, tenant } = await this.d.tenants.join(row.id);
      if (this.d.sandboxes.get(row.id)?.state !== "creating" || this.d.table.closed) {
        await this.d.tenants.leave(row.id);
        throw new ForgevmError("CONFLICT", `sandbox ${row.id} was destroyed while it was starting`);
      }
      const sb = new Sandbox(row.id, row.image, host.vm!, (s) => this.d.lifecycle.destroy(s.id), this.d.events.emit, {
        ...execDefaults(p.image, row.env, null),
        cwd: tenant.home,
        tenant,
      });
      this.d.table.admit(sb);
      this.d.lifecycle.watch(sb);
      this.d.sandboxes.update(row.id, { state: "running", vm_id: host.id, snapshot_id: host.snapshotId || null, origin: "pool" });
      this.d.events.emit("sandbox.running", row.id, { vm_id: host.id, user: tenant.user });
      return sb;
    } catch (e) {
      await this.d.lifecycle.recordFailure(row.id, e);
      throw e;
    }
  }
}

/** What makes a shared VM: the pool's image and size, planned; its base snapshot; the default provider. */
export interface PoolHostDeps extends SetupDeps {
  readonly opts: Pick<ForgeOptions, "pool" | "baseSnapshots">;
  readonly defaults: Pick<SpawnDefaults, "image">;
  readonly provider: Provider;
  readonly snaps: Pick<Snapshots, "base" | "markUnusable">;
  readonly planner: Pick<Planner, "plan">;
}

/** A shared VM for pool mode, restored from the pool image's base snapshot when possible. */
export async function makePoolHost(d: PoolHostDeps): Promise<{ vm: Vm; snapshotId: string }> {
  const pool = d.opts.pool!;
  const p = await d.planner.plan({ image: pool.image || d.defaults.image, memoryMb: pool.memoryMb, vcpus: pool.vcpus });
  const id = `pool-${randomBytes(4).toString("hex")}`;
  const base = useBaseSnapshots(d) ? await d.snaps.base(p, (vm) => prepareBase(d, vm, p)) : null;
  if (base) {
    try {
      return { vm: await d.provider.spawn({ id, memoryMb: p.memoryMb, vcpus: p.vcpus, hostname: id, restore: { files: Snapshots.files(base) } }), snapshotId: base.id };
    } catch (e) {
      if (!(e instanceof BootError)) throw e;
      d.snaps.markUnusable(base, e.message);
    }
  }
  return { vm: await d.provider.spawn({ id, memoryMb: p.memoryMb, vcpus: p.vcpus, hostname: id, rootfs: p.image.rootfs, diskMb: p.diskMb }), snapshotId: "" };
}
