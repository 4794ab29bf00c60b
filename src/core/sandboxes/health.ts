// A main process's HEALTHCHECK, run as Docker runs a container's: every interval, the image's
// test runs in the guest as the main process's user; exit 0 is a pass, anything else (or a
// test past its timeout) a failure. The status starts as "starting", is "healthy" after a pass,
// and "unhealthy" after `retries` failures in a row; failures within the start period do not
// count. The last five checks are kept with their output. A check is the server's own doing:
// it is no use of the sandbox (an idle timer runs out all the same), and a paused or stopped
// sandbox is not checked (nor woken to be).
import type { ImageConfig } from "../../images/oci.js";
import type { HealthSpec, HealthState } from "../../store/sandboxes.js";

/** Docker's defaults: a check every 30 s, each given 30 s, unhealthy after 3 failures. */
const DEFAULT_INTERVAL_MS = 30_000;
const DEFAULT_TIMEOUT_MS = 30_000;
const DEFAULT_RETRIES = 3;
/** Checks kept in the log, and bytes of output kept per check (Docker's figures). */
const LOG_ENTRIES = 5;
const MAX_OUTPUT = 4096;
/** The shortest interval an image may ask for (a check is an exec in the guest). */
const MIN_INTERVAL_MS = 1000;

/** An image's HEALTHCHECK as a sandbox runs it; null for none (absent, NONE, or malformed). */
export function healthSpec(h: ImageConfig["Healthcheck"]): HealthSpec | null {
  if (!h) return null;
  const [kind, ...rest] = h.Test;
  const argv = kind === "CMD" ? rest : kind === "CMD-SHELL" && rest.length === 1 ? ["/bin/sh", "-c", rest[0]] : null;
  if (!argv?.length) return null;
  const ms = (ns: number | undefined, dflt: number) => (ns ? Math.max(1, Math.round(ns / 1e6)) : dflt);
  return {
    argv,
    interval_ms: Math.max(MIN_INTERVAL_MS, ms(h.Interval, DEFAULT_INTERVAL_MS)),
    timeout_ms: ms(h.Timeout, DEFAULT_TIMEOUT_MS),
    start_period_ms: ms(h.StartPeriod, 0),
    retries: h.Retries ?? DEFAULT_RETRIES,
  };
}

/** What a check needs of its sandbox: a way to run the test that is not a use of it. */
export interface Probe {
  probe(argv: string[], opts: { user?: string; timeoutMs: number; maxOutputBytes: number }): Promise<{ exitCode: number; output: string; timedOut: boolean }>;
}

/** Runs one main process's health checks from its start until stopped. */
export class HealthMonitor {
  private timer: NodeJS.Timeout | null = null;
  private readonly startedAt = Date.now();
  private state: HealthState = { status: "starting", failing_streak: 0, log: [] };

  constructor(
    private readonly sb: Probe,
    private readonly spec: HealthSpec,
    private readonly user: string | undefined,
    private readonly hooks: {
      /** Whether the sandbox runs now (a paused or stopped one is not checked). */
      running(): boolean;
      /** Each check's outcome; `changed` when the status is not what it was. */
      record(state: HealthState, changed: boolean): void;
    },
  ) {}

  start(): void {
    this.hooks.record(this.state, true);
    this.schedule();
  }

  stop(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
  }

  private schedule(): void {
    this.timer = setTimeout(() => void this.check(), this.spec.interval_ms);
    this.timer.unref();
  }

  private async check(): Promise<void> {
    if (!this.timer) return;
    if (!this.hooks.running()) return this.schedule();
    const start = new Date();
    let exitCode: number;
    let output: string;
    try {
      const r = await this.sb.probe(this.spec.argv, { user: this.user, timeoutMs: this.spec.timeout_ms, maxOutputBytes: MAX_OUTPUT });
      exitCode = r.timedOut ? -1 : r.exitCode;
      output = r.timedOut ? `the check ran past its timeout (${this.spec.timeout_ms} ms)` : r.output;
    } catch (e) {
      exitCode = -1;
      output = (e as Error).message;
    }
    if (!this.timer) return; // stopped meanwhile: its outcome is no longer this run's
    const before = this.state.status;
    const inStartPeriod = Date.now() - this.startedAt < this.spec.start_period_ms;
    const streak = exitCode === 0 ? 0 : inStartPeriod && before === "starting" ? this.state.failing_streak : this.state.failing_streak + 1;
    const status = exitCode === 0 ? "healthy" : streak >= this.spec.retries ? "unhealthy" : before;
    const entry = { start: start.toISOString(), end: new Date().toISOString(), exit_code: exitCode, output: output.slice(0, MAX_OUTPUT) };
    this.state = { status, failing_streak: streak, log: [...this.state.log, entry].slice(-LOG_ENTRIES) };
    this.hooks.record(this.state, status !== before);
    this.schedule();
  }
}
