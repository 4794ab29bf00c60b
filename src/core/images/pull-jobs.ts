// Image pulls as jobs: the API starts one and returns at once; progress lines and the outcome
// are kept for a while so a client can poll, and also go out as events.
import { randomBytes } from "node:crypto";
import type { LocalImage } from "../../images/store.js";
import { toForgevmError } from "../error-map.js";
import { notFound } from "../../http/errors.js";

export interface PullJob {
  id: string;
  image: string;
  state: "running" | "done" | "error";
  /** The latest progress lines (at most MAX_LINES). */
  progress: string[];
  /** How many progress lines there have been in all. */
  progress_total: number;
  error?: string;
  error_code?: string;
  digest?: string;
  started_at: string;
  finished_at?: string;
}

const KEEP_MS = 60 * 60_000;
const MAX_LINES = 200;

export class PullJobs {
  private readonly jobs = new Map<string, PullJob>();

  constructor(private readonly pull: (ref: string, log: (m: string) => void) => Promise<LocalImage>) {}

  /** Starts pulling `ref`; returns the job at once. */
  start(ref: string): PullJob {
    this.expire();
    const job: PullJob = { id: `pull-${randomBytes(4).toString("hex")}`, image: ref, state: "running", progress: [], progress_total: 0, started_at: new Date().toISOString() };
    this.jobs.set(job.id, job);
    this.pull(ref, (m) => {
      job.progress.push(m);
      job.progress_total++;
      if (job.progress.length > MAX_LINES) job.progress.shift();
    }).then(
      (img) => Object.assign(job, { state: "done", image: img.name, digest: img.digest, finished_at: new Date().toISOString() }),
      (e: Error) => {
        const err = toForgevmError(e);
        Object.assign(job, { state: "error", error: err.message, error_code: err.code, finished_at: new Date().toISOString() });
      },
    );
    return job;
  }

  get(id: string): PullJob {
    const j = this.jobs.get(id);
    if (!j) throw notFound(`pull job ${id} not found`);
    return j;
  }

  private expire(): void {
    const cutoff = Date.now() - KEEP_MS;
    for (const [id, j] of this.jobs) if (j.finished_at && Date.parse(j.finished_at) < cutoff) this.jobs.delete(id);
  }
}
