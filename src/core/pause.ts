// Pausing a sandbox: its whole machine (memory, devices, disk) goes into a snapshot of kind
// `pause` and its VM stops, so it costs disk but no memory or CPU; resuming restores that
// snapshot under the same id, with its processes still running (the agent keeps them when
// told it is the same sandbox going on). A paused sandbox does not expire; it ends when it is
// destroyed (lifecycle's teardown), and its snapshot with it.
import { resolveImage } from "../images/store.js";
import { BootError, type Vm } from "../providers/provider.js";
import type { Core } from "./core.js";
import { conflict, ForgevmError, sandboxGone } from "./errors.js";
import { admit, keepConsoleLog, recordFailure } from "./lifecycle.js";
import type { Sandbox } from "./sandbox.js";
import { Snapshots } from "./snapshots.js";
import { requireState } from "./states.js";
import { expiryAfter } from "./durations.js";

/** Checks that a running sandbox can be saved whole (`verb`: paused or stopped). */
export function checkSavable(core: Core, id: string, verb: "paused" | "stopped"): void {
  const row = core.sandboxes.get(id)!;
  core.providers.require(core.providers.of(row), "snapshots", `sandbox ${id} cannot be ${verb}`);
  if (row.vm_id) throw new ForgevmError("BAD_REQUEST", `sandbox ${id} shares a pool VM with other sandboxes and cannot be ${verb}`);
  if (core.secrets.has(id)) throw conflict(`sandbox ${id} holds secrets, which would be written to disk in its memory image; it cannot be ${verb}`);
}

/** Why a sandbox was paused, as its `sandbox.paused` event says. */
export type PauseReason = "request" | "timeout" | "idle";

/** Stops a running sandbox after saving all of its state (as `paused`, or `stopped`); `resume` brings it back. */
export function pause(core: Core, sb: Sandbox, as: "paused" | "stopped" = "paused", reason: PauseReason = "request"): Promise<void> {
  const p = save(core, sb, as, reason).finally(() => core.pausing.delete(sb.id));
  core.pausing.set(sb.id, p);
  return p;
}

async function save(core: Core, sb: Sandbox, as: "paused" | "stopped", reason: PauseReason): Promise<void> {
  const row = core.sandboxes.get(sb.id)!;
  checkSavable(core, sb.id, as);
  if (core.destroying.has(sb.id)) throw sandboxGone(sb.id, `sandbox ${sb.id} is being destroyed`);
  // The disk alone must hold what the guest wrote: a stopped sandbox may later boot cold from it.
  await sb.sync().catch(() => {});
  const snap = await core.snaps.beginOf(row, "pause");
  try {
    await core.snaps.finish(snap, await sb.vm.snapshot(snap.dir));
  } catch (e) {
    await core.snaps.abort(snap);
    throw e;
  }
  // From here the snapshot is the sandbox: the VM goes, the record stays.
  core.live.delete(sb.id);
  core.mains.get(sb.id)?.dispose();
  core.mains.delete(sb.id);
  core.sandboxes.update(sb.id, { state: as, snapshot_id: snap.id, vm_pid: null });
  if (row.vm_dir) await keepConsoleLog(core, sb.id, row.vm_dir);
  await core.networks.detach(sb.id);
  core.hostDirs.forget(sb.id); // mounted again when it runs again
  await sb.vm.destroy();
  core.sandboxes.update(sb.id, { vm_dir: null });
  core.events.emit(as === "paused" ? "sandbox.paused" : "sandbox.stopped", sb.id, { snapshot_id: snap.id, ...(as === "paused" ? { reason } : {}) });
  await core.snaps.collect().catch(() => {});
}

/** Restores a paused (or stopped) sandbox under its own id, memory and files as they were; its life starts again at `ttlMs`. */
export async function resume(core: Core, id: string, ttlMs: number, from: "paused" | "stopped" = "paused", by = "request"): Promise<Sandbox> {
  // A pause still taking its VM down (its row says paused already) is waited for.
  await core.pausing.get(id)?.catch(() => {});
  const row = core.sandboxes.get(id);
  if (!row) throw sandboxGone(id, `sandbox ${id} not found`);
  requireState(row, from === "paused" ? "resume" : "start");
  const snap = row.snapshot_id ? core.snapshotRows.get(row.snapshot_id) : undefined;
  if (snap?.state !== "ready") throw new ForgevmError("UNAVAILABLE", `the snapshot of paused sandbox ${id} is missing`);
  core.sandboxes.update(id, { state: "creating", expires_at: expiryAfter(ttlMs) });
  try {
    const files = Snapshots.files(snap);
    const spec = { id, memoryMb: snap.memory_mb, vcpus: snap.vcpus, hostname: id, nic: !!snap.nic, volumes: await core.volumes.disks(row.volumes) };
    let vm: Vm;
    try {
      vm = await core.providers.of(row).spawn({ ...spec, restore: { files, keepProcesses: true } });
    } catch (e) {
      // A stopped sandbox's memory is only a head start (its main process runs anew): when the
      // saved machine cannot be restored (another VMM build, a damaged state file), it boots cold
      // on its own disk. A paused one promised its processes, so it fails instead.
      if (!(e instanceof BootError) || from !== "stopped" || !files.disk || !files.diskBytes) throw e;
      core.events.emit("sandbox.cold_start", id, { reason: e.message.split("\n")[0] });
      vm = await core.providers.of(row).spawn({ ...spec, baseDisk: { file: files.disk, bytes: files.diskBytes } });
    }
    const image = await resolveImage(core.paths, row.image).catch(() => null);
    // A started sandbox publishes its ports again, as a container does; a resumed one does not.
    const network = row.network ? { ...row.network, ports: from === "stopped" ? row.network.ports : [] } : null;
    const sb = await admit(core, { ...row, network, state: "creating" }, vm, image, vm.info.restored ? "resume" : "boot");
    core.events.emit(from === "paused" ? "sandbox.resumed" : "sandbox.started", id, { snapshot_id: snap.id, ...(from === "paused" ? { by } : {}) });
    // Its disk is backed by the snapshot's: the files go once the sandbox does.
    core.snapshotRows.update(snap.id, { state: "deleted" });
    return sb;
  } catch (e) {
    await recordFailure(core, id, e);
    throw e instanceof BootError ? new ForgevmError("UNAVAILABLE", `${from} sandbox ${id} could not be brought back: ${e.message.split("\n")[0]}`) : e;
  }
}

/**
 * Resumes a paused sandbox whose lifecycle says a call for it wakes it (`by` names the call),
 * once however many calls come at the same time; nothing for a sandbox that is not so paused.
 */
export async function wake(core: Core, id: string, by: string): Promise<void> {
  const row = core.sandboxes.get(id);
  if (row?.state !== "paused" && !core.waking.has(id)) return;
  if (row?.state === "paused" && !row.lifecycle?.auto_resume) return;
  let p = core.waking.get(id);
  if (!p) {
    p = resume(core, id, row!.lifecycle!.resume_ttl_ms, "paused", by).finally(() => core.waking.delete(id));
    core.waking.set(id, p);
  }
  await p;
}
