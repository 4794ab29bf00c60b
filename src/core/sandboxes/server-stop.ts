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
import type { Core } from "../core.js";
import type { Sandbox } from "../guest/sandbox.js";
import type { Ending } from "./lifecycle.js";
import { checkSavable, letSleeperGo, pause } from "./pause.js";
import { stop } from "./stop-start.js";

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

/** Ends or lets go of every sandbox this process runs, as `mode` says; `destroy` destroys one. */
export async function stopSandboxes(core: Core, mode: OnStop, destroy: (id: string, ending: Ending) => Promise<void>): Promise<StopReport> {
  const report: StopReport = { kept: [], paused: [], stopped: [], destroyed: [] };
  // Work that is changing a sandbox's state finishes first: a pause half-made is no state to leave.
  await Promise.allSettled([...core.table.pausing.values(), ...core.table.waking.values(), ...core.table.destroying.values()]);
  const ending: Ending = { reason: "server stop", by: "server" };
  const outliving: Sandbox[] = [];
  for (const [id, sb] of [...core.table.live]) {
    const row = core.sandboxes.get(id);
    if (mode !== "destroy" && row && !row.vm_id && core.providers.of(row).features.reattach) {
      outliving.push(sb);
      continue;
    }
    const m = row?.main;
    if (m && m.restart !== "no" && !m.stopped_by_user && !row?.vm_id) {
      try {
        await stop(core, id, STOP_GRACE_MS, false);
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
        if (mode === "pause" && (await pauseForStop(core, sb))) report.paused.push(sb.id);
        else {
          await letGo(core, sb);
          report.kept.push(sb.id);
        }
      }
    }),
  );
  // Paused in this process with their streams held: those streams end now (the pause is on disk;
  // its main process goes on in the guest when a server resumes it, and is adopted then).
  for (const [id, sb] of [...core.table.sleeping]) {
    core.table.mains.get(id)?.release(SERVER_LEFT);
    core.table.dropMain(id);
    await letSleeperGo(core, id, sb, new HostLeftError(SERVER_LEFT));
  }
  return report;
}

/** Pauses a sandbox for a stop (false when it cannot be saved: it is then left running). */
async function pauseForStop(core: Core, sb: Sandbox): Promise<boolean> {
  try {
    checkSavable(core, sb.id, "paused");
    await pause(core, sb, "paused", "server");
    return true;
  } catch {
    return !core.table.live.has(sb.id);
  }
}

/**
 * Lets go of a running sandbox and leaves it running: its VM, processes and files stay as they
 * are; this server's side of it (published ports, the egress proxy's policy, host directories,
 * the main process's runner) ends, and streams in flight end with a clear reason. Its record
 * stays `running`, with when it was last used, for the next server to take it back.
 */
export async function letGo(core: Core, sb: Sandbox): Promise<void> {
  const id = sb.id;
  core.table.mains.get(id)?.release(SERVER_LEFT);
  core.table.end(id);
  await core.networks.detach(id);
  core.hostDirs.forget(id);
  core.sampler.forget(id);
  core.sandboxes.update(id, { manager_pid: null, last_active_at: new Date(sb.lastActive).toISOString() });
  sb.vm.release(new HostLeftError(SERVER_LEFT));
  core.events.emit("sandbox.released", id, { vm_pid: sb.vm.info.pid });
}
