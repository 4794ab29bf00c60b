// Docker's verbs on a sandbox: stop (its main process gets SIGTERM, then SIGKILL after a grace
// period, then every other process ends; then the whole machine is saved and its VM stops, so a
// stopped sandbox keeps its disk and costs no memory), start (brought back from that snapshot, its main process started again),
// restart, and signals to the main process. The restart policies live in main-process.ts.
import type { SandboxRow, SandboxStore } from "../../store/sandboxes.js";
import type { EventBus } from "../events.js";
import type { SpawnDefaults } from "../options.js";
import type { SandboxTable } from "./table.js";
import type { Pauses } from "./pause.js";
import { NO_TTL } from "../../schemas/durations.js";
import { conflict, sandboxGone } from "../../http/errors.js";
import type { Sandbox } from "../guest/sandbox.js";
import { requireState } from "./states.js";
import { ignore } from "../../util/ignore.js";

/** How long `stop` waits for the main process after SIGTERM, unless told otherwise. */
export const DEFAULT_STOP_GRACE_MS = 10_000;

/** What Docker's verbs take: the sandbox's row and run-time state (its main process), its pause and resume, and the default life. */
export interface StopStartDeps {
  readonly sandboxes: SandboxStore;
  readonly table: SandboxTable;
  readonly events: EventBus;
  readonly defaults: Pick<SpawnDefaults, "ttlMs">;
  readonly pauses: Pick<Pauses, "checkSavable" | "pause" | "resume">;
}

/** Stops, starts, restarts and signals sandboxes as Docker does containers. */
export class StopStart {
  constructor(private readonly d: StopStartDeps) {}

  /** Stops a running sandbox, keeping its disk (and memory image); a person's stop (`byUser`) wins over any restart policy. */
  async stop(id: string, graceMs = DEFAULT_STOP_GRACE_MS, byUser = true): Promise<void> {
    const row = this.d.sandboxes.get(id);
    if (!row) throw sandboxGone(id, `sandbox ${id} not found`);
    requireState(row, "stop");
    const sb = this.d.table.live.get(id);
    if (!sb) throw conflict(`sandbox ${id} is run by another ForgeVM process`);
    this.d.pauses.checkSavable(id, "stopped");
    await this.d.table.mains.get(id)?.stop(graceMs, byUser);
    // As a container's stop: every process ends, not only the main one, so what starts again is
    // the sandbox's own (a fork bomb or a hung job does not come back with its memory).
    await sb.endAll().catch(ignore("a guest that cannot end its processes is saved as it is"));
    await this.d.pauses.pause(sb, "stopped");
  }

  /** Starts a stopped sandbox again (from its saved state, files as they were), with its main process. */
  async start(id: string, ttlMs: number): Promise<Sandbox> {
    const row = this.d.sandboxes.get(id);
    if (row?.main) this.d.sandboxes.setMain(id, { ...row.main, stopped_by_user: false });
    return this.d.pauses.resume(id, ttlMs, "stopped");
  }

  /** Stops (when running) and starts a sandbox. */
  async restart(id: string, ttlMs: number, graceMs = DEFAULT_STOP_GRACE_MS): Promise<Sandbox> {
    const row = this.d.sandboxes.get(id);
    if (!row) throw sandboxGone(id, `sandbox ${id} not found`);
    requireState(row, "restart");
    if (row.state === "running") await this.stop(id, graceMs);
    return this.start(id, ttlMs);
  }

  /** Sends a signal to a sandbox's main process. */
  async kill(id: string, signal: number): Promise<void> {
    const row = this.d.sandboxes.get(id);
    if (!row) throw sandboxGone(id, `sandbox ${id} not found`);
    requireState(row, "kill");
    const runner = this.d.table.mains.get(id);
    if (!runner?.running) throw conflict(`sandbox ${id} has no main process running${row.main ? ` (it exited with ${row.main.exit_code})` : ""}`);
    await runner.signal(signal);
  }

  /** How long a sandbox that starts again lives: `given`, else none for a service (a main process with a restart policy), else the default. */
  lifeOf(row: SandboxRow, given?: number): number {
    if (given !== undefined) return given;
    return row.main && row.main.restart !== "no" ? NO_TTL : this.d.defaults.ttlMs;
  }

  /**
   * At server start, as Docker's daemon does: stopped sandboxes come back when their policy is
   * `always`, or is another policy and the stop was not a person's (the server's own shutdown).
   */
  async applyRestartPolicies(): Promise<void> {
    for (const row of this.d.sandboxes.list(["stopped"])) {
      const m = row.main;
      if (!m || m.restart === "no" || (m.restart !== "always" && m.stopped_by_user) || this.d.table.closed) continue;
      try {
        await this.start(row.id, this.lifeOf(row));
      } catch (e) {
        this.d.events.emit("sandbox.error", row.id, { error: `its restart policy (${m.restart}) could not start it: ${(e as Error).message.split("\n")[0]}` });
      }
    }
  }
}
