// Builds as jobs: the API starts one and returns at once; the step list, the log and the outcome
// are kept for an hour so a client can poll or follow the log, and a running build can be
// cancelled (its RUN is killed, its sandboxes and scratch images removed).
import { randomBytes } from "node:crypto";
import { rm } from "node:fs/promises";
import { toForgevmError } from "../error-map.js";
import { conflict, notFound } from "../../http/errors.js";
import type { BuildOptions, BuildReport, BuildResult, BuildStep } from "./builder.js";
import { ignore } from "../../util/ignore.js";
import { familiarName } from "../images/image-reference.js";

export interface BuildJob {
  id: string;
  tag: string;
  state: "running" | "done" | "error" | "cancelled";
  steps: BuildStep[];
  /** The latest log lines (at most MAX_LINES). */
  log: string[];
  /** How many log lines there have been in all. */
  log_total: number;
  image?: string;
  digest?: string;
  error?: string;
  error_code?: string;
  started_at: string;
  finished_at?: string;
}

const KEEP_MS = 60 * 60_000;
const MAX_LINES = 2000;

type Runner = (o: BuildOptions, report: BuildReport, signal: AbortSignal) => Promise<BuildResult>;

export class BuildJobs {
  private readonly jobs = new Map<string, { job: BuildJob; abort: AbortController; listeners: Set<(line: string | null) => void> }>();

  /** Starts a build; `cleanup` runs once it has ended (it removes an uploaded context). */
  start(o: BuildOptions, run: Runner, cleanup: () => Promise<void> = async () => {}): BuildJob {
    this.expire();
    const job: BuildJob = { id: `build-${randomBytes(4).toString("hex")}`, tag: o.tag, state: "running", steps: [], log: [], log_total: 0, started_at: new Date().toISOString() };
    const abort = new AbortController();
    const entry = { job, abort, listeners: new Set<(line: string | null) => void>() };
    this.jobs.set(job.id, entry);
    const report: BuildReport = {
      steps: (list) => {
        job.steps = list.map((s) => ({ ...s }));
      },
      step: (i, patch) => Object.assign(job.steps[i], patch),
      log: (line) => {
        job.log.push(line);
        job.log_total++;
        if (job.log.length > MAX_LINES) job.log.shift();
        for (const l of entry.listeners) l(line);
      },
    };
    run(o, report, abort.signal)
      .then(
        (r) => Object.assign(job, { state: "done", image: familiarName(r.image.name), digest: r.digest }),
        (e: Error) => {
          const err = toForgevmError(e);
          Object.assign(job, { state: abort.signal.aborted ? "cancelled" : "error", error: err.message, error_code: err.code });
          report.log(`error: ${err.message}`);
        },
      )
      .finally(async () => {
        job.finished_at = new Date().toISOString();
        await cleanup().catch(ignore("the build's own result is what the job reports"));
        for (const l of entry.listeners) l(null);
        entry.listeners.clear();
      });
    return job;
  }

  get(id: string): BuildJob {
    return this.entry(id).job;
  }

  /** Cancels a running build; it ends as `cancelled` once its sandboxes are gone. */
  cancel(id: string): BuildJob {
    const e = this.entry(id);
    if (e.job.state !== "running") throw conflict(`build ${id} is ${e.job.state}`);
    e.abort.abort();
    return e.job;
  }

  /** Calls `onLine` with each new log line and then null when the build ends; returns the unsubscribe. */
  follow(id: string, onLine: (line: string | null) => void): () => void {
    const e = this.entry(id);
    if (e.job.state !== "running") {
      onLine(null);
      return () => {};
    }
    e.listeners.add(onLine);
    return () => e.listeners.delete(onLine);
  }

  /** Cancels every running build and waits until they have ended (server shutdown). */
  async closeAll(): Promise<void> {
    for (const e of this.jobs.values()) if (e.job.state === "running") e.abort.abort();
    const end = Date.now() + 30_000;
    while ([...this.jobs.values()].some((e) => !e.job.finished_at) && Date.now() < end) await new Promise((r) => setTimeout(r, 100));
  }

  private entry(id: string) {
    const e = this.jobs.get(id);
    if (!e) throw notFound(`build ${id} not found`);
    return e;
  }

  private expire(): void {
    const cutoff = Date.now() - KEEP_MS;
    for (const [id, e] of this.jobs) if (e.job.finished_at && Date.parse(e.job.finished_at) < cutoff) this.jobs.delete(id);
  }
}

/** Removes a directory a build was given (an unpacked upload). */
export const removeDir = (dir: string) => () => rm(dir, { recursive: true, force: true });
