// What every benchmark reports its samples with: the machine, percentiles, and timed repetitions.
import { cpus, totalmem } from "node:os";

/** The machine a result was measured on, as every benchmark's JSON names it (with the accel, where VMs ran). */
export function machine(accel?: string | null) {
  return { cpus: cpus().length, cpu: cpus()[0]?.model, memGiB: Math.round(totalmem() / 2 ** 30), ...(accel !== undefined ? { accel } : {}) };
}

/** The p-th percentile of the samples (nearest rank), rounded to 0.01; NaN when there are none. */
export function pct(xs: number[], p: number): number {
  if (!xs.length) return Number.NaN;
  const s = [...xs].sort((a, b) => a - b);
  return Math.round(s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)] * 100) / 100;
}

/** Runs `fn` n times, one after another; the milliseconds each took. */
export async function timed(n: number, fn: () => Promise<unknown>): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    await fn();
    out.push(performance.now() - t0);
  }
  return out;
}

/** Count, p50, p95, p99 and max of the samples, rounded to whole milliseconds. */
export function tail(xs: number[]) {
  return { n: xs.length, p50: Math.round(pct(xs, 50)), p95: Math.round(pct(xs, 95)), p99: Math.round(pct(xs, 99)), max: Math.round(Math.max(0, ...xs)) };
}
