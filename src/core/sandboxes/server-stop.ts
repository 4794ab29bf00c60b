// What stopping the server does to its sandboxes (config server.on_stop). The server is a
// controller of VMs that outlive it, as a container daemon with live-restore is: by default
// ("keep") it lets go of each VM and leaves it running, its processes detached in the guest for
// the next server to adopt (guest/adopt.ts), so a restart or an upgrade ends no work; "pause"
// first saves each one that can be saved to disk (the next start resumes them, so a host reboot
// keeps them too); "destroy" ends them all, as a throwaway server wants. What cannot outlive its
// server (pool-mode sandboxes share a VM the server owns; some providers cannot re-attach) is
// destroyed and says why, and a sandbox with a restart policy is then stopped instead, as before.
import { HostLeftError } from "../../agent-client/index.js";
import { ignore } from "../../util/ignore.js";
import type { SandboxStore } from "../../store/sandboxes.js";
import type { Providers } from "../providers.js";
import type { EventBus } from "../events.js";
import type { Networks } from "../network.js";
import type { HostDirs } from "../host-dirs/host-dirs.js";
import type { Forwards } from "../guest/forwards.js";
import type { MetricsSampler } from "../metrics/sampler.js";
import type { SandboxTable } from "./table.js";
import type { Pauses } from "./pause.js";
import type { StopStart } from "./stop-start.js";
import type { Sandbox } from "../guest/sandbox.js";
import type { Ending } from "./lifecycle.js";

/** What a server's stop does to its running sandboxes. */
export type OnStop = "keep" | "pause" | "destroy";

/** What a stop did, by sandbox id. */
export interface StopReport {
  /** Left running, for the next server to take back. */
  kept: string[];
  /** Paused to disk (the next server resumes them). */
  paused: string[];
  /** Stopped (a restart policy brings them back at the next start). */
  stopped: string[];
  destroyed: string[];
}

/** How long a main process gets after SIGTERM when the server stops a sandbox with a restart policy. */
const STOP_GRACE_MS = 5000;
/** Pauses made at once while the server stops: each writes a VM's memory to disk. */
const PAUSES_AT_ONCE = 4;

export const SERVER_LEFT =
  "the server is stopping: the sandbox and its processes run on, and the server's next start takes them back (reconnect then; a process is found by its pid)";

/** What a server's stop goes over: the sandboxes it runs, their providers, their pauses and stops, and what this server holds for them. */
export interface ServerStopDeps {
  readonly sandboxes: SandboxStore;
  readonly providers: Providers;
  readonly table: SandboxTable;
  readonly events: EventBus;
  readonly networks: Pick<Networks, "detach">;
  readonly hostDirs: Pick<HostDirs, "forget">;
  readonly forwards: Pick<Forwards, "forget">;
  readonly sampler: Pick<MetricsSampler, "forget">;
  readonly pauses: Pick<Pauses, "checkSavable" | "pause" | "letSleeperGo">;
  readonly stopStart: Pick<StopStart, "stop">;
}

/** Leaves, pauses or ends the sandboxes of a server that stops. */
export class ServerStop {
  constructor(private readonly d: ServerStopDeps) {}

  /** Ends or lets go of every sandbox this process runs, as `mode` says; `destroy` destroys one. */
  async stopSandboxes(mode: OnStop, destroy: (id: string, ending: Ending) => Promise<void>): Promise<StopReport> {
    const report: StopReport = { kept: [], paused: [], stopped: [], destroyed: [] };
    // Work that is changing a sandbox's state finishes first: a pause half-made is no state to leave.
    await Promise.allSettled([...this.d.table.pausing.values(), ...this.d.table.waking.values(), ...this.d.table.destroying.values()]);
    const ending: Ending = { reason: "server stop", by: "server" };
    const outliving: Sandbox[] = [];
    for (const [id, sb] of [...this.d.table.live]) {
      const row = this.d.sandboxes.get(id);
      if (mode !== "destroy" && row && !row.vm_id && this.d.providers.of(row).features.reattach) {
        outliving.push(sb);
        continue;
      }
      const m = row?.main;
      if (m && m.restart !== "no" && !m.stopped_by_user && !row?.vm_id) {
        try {
          await this.d.stopStart.stop(id, STOP_GRACE_MS, false);
          report.stopped.push(id);
          continue;
        } catch {
          // cannot be saved (secrets, a provider without snapshots): it ends as any other
        }
      }
      await destroy(id, ending).catch(ignore("a sandbox that cannot be destroyed now is found by the next start's recovery"));
      report.destroyed.push(id);
    }
    const queue = [...outliving];
    await Promise.all(
      Array.from({ length: PAUSES_AT_ONCE }, async () => {
        for (let sb = queue.shift(); sb; sb = queue.shift()) {
          if (mode === "pause" && (await this.pauseForStop(sb))) report.paused.push(sb.id);
          else {
            await this.letGo(sb);
            report.kept.push(sb.id);
          }
        }
      }),
    );
    // Paused in this process with their streams held: those streams end now (the pause is on disk;
    // its main process goes on in the guest when a server resumes it, and is adopted then).
    for (const [id, sb] of [...this.d.table.sleeping]) {
      this.d.table.mains.get(id)?.release(SERVER_LEFT);
      this.d.table.dropMain(id);
      await this.d.pauses.letSleeperGo(id, sb, new HostLeftError(SERVER_LEFT));
    }
    return report;
  }

  /** Pauses a sandbox for a stop (false when it cannot be saved: it is then left running). */
  private async pauseForStop(sb: Sandbox): Promise<boolean> {
    try {
      this.d.pauses.checkSavable(sb.id, "paused");
      await this.d.pauses.pause(sb, "paused", "server");
      return true;
    } catch {
      return !this.d.table.live.has(sb.id);
    }
  }

  /**
   * Lets go of a running sandbox and leaves it running: its VM, processes and files stay as they
   * are; this server's side of it (published ports, the egress proxy's policy, host directories,
   * the main process's runner) ends, and streams in flight end with a clear reason. Its record
   * stays `running`, with when it was last used, for the next server to take it back.
   */
  async letGo(sb: Sandbox): Promise<void> {
    const id = sb.id;
    // Held first: everything the guest sent before the hold's answer is read (the main process's
    // log has it), and what it writes after waits in the agent, which keeps it with the process
    // for the server that adopts it. Without a hold, frames in the port when it closed were lost.
    if (sb.vm.guest.supports("continue-sessions")) await sb.vm.guest.hold().catch(ignore("a guest that does not answer is let go as it is"));
    this.d.table.mains.get(id)?.release(SERVER_LEFT);
    this.d.table.end(id);
    await this.d.networks.detach(id);
    this.d.hostDirs.forget(id);
    this.d.forwards.forget(id);
    this.d.sampler.forget(id);
    this.d.sandboxes.update(id, { manager_pid: null, last_active_at: new Date(sb.lastActive).toISOString() });
    sb.vm.release(new HostLeftError(SERVER_LEFT));
    this.d.events.emit("sandbox.released", id, { vm_pid: sb.vm.info.pid });
  }
}
