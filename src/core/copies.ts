// Copies of running sandboxes: named snapshots, forks (running copies made while the parent is
// paused once), and restores of a snapshot into new sandboxes.
import { join } from "node:path";
import type { Writable } from "node:stream";
import { resolveImage } from "../images/store.js";
import { BootError, type Vm } from "../providers/provider.js";
import type { SandboxRow } from "../store/sandboxes.js";
import type { SnapshotRow } from "../store/snapshots.js";
import { MAX_FORK, type Core } from "./core.js";
import { badRequest, conflict, ForgevmError, notFound } from "./errors.js";
import { admit, recordFailure } from "./lifecycle.js";
import type { ForkOptions, ForkResult } from "./options.js";
import { copyNames, rowOf } from "./plan.js";
import type { Sandbox } from "./sandbox.js";
import { Snapshots } from "./snapshots.js";
import { ttlLeft } from "./durations.js";

/** Snapshots a running sandbox (memory, devices, disk) under an optional name; it keeps running. */
export async function snapshot(core: Core, sb: Sandbox, name?: string): Promise<SnapshotRow> {
  const src = core.sandboxes.get(sb.id)!;
  refuseCopy(core, src, "snapshotted");
  if (name !== undefined && core.snapshotRows.find(name)) throw conflict(`a snapshot named "${name}" already exists`);
  const row = await core.snaps.beginOf(src, "sandbox", name);
  try {
    return await core.snaps.finish(row, await sb.vm.snapshot(row.dir));
  } catch (e) {
    await core.snaps.abort(row);
    throw e;
  }
}

/** A snapshot by id or name. */
export function getSnapshot(core: Core, idOrName: string): SnapshotRow {
  const row = core.snapshotRows.find(idOrName);
  if (!row) throw notFound(`snapshot ${idOrName} not found`);
  return row;
}

/**
 * Makes `count` running copies of a sandbox as it is now, processes and memory included. The
 * children load while the parent is being copied; each gets its own disk overlay and a new
 * identity (hostname, machine id, entropy, clock). The parent pauses for the copy only.
 */
export async function fork(core: Core, parent: Sandbox, opts: ForkOptions = {}): Promise<ForkResult> {
  const count = opts.count ?? 1;
  if (!Number.isInteger(count) || count < 1 || count > MAX_FORK) throw badRequest(`count must be an integer from 1 to ${MAX_FORK}`);
  const id = parent.id;
  const src = core.sandboxes.get(id)!;
  refuseCopy(core, src, "forked");
  if (opts.network !== undefined || opts.allow !== undefined)
    throw badRequest(`${opts.network !== undefined ? "network" : "allow"}: a fork keeps its parent's network; change the copies' allowlist after the fork`);
  const image = await resolveImage(core.paths, src.image).catch(() => null);
  const snap = await core.snaps.beginOf(src, "fork");
  const started = performance.now();
  const rows: SandboxRow[] = [];
  try {
    const disk = await parent.vm.prepareSnapshot(snap.dir);
    const files = { state: join(snap.dir, "state"), disk: disk?.disk, diskBytes: disk?.diskBytes };
    const tees: Writable[] = [];
    let fed!: () => void;
    const allFed = new Promise<void>((r) => (fed = r));
    const ttlMs = opts.ttlMs ?? Math.max(1000, ttlLeft(src.expires_at));
    // Names stay unique: the copies of "web" are web-1, web-2, … (and the name kept in the metadata follows).
    const parentName = src.name ?? src.metadata?.name ?? null;
    const names = copyNames(core, parentName, count);
    const children = names.map((name) => {
      // A copy keeps its parent's network and allowlist; host ports stay with the parent.
      const network = src.network ? { ...src.network, ports: [] } : null;
      const inherited = opts.metadata ?? src.metadata;
      const metadata = inherited && name && "name" in inherited ? { ...inherited, name } : inherited;
      const row = { ...rowOf(core, { ...src, network }, { ttlMs, ownerId: opts.ownerId ?? src.owner_id, metadata, snapshotId: snap.id }), name };
      rows.push(row);
      core.sandboxes.insert(row);
      core.events.emit("sandbox.created", row.id, { image: row.image, forked_from: id });
      return core.providers.of(src).spawn({
        id: row.id,
        memoryMb: src.memory_mb,
        vcpus: src.vcpus,
        hostname: row.id,
        nic: src.network?.mode === "full",
        restore: {
          files,
          diskInUse: true,
          feed: (w) => {
            tees.push(w);
            if (tees.length === count) fed();
          },
        },
      });
    });
    // A child that fails before QEMU runs would never take its pipe: stop waiting then.
    const settled = Promise.allSettled(children);
    await Promise.race([allFed, settled]);
    if (tees.length < count) throw (await settled).find((r) => r.status === "rejected")!.reason;
    const capture = await parent.vm.snapshot(snap.dir, { tees, disk: disk?.disk });
    await core.snaps.finish(snap, capture);
    const results = await settled;
    const failed = results.find((r) => r.status === "rejected");
    if (failed) {
      await Promise.all(results.map((r) => (r.status === "fulfilled" ? r.value.destroy() : null)));
      throw failed.reason;
    }
    const sandboxes: Sandbox[] = [];
    for (const [i, r] of results.entries()) sandboxes.push(await admit(core, rows[i], (r as PromiseFulfilledResult<Vm>).value, image, "fork"));
    core.events.emit("sandbox.forked", id, { children: rows.map((r) => r.id), pause_ms: capture.pauseMs });
    return { sandboxes, pauseMs: capture.pauseMs, totalMs: Math.round(performance.now() - started), snapshotBytes: capture.bytes };
  } catch (e) {
    for (const r of rows) await recordFailure(core, r.id, e);
    if (core.snapshotRows.get(snap.id)?.state === "creating") await core.snaps.abort(snap);
    else await core.snaps.collect();
    throw e;
  }
}

/** Starts `count` sandboxes from a snapshot, each as the sandbox was when it was taken. */
export async function restore(core: Core, idOrName: string, opts: ForkOptions = {}): Promise<Sandbox[]> {
  if (!core.provider.features.snapshots) throw badRequest(`provider ${core.provider.name} cannot restore snapshots`);
  const snap = getSnapshot(core, idOrName);
  if (snap.state !== "ready") throw conflict(`snapshot ${snap.id} is ${snap.state}`);
  const count = opts.count ?? 1;
  if (!Number.isInteger(count) || count < 1 || count > MAX_FORK) throw badRequest(`count must be an integer from 1 to ${MAX_FORK}`);
  const image = await resolveImage(core.paths, snap.image).catch(() => null);
  const source = snap.source_id ? core.sandboxes.get(snap.source_id)?.network : null;
  const network =
    opts.network !== undefined || opts.allow !== undefined
      ? core.networks.plan({ mode: opts.network, allow: opts.allow })
      : source
        ? { ...source, ports: [] }
        : core.networks.plan({ mode: snap.nic ? "full" : undefined });
  // The network device is part of the saved machine: a copy has one exactly when the snapshot did.
  if ((network.mode === "full") !== !!snap.nic) {
    throw badRequest(
      `network: snapshot ${snap.id} was taken ${snap.nic ? "with" : "without"} a network device; its copies must use network ${snap.nic ? '"full"' : '"none" or "allowlist"'}`,
    );
  }
  return Promise.all(
    Array.from({ length: count }, async () => {
      const row = rowOf(core, { ...snap, network }, { ttlMs: opts.ttlMs ?? core.defaults.ttlMs, ownerId: opts.ownerId, metadata: opts.metadata, snapshotId: snap.id });
      core.sandboxes.insert(row);
      core.events.emit("sandbox.created", row.id, { image: row.image, snapshot_id: snap.id });
      try {
        const spec = { id: row.id, memoryMb: snap.memory_mb, vcpus: snap.vcpus, hostname: row.id, restore: { files: Snapshots.files(snap) }, nic: !!snap.nic };
        // Under emulation a restored guest has (rarely: twice in the test suite's history) never
        // answered; a restore is cheap, so one more is tried before the caller hears of it.
        const vm = await core.provider.spawn(spec).catch(async (e) => {
          if (!(e instanceof BootError)) throw e;
          core.events.emit("sandbox.restore_retry", row.id, { snapshot_id: snap.id, reason: e.message.split("\n")[0] });
          return core.provider.spawn(spec);
        });
        return await admit(core, row, vm, image, "snapshot");
      } catch (e) {
        await recordFailure(core, row.id, e);
        throw e instanceof BootError ? new ForgevmError("UNAVAILABLE", `snapshot ${snap.id} could not be restored: ${e.message.split("\n")[0]}`) : e;
      }
    }),
  );
}

/** What no copy may be made of: a pool VM's tenant, a sandbox holding secrets, a provider without snapshots. */
function refuseCopy(core: Core, src: SandboxRow, what: "snapshotted" | "forked"): void {
  core.providers.require(core.providers.of(src), "snapshots", `sandbox ${src.id} cannot be ${what}`);
  if (src.vm_id) throw badRequest(`sandbox ${src.id} shares a pool VM with other sandboxes and cannot be ${what}`);
  // A sandbox holding secrets has them in its RAM: no snapshot may carry them to disk.
  if (core.secrets.has(src.id)) throw conflict(`sandbox ${src.id} holds secrets, which a snapshot would write to disk in its memory image; it cannot be ${what}`);
  // A copy would share the volume's one filesystem with its parent: two writers corrupt it.
  if (src.volumes?.length)
    throw conflict(
      `sandbox ${src.id} mounts volume ${src.volumes.map((v) => `${v.name} at ${v.path}`).join(", ")}; a copy cannot share it, so it cannot be ${what} (copy the data into the sandbox's own disk first)`,
    );
}
