// Pausing a sandbox: its whole machine (memory, devices, disk) goes into a snapshot of kind
// `pause` and its VM stops, so it costs disk but no memory or CPU; resuming restores that
// snapshot under the same id, with its processes still running. A paused sandbox does not
// expire; it ends when it is destroyed (lifecycle's teardown), and its snapshot with it.
//
// Within one server process a pause carries everything over: the agent channel is held before
// the save (no frame half-sent), the Sandbox object waits in `core.table.sleeping` with its process
// table, code contexts, main process, published ports and host directories, and the restored
// guest takes the same channel back, so streams, pids and output go on as if nothing happened.
// After a server restart that memory is gone: the guest is told to keep its processes running,
// detached from streams nobody holds any more.
import { EGRESS_HINT } from "./secrets.js";
import { resolveImage } from "../../images/store.js";
import { BootError, type Vm } from "../../providers/provider.js";
import type { Paths } from "../../config/paths.js";
import type { SandboxRow, SandboxStore } from "../../store/sandboxes.js";
import type { SnapshotStore } from "../../store/snapshots.js";
import type { Providers } from "../providers.js";
import type { EventBus } from "../events.js";
import type { Networks } from "../network.js";
import type { HostDirs } from "../host-dirs/host-dirs.js";
import type { Forwards } from "../guest/forwards.js";
import type { Volumes } from "../volumes.js";
import type { SandboxTable } from "./table.js";
import type { Lifecycle } from "./lifecycle.js";
import { conflict, ForgevmError, sandboxGone } from "../../http/errors.js";
import { keepConsoleLog } from "./lifecycle.js";
import type { Sandbox } from "../guest/sandbox.js";
import { abandon } from "./copies.js";
import { Snapshots } from "../snapshots/snapshots.js";
import { requireState } from "./states.js";
import { expiryAfter, NO_EXPIRY, NO_TTL } from "../../schemas/durations.js";
import { ignore } from "../../util/ignore.js";

/** What a pause and a resume take: the sandbox's row and run-time state, its snapshot, its provider, what it is attached to, and its start again. */
export interface PausesDeps {
  readonly paths: Paths;
  readonly sandboxes: SandboxStore;
  readonly snapshotRows: SnapshotStore;
  readonly snaps: Snapshots;
  readonly providers: Providers;
  readonly table: SandboxTable;
  readonly events: EventBus;
  readonly networks: Pick<Networks, "detach">;
  readonly hostDirs: Pick<HostDirs, "forget">;
  readonly forwards: Pick<Forwards, "forget">;
  readonly volumes: Pick<Volumes, "disks">;
  readonly lifecycle: Pick<Lifecycle, "admit" | "recordFailure" | "watch">;
}

/** Pauses and stops sandboxes to disk, and brings them back. */
export class Pauses {
  constructor(private readonly d: PausesDeps) {}

  /** Checks that a running sandbox can be saved whole (`verb`: paused or stopped). */
  checkSavable(id: string, verb: "paused" | "stopped"): void {
    const row = this.d.sandboxes.get(id)!;
    this.d.providers.require(this.d.providers.of(row), "snapshots", `sandbox ${id} cannot be ${verb}`);
    if (row.vm_id) throw new ForgevmError("BAD_REQUEST", `sandbox ${id} shares a pool VM with other sandboxes and cannot be ${verb}`);
    if (this.d.table.secrets.has(id)) throw conflict(`sandbox ${id} holds secrets, which would be written to disk in its memory image; it cannot be ${verb} (${EGRESS_HINT})`);
  }

  /**
   * Stops a running sandbox after saving all of its state (as `paused`, or `stopped`); `resume`
   * brings it back. A pause without `keepMemory` keeps the disk only (E2B's `memory: false`): its
   * resume is a cold boot over that disk, processes gone.
   */
  pause(sb: Sandbox, as: "paused" | "stopped" = "paused", reason: PauseReason = "request", keepMemory = true): Promise<void> {
    const p = this.d.table.pauseOnce(sb.id, () => this.save(sb, as, reason, keepMemory));
    // A call that reached the sandbox while it was being saved waits in its held channel: it wakes
    // it. A client that only follows output (a background command's stream, logs, a watch) does
    // not: it waits, silent, until something that wants an answer resumes the sandbox.
    if (as === "paused" && keepMemory)
      void p
        .then(async () => {
          if (sb.calling && this.d.table.sleeping.get(sb.id) === sb && !this.d.table.closed) await this.wake(sb.id, "a call during the pause", true);
        })
        .catch(ignore("a failed wake leaves the sandbox paused, and the call wakes it again"));
    return p;
  }

  private async save(sb: Sandbox, as: "paused" | "stopped", reason: PauseReason, keepMemory: boolean): Promise<void> {
    const row = this.d.sandboxes.get(sb.id)!;
    this.checkSavable(sb.id, as);
    if (this.d.table.destroying.has(sb.id)) throw sandboxGone(sb.id, `sandbox ${sb.id} is being destroyed`);
    // The disk alone must hold what the guest wrote: a stopped sandbox may later boot cold from it.
    await sb.sync().catch(ignore("a guest that cannot sync is saved as it is"));
    const snap = await this.d.snaps.beginOf(row, "pause");
    // A stop ends the processes; a pause keeps them, and here their streams too.
    const carry = as === "paused" && keepMemory && sb.vm.guest.supports("continue-sessions");
    let given = false;
    try {
      if (carry) await sb.vm.guest.hold();
      // A forkable VM hands its RAM file over (a link, no copy): the save is its devices only.
      // Any other stores what differs from the RAM file it was restored from.
      const saved = await sb.vm.snapshot(snap.dir, { memory: sb.vm.info.forkable ? "give" : "delta" });
      given = !!sb.vm.info.forkable;
      await this.d.snaps.finish(snap, saved);
    } catch (e) {
      // Its RAM went to a snapshot that goes now (the link removed): the file is its own again.
      if (given) await sb.vm.continueAfterGive?.().catch(ignore("the VM is being given up already; the pause's error is the one reported"));
      await abandon(this.d, snap, sb.id);
      // Not saved (a full disk): the sandbox runs on as it was, its held frames sent.
      if (carry) await sb.vm.guest.unhold().catch(ignore("the VM is being given up already; the pause's error is the one reported"));
      throw e;
    }
    // From here the snapshot is the sandbox: the VM goes, the record stays.
    this.d.table.sleep(sb, carry);
    if (!carry) {
      this.d.table.mains.get(sb.id)?.dispose();
      this.d.table.dropMain(sb.id);
    }
    this.d.sandboxes.update(sb.id, {
      state: as,
      snapshot_id: snap.id,
      vm_pid: null,
      paused_reason: as === "paused" ? reason : null,
      paused_keep: as === "paused" ? (keepMemory ? "memory" : "disk") : null,
    });
    if (row.vm_dir) await keepConsoleLog(this.d.paths, sb.id, row.vm_dir);
    if (!carry) {
      await this.d.networks.detach(sb.id);
      this.d.hostDirs.forget(sb.id); // mounted again when it runs again
      this.d.forwards.forget(sb.id);
    }
    await sb.vm.destroy();
    this.d.sandboxes.update(sb.id, { vm_dir: null });
    this.d.events.emit(as === "paused" ? "sandbox.paused" : "sandbox.stopped", sb.id, {
      snapshot_id: snap.id,
      ...(as === "paused" ? { reason, streams_kept: carry, memory: keepMemory } : {}),
    });
    await this.d.snaps.collect().catch(ignore("collection runs again at the next end"));
  }

  /**
   * Restores a paused (or stopped) sandbox under its own id, memory and files as they were; its
   * life starts again at `ttlMs`. With `reboot`, a paused one boots cold over its disk instead
   * (E2B's connect({onResume: "reboot"})): files kept, processes gone, the memory image ignored.
   */
  async resume(id: string, ttlMs: number, from: "paused" | "stopped" = "paused", by = "request", opts: { reboot?: boolean } = {}): Promise<Sandbox> {
    // A pause still taking its VM down (its row says paused already) is waited for.
    await this.d.table.pausing.get(id)?.catch(ignore("a failed pause is reported to its own caller"));
    const t0 = performance.now();
    const row = this.d.sandboxes.get(id);
    if (!row) throw sandboxGone(id, `sandbox ${id} not found`);
    requireState(row, from === "paused" ? "resume" : "start");
    const snap = row.snapshot_id ? this.d.snapshotRows.get(row.snapshot_id) : undefined;
    if (snap?.state !== "ready") throw new ForgevmError("UNAVAILABLE", `the snapshot of paused sandbox ${id} is missing`);
    this.d.sandboxes.update(id, { state: "creating", expires_at: expiryAfter(ttlMs) });
    try {
      const files = Snapshots.files(snap);
      const forkable = !!row.forkable;
      // A cold boot of a system sandbox boots its systemd again; a restore has it running already.
      const spec = {
        id,
        memoryMb: snap.memory_mb,
        vcpus: snap.vcpus,
        hostname: id,
        nic: !!snap.nic,
        volumes: await this.d.volumes.disks(row.volumes),
        forkable,
        ...(row.init ? { init: row.init } : {}),
      };
      // A pause that kept the disk only: a cold boot over it, as after a crash (the disk was synced first).
      const cold = from === "paused" && (row.paused_keep === "disk" || !!opts.reboot);
      let asleep = from === "paused" ? this.d.table.sleeping.get(id) : undefined;
      if (cold && asleep) {
        // Its streams cannot go on in a machine that boots afresh: they end here.
        await this.letSleeperGo(id, asleep);
        asleep = undefined;
      }
      let vm: Vm;
      if (cold && (!files.disk || !files.diskBytes)) throw new ForgevmError("UNAVAILABLE", `the disk of paused sandbox ${id} is missing`);
      try {
        vm = cold
          ? await this.d.providers.of(row).spawn({ ...spec, baseDisk: { file: files.disk!, bytes: files.diskBytes! } })
          : await this.d.providers.of(row).spawn({
              ...spec,
              // The pause's RAM file becomes the VM's own again: nothing is copied.
              restore: { files, keepProcesses: true, sameMachine: true, adoptMemory: forkable && !!files.memory, guest: asleep?.vm.guest },
            });
      } catch (e) {
        // A stopped sandbox's memory is only a head start (its main process runs anew): when the
        // saved machine cannot be restored (another VMM build, a damaged state file), it boots cold
        // on its own disk. A paused one promised its processes, so it fails instead.
        if (cold || !(e instanceof BootError) || from !== "stopped" || !files.disk || !files.diskBytes) throw e;
        this.d.events.emit("sandbox.cold_start", id, { reason: e.message.split("\n")[0] });
        vm = await this.d.providers.of(row).spawn({ ...spec, baseDisk: { file: files.disk, bytes: files.diskBytes } });
      }
      if (asleep) {
        const sb = await this.rejoin(asleep, vm, by, t0);
        this.d.snapshotRows.update(snap.id, { state: "deleted" });
        return sb;
      }
      const image = await resolveImage(this.d.paths, row.image).catch(() => null);
      // It publishes its ports again (a paused sandbox keeps them), as a container does.
      const network = row.network;
      const sb = await this.d.lifecycle.admit({ ...row, network, state: "creating" }, vm, image, vm.info.restored ? "resume" : "boot");
      const resumeMs = Math.round(performance.now() - t0);
      this.d.events.emit(from === "paused" ? "sandbox.resumed" : "sandbox.started", id, {
        snapshot_id: snap.id,
        ...(from === "paused" ? { by, resume_ms: resumeMs, ...(cold ? { cold_boot: true } : {}) } : {}),
      });
      // Its disk is backed by the snapshot's: the files go once the sandbox does.
      this.d.snapshotRows.update(snap.id, { state: "deleted" });
      return sb;
    } catch (e) {
      // What waited asleep cannot go on: its streams end with the failure.
      const asleep = this.d.table.sleeping.get(id);
      if (asleep) await this.letSleeperGo(id, asleep);
      else {
        this.d.table.mains.get(id)?.dispose();
        this.d.table.dropMain(id);
      }
      await this.d.lifecycle.recordFailure(id, e);
      throw e instanceof BootError ? new ForgevmError("UNAVAILABLE", `${from} sandbox ${id} could not be brought back: ${e.message.split("\n")[0]}`) : e;
    }
  }

  /** Ends what a sandbox held asleep in this process (its channel, main process, network and host directories), as a pause that kept no streams would have. */
  async letSleeperGo(id: string, sb: Sandbox, reason?: Error): Promise<void> {
    this.d.table.forgetSleep(id);
    sb.vm.guest.close(reason);
    this.d.table.mains.get(id)?.dispose();
    this.d.table.dropMain(id);
    await this.d.networks.detach(id);
    this.d.hostDirs.forget(id);
    this.d.forwards.forget(id);
  }

  /** The sandbox that slept in this process, running again on its restored VM with every stream it had. */
  private async rejoin(sb: Sandbox, vm: Vm, by: string, t0: number): Promise<Sandbox> {
    // Destroyed while resuming (a DELETE, or shutdown): the destroy took care of the rest.
    if (this.d.sandboxes.get(sb.id)?.state !== "creating" || this.d.table.closed) {
      await vm.destroy();
      vm.guest.close();
      throw new ForgevmError("CONFLICT", `sandbox ${sb.id} was destroyed while it was resuming`);
    }
    sb.rebind(vm);
    this.d.table.wake(sb);
    this.d.lifecycle.watch(sb);
    this.d.sandboxes.update(sb.id, { state: "running", vm_pid: vm.info.pid, vm_dir: vm.info.dir, paused_reason: null, paused_keep: null });
    this.d.events.emit("sandbox.running", sb.id, { boot_ms: vm.info.bootMs, accel: vm.info.accel, origin: "resume" });
    const resumeMs = Math.round(performance.now() - t0);
    this.d.events.emit("sandbox.resumed", sb.id, { snapshot_id: this.d.sandboxes.get(sb.id)?.snapshot_id, by, streams_kept: true, resume_ms: resumeMs });
    return sb;
  }

  /**
   * Resumes a paused sandbox before a call for it is served (`by` names the call), once however
   * many calls come at the same time; nothing for one that is not paused. Only with `always`
   * (our own interfaces: any call wakes), after an idle pause, or when its lifecycle says so (E2B's autoResume).
   */
  async wake(id: string, by: string, always = false): Promise<void> {
    // A pause still under way is waited for: the call then finds the sandbox paused and wakes it.
    await this.d.table.pausing.get(id)?.catch(ignore("a failed pause is reported to its own caller"));
    const row = this.d.sandboxes.get(id);
    if (row?.state !== "paused" && !this.d.table.waking.has(id)) return;
    // An idle pause is the server's own doing, so it is undone for any caller; a pause someone asked
    // for is undone only where the sandbox's lifecycle says so (E2B's autoResume) or the caller always resumes.
    if (row?.state === "paused" && !always && !row.lifecycle?.auto_resume && row.paused_reason !== "idle") return;
    // A disk-only pause is never resumed behind a caller's back (E2B's rule): it would lose the processes.
    if (row?.state === "paused" && !always && row.paused_keep === "disk") return;
    await this.d.table.wakeOnce(id, () => this.resume(id, lifeAfterWake(this.d.snapshotRows, row!), "paused", by));
  }
}

/** Why a sandbox was paused, as its `sandbox.paused` event says (`server`: its server stopped, with server.on_stop: pause). */
export type PauseReason = "request" | "timeout" | "idle" | "server";

/** How long a woken (or resumed) sandbox lives: its lifecycle's resume TTL, else what it had left when it paused (at least a minute). */
export function lifeAfterWake(snapshotRows: Pick<SnapshotStore, "get">, row: SandboxRow): number {
  if (row.lifecycle?.auto_resume) return row.lifecycle.resume_ttl_ms;
  if (row.expires_at === NO_EXPIRY) return NO_TTL;
  const pausedAt = row.snapshot_id ? Date.parse(snapshotRows.get(row.snapshot_id)?.created_at ?? "") : Number.NaN;
  const left = Date.parse(row.expires_at) - (Number.isFinite(pausedAt) ? pausedAt : Date.now());
  return Math.max(left, 60_000);
}
