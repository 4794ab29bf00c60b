// A sandbox's main process: the image's ENTRYPOINT + CMD (or a command given at spawn), run as
// a tracked process with the image's env, working directory and user. Its output goes to a log
// of its own (a JSON line per line of output, timestamped) that `mainLogs` reads and `follow`
// streams; its exit is recorded on the sandbox; its restart policy decides what happens next,
// with exponential back-off that resets once a run has stayed up for a while. A person's stop
// wins over any policy.
import { EventEmitter } from "node:events";
import { appendFile, mkdir, readFile, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { MainRecord, SandboxStore } from "../../store/sandboxes.js";
import type { Paths } from "../../config/paths.js";
import type { EventBus } from "../events.js";
import { exitCodeOf, type ProcessEnd, type ProcessListener, type TrackedProcess } from "../guest/processes.js";
import type { Sandbox } from "../guest/sandbox.js";
import { ignore } from "../../util/ignore.js";
import { HealthMonitor } from "./health.js";

/** First back-off before a restart; it doubles per quick failure up to MAX_BACKOFF_MS. */
const FIRST_BACKOFF_MS = 100;
const MAX_BACKOFF_MS = 30_000;
/** A run that lasted this long resets the back-off. */
const STABLE_MS = 10_000;
/** The tag of a sandbox's main process in its process table (how a later server finds it to adopt). */
export const MAIN_TAG = "main";
/** The most a main process log keeps on disk; past it, the oldest half goes. */
export const MAX_MAIN_LOG_BYTES = 4 * 1024 * 1024;

/** One line a main process wrote. */
export interface LogLine {
  ts: string;
  stream: "stdout" | "stderr";
  line: string;
}

/** What a main process needs of the core context (which has these, and more). */
export interface MainHost {
  readonly paths: Paths;
  readonly sandboxes: SandboxStore;
  readonly events: EventBus;
  /** The sandboxes running here, where a main process's runner is recorded, and whether the core is closing (table.ts). */
  readonly table: { readonly live: ReadonlyMap<string, Sandbox>; readonly closed: boolean; setMain(id: string, runner: MainRunner): void };
}

/** Where a sandbox's main process log lives (kept with its history, like the console log). */
export function mainLogPath(core: { paths: Paths }, id: string): string {
  return join(core.paths.dataDir, "logs", `${id}.main.log`);
}

/**
 * Starts the main process of a sandbox just admitted (resolving once it runs), when it has one a
 * person has not stopped; or takes over the one still running there, among `adopted` (the
 * processes a server that went away left running, guest/adopt.ts).
 */
export async function startMain(core: MainHost, sb: Sandbox, adopted: TrackedProcess[] = []): Promise<void> {
  const main = core.sandboxes.get(sb.id)?.main;
  if (!main) return;
  // The one running, else one that ended while no server watched (its end is recorded, and its policy applied).
  const found = adopted.find((p) => p.spec.tag === MAIN_TAG && p.running) ?? adopted.find((p) => p.spec.tag === MAIN_TAG);
  if (main.stopped_by_user && !found?.running) return;
  const runner = new MainRunner(core, sb);
  core.table.setMain(sb.id, runner);
  if (found) runner.adopt(found);
  else await runner.start();
}

export class MainRunner {
  private proc: TrackedProcess | null = null;
  private timer: NodeJS.Timeout | null = null;
  private quickFailures = 0;
  private health: HealthMonitor | null = null;
  private disposed = false;
  private released = false;
  /** Emits "line" (LogLine, and its number in the log when it is the log's), "exit" (exit code) and "done". */
  readonly lines = new EventEmitter();
  private writes: Promise<void> = Promise.resolve();
  /** How many lines the log has been given: the number of the next. */
  private count = 0;

  constructor(
    private readonly core: MainHost,
    private readonly sb: Sandbox,
  ) {
    this.lines.setMaxListeners(0);
  }

  get running(): boolean {
    return this.proc?.running ?? false;
  }

  private record(): MainRecord | null {
    return this.core.sandboxes.get(this.sb.id)?.main ?? null;
  }

  private save(change: Partial<MainRecord>): void {
    const m = this.record();
    if (m) this.core.sandboxes.setMain(this.sb.id, { ...m, ...change });
  }

  private log(stream: LogLine["stream"], text: string): void {
    const ts = new Date().toISOString();
    const lines = text.split("\n");
    const out = lines.map((line) => ({ ts, stream, line }));
    for (const l of out) this.lines.emit("line", l, this.count++);
    const file = mainLogPath(this.core, this.sb.id);
    this.writes = this.writes.then(async () => {
      await appendFile(file, out.map((l) => `${JSON.stringify(l)}\n`).join("")).catch(ignore("a full disk: the log loses these lines, the process goes on"));
      await capLog(file, MAX_MAIN_LOG_BYTES).catch(ignore("a full disk: the log stays longer than its cap until the next write"));
    });
  }

  /** Starts the main process now (a person's start clears their stop). */
  async start(): Promise<void> {
    const m = this.record();
    if (!m || this.disposed || this.running) return;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    await mkdir(join(this.core.paths.dataDir, "logs"), { recursive: true });
    const startedAt = Date.now();
    this.save({ started_at: new Date(startedAt).toISOString(), finished_at: null, exit_code: null, stopped_by_user: false });
    const [cmd, ...args] = m.command;
    try {
      this.proc = await this.sb.startProcess({ cmd, args, env: {}, user: m.user, tag: MAIN_TAG, stdin: false }, this.listener(startedAt));
      this.watchHealth();
    } catch (e) {
      this.log("stderr", `forgevm: the main process could not start: ${(e as Error).message}`);
      this.ended({ exitCode: 127, timedOut: false, error: (e as Error).message }, startedAt);
    }
  }

  /**
   * Takes over the main process a server that went away left running (adopt.ts): its log goes on
   * (what it wrote meanwhile first), and its exit and restart policy are this runner's again.
   */
  adopt(proc: TrackedProcess): void {
    if (this.disposed || this.proc) return;
    const started = Date.parse(this.record()?.started_at ?? "");
    this.proc = proc;
    proc.subscribe(this.listener(Number.isFinite(started) ? started : Date.now()));
    this.watchHealth();
  }

  /** Starts the image's health checks for this run of the main process (each run starts as "starting", as Docker's). */
  private watchHealth(): void {
    this.health?.stop();
    this.health = null;
    const m = this.record();
    if (!m?.healthcheck || !this.proc?.running) return;
    const running = () => this.core.table.live.get(this.sb.id) === this.sb && this.core.sandboxes.get(this.sb.id)?.state === "running";
    this.health = new HealthMonitor(this.sb, m.healthcheck, m.user, {
      running,
      record: (health, changed) => {
        this.save({ health });
        if (changed) this.core.events.emit("sandbox.health", this.sb.id, { status: health.status, failing_streak: health.failing_streak });
      },
    });
    this.health.start();
  }

  /** Hears the main process: each line to the log, its end to the restart policy. */
  private listener(startedAt: number): ProcessListener {
    const partial = { stdout: "", stderr: "" };
    return {
      output: (o) => {
        const stream = o.stream === "stderr" ? "stderr" : "stdout";
        const text = partial[stream] + o.data.toString("utf8");
        const cut = text.lastIndexOf("\n");
        partial[stream] = text.slice(cut + 1);
        if (cut >= 0) this.log(stream, text.slice(0, cut));
        return true;
      },
      drained: async () => {},
      background: true,
      end: (e) => {
        for (const s of ["stdout", "stderr"] as const) if (partial[s]) this.log(s, partial[s]);
        this.ended(e, startedAt);
      },
    };
  }

  private ended(e: ProcessEnd, startedAt: number): void {
    this.proc = null;
    this.health?.stop();
    this.health = null;
    // Let go of with its server (release): the process runs on in the guest, and the next server adopts it.
    if (this.released) return;
    const code = exitCodeOf(e);
    this.save({ exit_code: code, finished_at: new Date().toISOString() });
    this.lines.emit("exit", code);
    this.core.events.emit("sandbox.main_exited", this.sb.id, { exit_code: code });
    const m = this.record();
    const again =
      !!m &&
      !this.disposed &&
      !m.stopped_by_user &&
      this.core.table.live.get(this.sb.id) === this.sb &&
      !this.core.table.closed &&
      (m.restart === "always" || m.restart === "unless-stopped" || (m.restart === "on-failure" && code !== 0 && (m.max_restarts === undefined || m.restarts < m.max_restarts)));
    if (!again || !m) {
      this.lines.emit("done", code); // for good: followers stop here
      return;
    }
    this.quickFailures = Date.now() - startedAt >= STABLE_MS ? 0 : this.quickFailures + 1;
    const delay = Math.min(MAX_BACKOFF_MS, FIRST_BACKOFF_MS * 2 ** Math.max(0, this.quickFailures - 1));
    this.timer = setTimeout(() => {
      this.timer = null;
      const now = this.record();
      if (!now || now.stopped_by_user || this.disposed) return;
      this.save({ restarts: now.restarts + 1 });
      this.core.events.emit("sandbox.main_restarted", this.sb.id, { restarts: now.restarts + 1 });
      void this.start();
    }, delay);
    this.timer.unref();
  }

  /** A stop: SIGTERM (or the image's STOPSIGNAL), then after `graceMs` SIGKILL to its whole group; no policy restarts it (a person's stop is remembered). */
  async stop(graceMs: number, byUser = true): Promise<void> {
    this.disposed ||= !byUser; // the server is going: nothing restarts now, and the record stays as it was
    if (byUser) this.save({ stopped_by_user: true });
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    const p = this.proc;
    if (!p?.running) return;
    const exited = new Promise<void>((r) => this.lines.once("exit", () => r()));
    await p.signal(this.record()?.stop_signal ?? 15).catch(ignore("the process may have exited"));
    const killed = await Promise.race([exited.then(() => false), new Promise<boolean>((r) => setTimeout(() => r(true), graceMs).unref())]);
    if (killed && p.running) {
      await p.signal(9).catch(ignore("the process may have exited"));
      await Promise.race([exited, new Promise((r) => setTimeout(r, 5000).unref())]);
    }
  }

  /** Whether the main process has ended and no restart is pending. */
  get finished(): boolean {
    return !this.proc && !this.timer;
  }

  /** Sends a signal to the main process. */
  async signal(sig: number): Promise<void> {
    if (!this.proc?.running) throw new Error("the main process is not running");
    await this.proc.signal(sig);
  }

  /**
   * The server is letting go of the sandbox and leaves it running: the process runs on in the
   * guest, its record stays as it is (the next server adopts it), and followers of its log end.
   */
  release(why: string): void {
    this.released = true;
    // Followers of its log hear why their stream ends (a line for them, not for the log).
    this.lines.emit("line", { ts: new Date().toISOString(), stream: "stderr", line: `forgevm: ${why}` } satisfies LogLine);
    this.lines.emit("done", null);
    this.dispose();
  }

  /** The sandbox is going away: no more restarts. */
  dispose(): void {
    this.disposed = true;
    this.health?.stop();
    if (this.timer) clearTimeout(this.timer);
    this.lines.removeAllListeners();
  }

  /**
   * Runs `read` between two of the log's writes, once every line so far is in the file: what it
   * reads holds exactly the lines numbered below `next` (less what the cap dropped), so a follower
   * that heard lines while it read knows which of them the file already had.
   */
  between<T>(read: () => Promise<T>): Promise<{ value: T; next: number }> {
    const next = this.count;
    const done = this.writes.then(read);
    this.writes = done.then(
      () => {},
      () => {},
    );
    return done.then((value) => ({ value, next }));
  }
}

/** Keeps a log file within `max` bytes: past it, the file keeps its newest half, from a line's start. */
export async function capLog(file: string, max: number): Promise<void> {
  if ((await stat(file)).size <= max) return;
  const text = await readFile(file);
  let cut = text.length - Math.floor(max / 2);
  cut = text.indexOf(10, cut) + 1;
  await writeFile(file, text.subarray(cut > 0 ? cut : text.length));
}

/** A sandbox's main process log: the last `tail` lines, or those since `sinceMs`. */
export async function readMainLog(core: { paths: Paths }, id: string, opts: { tail?: number; sinceMs?: number } = {}): Promise<LogLine[]> {
  const text = await readFile(mainLogPath(core, id), "utf8").catch(() => "");
  let lines = text
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l) as LogLine);
  if (opts.sinceMs !== undefined) lines = lines.filter((l) => Date.parse(l.ts) >= (opts.sinceMs as number));
  return opts.tail !== undefined ? lines.slice(-opts.tail) : lines;
}

/**
 * Follows a main process log: `onLine` gets the past first (the last `tail` lines, or those since
 * `sinceMs`), then each line `runner` writes, every line once; `onEnd` after the past once the
 * runner says it is done or `end` is called. Lines that come while the past is read are held and
 * sent after it, only those the file did not have yet (`MainRunner.between`): a command that writes
 * and ends at once (`forgevm run IMAGE -- echo hi`) lost its output when they went to nobody.
 */
export function followMainLog(
  core: { paths: Paths },
  id: string,
  runner: MainRunner | undefined,
  opts: { tail?: number; sinceMs?: number },
  onLine: (l: LogLine) => void,
  onEnd: () => void,
): { end: () => void; off: () => void } {
  let gone = false;
  // Until the past is out: the lines that come, with their number in the log, and whether it ended.
  let held: { line: LogLine; n: number }[] | null = [];
  let endHeld = false;
  let ended = false;
  const endOnce = () => {
    if (!ended && !gone) onEnd();
    ended = true;
  };
  const line = (l: LogLine, n = Number.POSITIVE_INFINITY) => {
    if (held) held.push({ line: l, n });
    else if (!gone) onLine(l);
  };
  const end = () => {
    if (held) endHeld = true;
    else endOnce();
  };
  runner?.lines.on("line", line);
  runner?.lines.once("done", end);
  const release = (past: LogLine[], next: number) => {
    const early = held ?? [];
    held = null;
    if (gone) return;
    for (const l of past) onLine(l);
    for (const h of early) if (h.n >= next) onLine(h.line);
    if (endHeld) endOnce();
  };
  const read = () => readMainLog(core, id, opts);
  const past = runner ? runner.between(read) : read().then((value) => ({ value, next: 0 }));
  // An unreadable log: the follower gets what came meanwhile and what comes.
  past.then(
    ({ value, next }) => release(value, next),
    () => release([], 0),
  );
  return {
    end,
    off: () => {
      gone = true;
      runner?.lines.off("line", line);
      runner?.lines.off("done", end);
    },
  };
}
