// Metric samples of sandboxes and of the host, in two resolutions: every sample for the last
// minutes ("raw"), and one-minute averages for a day. The sampler (core/metrics/sampler.ts)
// writes raw rows and rolls finished minutes up; a server restart keeps both.
import type { Db } from "./db.js";

/** The host's own series is stored under this id (no sandbox id is empty). */
export const HOST_SERIES = "";

/** One sample: every value optional, as host and guest are sampled at different rates. */
export interface MetricSample {
  /** Milliseconds since the epoch. */
  ts: number;
  /** Host side: CPU used by the VMM, in percent of one core. */
  cpu_pct?: number | null;
  rss_bytes?: number | null;
  pss_bytes?: number | null;
  /** Host side: block I/O the VMM caused, bytes per second. */
  disk_read_bps?: number | null;
  disk_write_bps?: number | null;
  /** Guest side (or, for the host series, the host's own figures). */
  guest_cpu_pct?: number | null;
  mem_used_bytes?: number | null;
  mem_total_bytes?: number | null;
  disk_used_bytes?: number | null;
  disk_total_bytes?: number | null;
  load1?: number | null;
  processes?: number | null;
  net_rx_bps?: number | null;
  net_tx_bps?: number | null;
}

export const SAMPLE_FIELDS = [
  "cpu_pct",
  "rss_bytes",
  "pss_bytes",
  "disk_read_bps",
  "disk_write_bps",
  "guest_cpu_pct",
  "mem_used_bytes",
  "mem_total_bytes",
  "disk_used_bytes",
  "disk_total_bytes",
  "load1",
  "processes",
  "net_rx_bps",
  "net_tx_bps",
] as const satisfies readonly (keyof MetricSample)[];

/** Resolutions: every sample, and one-minute averages. */
export const RAW = 0;
export const MINUTE = 60;

const cols = SAMPLE_FIELDS.join(", ");
const averages = SAMPLE_FIELDS.map((f) => `avg(${f})`).join(", ");

export class MetricStore {
  constructor(private readonly db: Db) {}

  /** Appends raw samples of several series at once. */
  insert(rows: { series: string; sample: MetricSample }[]): void {
    const stmt = this.db.prepare(`INSERT OR REPLACE INTO metric_samples (series, res, ts, ${cols}) VALUES (@series, ${RAW}, @ts, ${SAMPLE_FIELDS.map((f) => `@${f}`).join(", ")})`);
    this.db.transaction(() => {
      for (const { series, sample } of rows) stmt.run({ series, ...Object.fromEntries(SAMPLE_FIELDS.map((f) => [f, sample[f] ?? null])), ts: sample.ts });
    })();
  }

  /**
   * Averages every whole minute before `beforeMs` that has raw samples and no average yet, then
   * drops raw rows older than `rawKeepMs` and averages older than `minuteKeepMs`.
   */
  rollup(beforeMs: number, rawKeepMs: number, minuteKeepMs: number): void {
    const upTo = Math.floor(beforeMs / 60_000) * 60_000;
    this.db.transaction(() => {
      this.db
        .prepare(
          `INSERT OR IGNORE INTO metric_samples (series, res, ts, ${cols})
           SELECT series, ${MINUTE}, (ts / 60000) * 60000 AS minute, ${averages}
           FROM metric_samples WHERE res = ${RAW} AND ts < ? GROUP BY series, minute`,
        )
        .run(upTo);
      // Raw rows go a whole minute at a time, so that the minutes before the first raw row are exactly those averaged.
      this.db.prepare(`DELETE FROM metric_samples WHERE res = ${RAW} AND ts < ?`).run(Math.min(upTo, Math.floor((beforeMs - rawKeepMs) / 60_000) * 60_000));
      this.db.prepare(`DELETE FROM metric_samples WHERE res = ${MINUTE} AND ts < ?`).run(beforeMs - minuteKeepMs);
    })();
  }

  /**
   * A series from `sinceMs`, in buckets of `stepMs` (averages; empty buckets left out): raw rows
   * where they still exist, minute averages before them.
   */
  query(series: string, sinceMs: number, stepMs: number): MetricSample[] {
    const firstRaw = (this.db.prepare(`SELECT min(ts) AS t FROM metric_samples WHERE series = ? AND res = ${RAW}`).get(series) as { t: number | null }).t;
    const rows = this.db
      .prepare(
        `SELECT ts - (ts % @step) AS ts, ${averages.replace(/avg\((\w+)\)/g, "avg($1) AS $1")}
         FROM metric_samples
         WHERE series = @series AND ts >= @since AND ((res = ${RAW}) OR (res = ${MINUTE} AND ts + 60000 <= @firstRaw))
         GROUP BY 1 ORDER BY 1`,
      )
      .all({ series, since: sinceMs, step: Math.max(1, Math.round(stepMs)), firstRaw: firstRaw ?? Number.MAX_SAFE_INTEGER }) as MetricSample[];
    return rows;
  }

  /** Forgets a series (its sandbox is gone). */
  drop(series: string): void {
    this.db.prepare("DELETE FROM metric_samples WHERE series = ?").run(series);
  }

  /** The series that have rows, for sweeping those whose sandbox is gone. */
  seriesIds(): string[] {
    return (this.db.prepare("SELECT DISTINCT series FROM metric_samples").all() as { series: string }[]).map((r) => r.series);
  }
}
