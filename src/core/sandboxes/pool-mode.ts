// Pool mode's side of spawning: a sandbox that is a user of its own in a shared VM
// (core/pools/tenant-pool.ts seats it), and the shared VMs themselves.
import { randomBytes } from "node:crypto";
import type { Vm } from "../../providers/provider.js";
import { BootError } from "../../providers/provider.js";
import { canonicalName } from "../../images/store.js";
import type { Core } from "../core.js";
import { badRequest, ForgevmError } from "../../http/errors.js";
import { execDefaults } from "./exec-defaults.js";
import { destroy, recordFailure, watch } from "./lifecycle.js";
import type { SpawnOptions } from "../options.js";
import { newRow, plan } from "./plan.js";
import { Sandbox } from "../guest/sandbox.js";
import { Snapshots } from "../snapshots/snapshots.js";
import { prepareBase, useBaseSnapshots, type Pull } from "./spawn-setup.js";

/** Pool mode: a sandbox that is a user of its own in a shared VM. */
export async function spawnTenant(core: Core, opts: SpawnOptions, pull: Pull): Promise<Sandbox> {
  const pool = core.opts.pool!;
  const image = pool.image || core.defaults.image;
  if (opts.network && opts.network !== "none") throw badRequest(`network: in pool mode sandboxes share a VM and have no network; only "none" is available`);
  if (opts.secrets && Object.keys(opts.secrets).length) throw badRequest("secrets: in pool mode sandboxes share a VM, where other tenants' processes could read them");
  if (opts.volumes?.length) throw badRequest("volumes: in pool mode sandboxes share a VM, which has no disks of theirs to mount");
  if (opts.allow?.length || opts.ports?.length) throw badRequest(`${opts.allow?.length ? "allow" : "ports"}: in pool mode sandboxes share a VM and have no network`);
  if (opts.image && canonicalName(opts.image) !== canonicalName(image)) {
    throw badRequest(`image: in pool mode every sandbox shares VMs of ${image}; "${opts.image}" is not available`);
  }
  const p = await plan(core, { ...opts, image, memoryMb: pool.memoryMb, vcpus: pool.vcpus, user: undefined, network: "none" }, pull);
  const row = newRow(core, p, opts);
  core.sandboxes.insert(row);
  core.events.emit("sandbox.created", row.id, { image: row.image, pool: true });
  try {
    const { host, tenant } = await core.tenants!.join(row.id);
    if (core.sandboxes.get(row.id)?.state !== "creating" || core.closed) {
      await core.tenants!.leave(row.id);
      throw new ForgevmError("CONFLICT", `sandbox ${row.id} was destroyed while it was starting`);
    }
    const sb = new Sandbox(row.id, row.image, host.vm!, (s) => destroy(core, s.id), core.events.emit, { ...execDefaults(p.image, row.env, null), cwd: tenant.home, tenant });
    core.table.admit(sb);
    watch(core, sb);
    core.sandboxes.update(row.id, { state: "running", vm_id: host.id, snapshot_id: host.snapshotId || null, origin: "pool" });
    core.events.emit("sandbox.running", row.id, { vm_id: host.id, user: tenant.user });
    return sb;
  } catch (e) {
    await recordFailure(core, row.id, e);
    throw e;
  }
}

/** A shared VM for pool mode, restored from the pool image's base snapshot when possible. */
export async function makePoolHost(core: Core, pull: Pull): Promise<{ vm: Vm; snapshotId: string }> {
  const pool = core.opts.pool!;
  const p = await plan(core, { image: pool.image || core.defaults.image, memoryMb: pool.memoryMb, vcpus: pool.vcpus }, pull);
  const id = `pool-${randomBytes(4).toString("hex")}`;
  const base = useBaseSnapshots(core) ? await core.snaps.base(p, (vm) => prepareBase(core, vm, p)) : null;
  if (base) {
    try {
      return { vm: await core.provider.spawn({ id, memoryMb: p.memoryMb, vcpus: p.vcpus, hostname: id, restore: { files: Snapshots.files(base) } }), snapshotId: base.id };
    } catch (e) {
      if (!(e instanceof BootError)) throw e;
      core.snaps.markUnusable(base, e.message);
    }
  }
  return { vm: await core.provider.spawn({ id, memoryMb: p.memoryMb, vcpus: p.vcpus, hostname: id, rootfs: p.image.rootfs, diskMb: p.diskMb }), snapshotId: "" };
}
