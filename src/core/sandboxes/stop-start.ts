// Docker's verbs on a sandbox: stop (its main process gets SIGTERM, then SIGKILL after a grace
// period, then every other process ends; then the whole machine is saved and its VM stops, so a
// stopped sandbox keeps its disk and costs no memory), start (brought back from that snapshot, its main process started again),
// restart, and signals to the main process. The restart policies live in main-process.ts.
import type { SandboxRow } from "../../store/sandboxes.js";
import type { Core } from "../core.js";
import { NO_TTL } from "../../schemas/durations.js";
import { conflict, sandboxGone } from "../../http/errors.js";
import { checkSavable, pause, resume } from "./pause.js";
import type { Sandbox } from "../guest/sandbox.js";
import { requireState } from "./states.js";
import { ignore } from "../../util/ignore.js";

/** How long `stop` waits for the main process after SIGTERM, unless told otherwise. */
export const DEFAULT_STOP_GRACE_MS = 10_000;

/** Stops a running sandbox, keeping its disk (and memory image); a person's stop (`byUser`) wins over any restart policy. */
export async function stop(core: Core, id: string, graceMs = DEFAULT_STOP_GRACE_MS, byUser = true): Promise<void> {
  const row = core.sandboxes.get(id);
  if (!row) throw sandboxGone(id, `sandbox ${id} not found`);
  requireState(row, "stop");
  const sb = core.table.live.get(id);
  if (!sb) throw conflict(`sandbox ${id} is run by another ForgeVM process`);
  checkSavable(core, id, "stopped");
  await core.table.mains.get(id)?.stop(graceMs, byUser);
  // As a container's stop: every process ends, not only the main one, so what starts again is
  // the sandbox's own (a fork bomb or a hung job does not come back with its memory).
  await sb.endAll().catch(ignore("a guest that cannot end its processes is saved as it is"));
  await pause(core, sb, "stopped");
}

/** Starts a stopped sandbox again (from its saved state, files as they were), with its main process. */
export async function start(core: Core, id: string, ttlMs: number): Promise<Sandbox> {
  const row = core.sandboxes.get(id);
  if (row?.main) core.sandboxes.setMain(id, { ...row.main, stopped_by_user: false });
  return resume(core, id, ttlMs, "stopped");
}

/** Stops (when running) and starts a sandbox. */
export async function restart(core: Core, id: string, ttlMs: number, graceMs = DEFAULT_STOP_GRACE_MS): Promise<Sandbox> {
  const row = core.sandboxes.get(id);
  if (!row) throw sandboxGone(id, `sandbox ${id} not found`);
  requireState(row, "restart");
  if (row.state === "running") await stop(core, id, graceMs);
  return start(core, id, ttlMs);
}

/** Sends a signal to a sandbox's main process. */
export async function kill(core: Core, id: string, signal: number): Promise<void> {
  const row = core.sandboxes.get(id);
  if (!row) throw sandboxGone(id, `sandbox ${id} not found`);
  requireState(row, "kill");
  const runner = core.table.mains.get(id);
  if (!runner?.running) throw conflict(`sandbox ${id} has no main process running${row.main ? ` (it exited with ${row.main.exit_code})` : ""}`);
  await runner.signal(signal);
}

/** How long a sandbox that starts again lives: `given`, else none for a service (a main process with a restart policy), else the default. */
export function lifeOf(core: Core, row: SandboxRow, given?: number): number {
  if (given !== undefined) return given;
  return row.main && row.main.restart !== "no" ? NO_TTL : core.defaults.ttlMs;
}

/**
 * At server start, as Docker's daemon does: stopped sandboxes come back when their policy is
 * `always`, or is another policy and the stop was not a person's (the server's own shutdown).
 */
export async function applyRestartPolicies(core: Core): Promise<void> {
  for (const row of core.sandboxes.list(["stopped"])) {
    const m = row.main;
    if (!m || m.restart === "no" || (m.restart !== "always" && m.stopped_by_user) || core.closed) continue;
    try {
      await start(core, row.id, lifeOf(core, row));
    } catch (e) {
      core.events.emit("sandbox.error", row.id, { error: `its restart policy (${m.restart}) could not start it: ${(e as Error).message.split("\n")[0]}` });
    }
  }
}
