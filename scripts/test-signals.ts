// A stop signal (Ctrl-C, a SIGTERM) ends a test run the way its end does: the files that run are
// told to stop (each file's process exits on it, and its exit hooks kill its VMs), nothing new
// starts, and the run's own cleanup removes what it made. Without this, Node's default death on
// the signal left the runner's process groups, the stand-in user's server and the shared bases'
// VM running. A second signal stops at once: every group is killed and the exit hooks run.
//
// Node's test runner is not told: on a signal it kills the files it runs before their exit hooks
// can run (their VMs were left running, seen here), and it starts the next file when one ends. It
// is held (SIGSTOP) while the rest of its group is told, and killed once they have ended.
import { groupMembers } from "../src/util/process.js";

/** Process groups this run started and stops on a signal (the system image's build), and the test runners' groups. */
const groups = new Set<number>();
const runners = new Set<number>();
/** Those only a second signal stops (the stand-in user's server, whose sandbox the run's cleanup ends first). */
const lastGroups = new Set<number>();
/** How long the files of a held runner have to end before the group is killed. */
const FILES_END_MS = 15_000;
let stopped: NodeJS.Signals | null = null;

/** The signal that stopped the run, or null while it runs. */
export const stopSignal = (): NodeJS.Signals | null => stopped;

/** Signals the process group `pid` leads (a process spawned `detached`); quiet when it has gone. */
function signalGroup(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(-pid, sig);
  } catch {
    // already gone
  }
}

/** Holds a test runner, tells its files to stop, and kills its group once they have ended (or after FILES_END_MS). */
function stopRunner(pgid: number): void {
  try {
    process.kill(pgid, "SIGSTOP"); // the leader alone: a stopped file would not hear its SIGTERM
  } catch {
    return; // gone
  }
  // A zombie counts as ended: its parent, the held runner, cannot reap it.
  for (const pid of groupMembers(pgid)) {
    try {
      process.kill(pid, "SIGTERM");
    } catch {
      // gone meanwhile
    }
  }
  const until = Date.now() + FILES_END_MS;
  const look = setInterval(() => {
    if (groupMembers(pgid).length && Date.now() < until) return;
    clearInterval(look);
    signalGroup(pgid, "SIGKILL");
  }, 100);
}

/**
 * Counts the group `pid` leads as the run's, to be stopped with it: `runner` for a test runner's,
 * `last` for one a second signal alone stops. The function returned forgets it once it has ended.
 */
export function ownGroup(pid: number | undefined, kind: "group" | "runner" | "last" = "group"): () => void {
  if (pid === undefined) return () => {};
  const set = kind === "runner" ? runners : kind === "last" ? lastGroups : groups;
  set.add(pid);
  if (stopped && kind === "runner") stopRunner(pid);
  else if (stopped && kind === "group") signalGroup(pid, "SIGTERM");
  return () => set.delete(pid);
}

/** Listens for SIGINT and SIGTERM for the rest of the run. */
export function listenForStop(): void {
  for (const sig of ["SIGINT", "SIGTERM"] as const)
    process.on(sig, () => {
      if (stopped) {
        console.error(`\n# test-suite: ${sig} again: stopping at once`);
        for (const g of [...groups, ...runners]) signalGroup(g, "SIGKILL");
        for (const g of lastGroups) signalGroup(g, "SIGTERM");
        process.exit(130);
      }
      stopped = sig;
      console.error(`\n# test-suite: ${sig}: stopping the tests that run, then removing what the run made (${sig} again stops at once)`);
      for (const g of groups) signalGroup(g, "SIGTERM");
      for (const g of runners) stopRunner(g);
    });
}
