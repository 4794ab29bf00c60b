// Samples what every running sandbox costs the host (from its VMM process, every few seconds)
// and what its guest reports through the agent (less often), plus the host itself, into the
// metric store; rolls finished minutes up into averages. The console, `forgevm stats` and the
// Prometheus endpoint all read these numbers.
import { readFile, statfs } from "node:fs/promises";
import { freemem, loadavg, totalmem } from "node:os";
import type { Metrics } from "../../agent-client/index.js";
import type { VmUsage } from "../../providers/provider.js";
import { HOST_SERIES, type MetricSample, type MetricStore } from "../../store/metrics.js";
import type { Sandbox } from "../guest/sandbox.js";

export interface MetricsOptions {
  /** Sample at all (default true). */
  enabled?: boolean;
  /** Host-side samples every this many ms (default 5000). */
  intervalMs?: number;
  /** Guest-side samples every this many host samples (default 3). */
  guestEvery?: number;
  /** Keep every sample this long before only minute averages remain (default 15 minutes). */
  rawKeepMs?: number;
  /** Keep minute averages this long (default 24 hours). */
  historyMs?: number;
}

/** The newest figures of one series, for gauges and live tables. */
export interface LatestSample {
  sample: MetricSample;
  usage?: VmUsage;
  guest?: Metrics;
}

interface Counters {
  ts: number;
  cpuMs?: number;
  diskRead?: number;
  diskWrite?: number;
  guestBusy?: number;
  guestTotal?: number;
  /** When the guest was last asked: its byte counters are that old. */
  guestTs?: number;
  rx?: number;
  tx?: number;
  hostBusy?: number;
  hostTotal?: number;
}

/** A guest that does not answer its metrics call within this long is left out of the sample. */
const GUEST_TIMEOUT_MS = 3000;

export class MetricsSampler {
  private timer: NodeJS.Timeout | null = null;
  private ticks = 0;
  private lastRollup = 0;
  private running: Promise<void> | null = null;
  private readonly prev = new Map<string, Counters>();
  /** The newest sample of each series (HOST_SERIES for the host). */
  readonly latest = new Map<string, LatestSample>();
  readonly intervalMs: number;
  private readonly guestEvery: number;
  private readonly rawKeepMs: number;
  private readonly historyMs: number;

  constructor(
    private readonly store: MetricStore,
    private readonly sandboxes: () => Iterable<Sandbox>,
    private readonly dataDir: string,
    opts: MetricsOptions = {},
  ) {
    this.intervalMs = opts.intervalMs ?? 5000;
    this.guestEvery = Math.max(1, opts.guestEvery ?? 3);
    this.rawKeepMs = opts.rawKeepMs ?? 15 * 60_000;
    this.historyMs = opts.historyMs ?? 24 * 3600_000;
  }

  /** Samples on a timer from now on (the timer does not keep the process alive). */
  start(): void {
    if (this.timer) return;
    this.timer = setInterval(() => void this.tick(), this.intervalMs);
    this.timer.unref();
    void this.tick();
  }

  /** Stops sampling and waits for a sample in progress. */
  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    await this.running;
  }

  /**
   * Takes one sample of the host and every sandbox now (a tick skips while the last one runs).
   * A sample that cannot be stored (a full disk: SQLITE_FULL) is dropped, not thrown: the live
   * numbers stay in memory and the next tick tries again.
   */
  tick(): Promise<void> {
    this.running ??= this.sampleAll()
      .catch((e) => {
        this.lastError = (e as Error).message;
      })
      .finally(() => (this.running = null));
    return this.running;
  }

  /** Why the last sample could not be stored, if it could not. */
  lastError: string | null = null;

  /** Forgets a sandbox's series: its sandbox is gone (rows a full disk keeps go at the next rollup). */
  forget(id: string): void {
    this.prev.delete(id);
    this.latest.delete(id);
    try {
      this.store.drop(id);
    } catch {
      // the database cannot be written now: the rollup drops the series of sandboxes gone
    }
  }

  private async sampleAll(): Promise<void> {
    const withGuest = this.ticks++ % this.guestEvery === 0;
    const now = Date.now();
    // A VM shared by pool-mode tenants is nobody's own: its cost is not any one sandbox's.
    const byVm = new Map<unknown, Sandbox[]>();
    for (const sb of this.sandboxes()) byVm.set(sb.vm, [...(byVm.get(sb.vm) ?? []), sb]);
    const own = [...byVm.values()].filter((l) => l.length === 1 && !l[0].tenant).map((l) => l[0]);
    const rows = await Promise.all(own.map((sb) => this.sampleSandbox(sb, now, withGuest).catch(() => null)));
    const out: { series: string; sample: MetricSample }[] = [];
    for (const r of rows) if (r) out.push(r);
    out.push({ series: HOST_SERIES, sample: await this.sampleHost(now) });
    // A sandbox destroyed while it was being sampled has had its series dropped: none again.
    const still = new Set([...this.sandboxes()].map((sb) => sb.id));
    out.splice(0, out.length, ...out.filter((r) => r.series === HOST_SERIES || still.has(r.series)));
    const alive = new Set(out.map((r) => r.series));
    for (const id of this.latest.keys()) if (!alive.has(id)) this.latest.delete(id);
    this.store.insert(out);
    this.lastError = null;
    if (now - this.lastRollup >= 60_000) {
      this.lastRollup = now;
      this.store.rollup(now, this.rawKeepMs, this.historyMs);
    }
  }

  private async sampleSandbox(sb: Sandbox, now: number, withGuest: boolean): Promise<{ series: string; sample: MetricSample } | null> {
    const [usage, guest] = await Promise.all([sb.vm.usage(), withGuest ? guestMetrics(sb) : Promise.resolve(null)]);
    if (!usage) return null;
    const p = this.prev.get(sb.id);
    const next: Counters = { ...p, ts: now, cpuMs: usage.cpuMs, diskRead: usage.diskReadBytes, diskWrite: usage.diskWriteBytes };
    const sample: MetricSample = {
      ts: now,
      cpu_pct: p?.cpuMs !== undefined ? pct(usage.cpuMs - p.cpuMs, now - p.ts) : null,
      rss_bytes: usage.rssBytes,
      pss_bytes: usage.pssBytes,
      disk_read_bps: p?.diskRead !== undefined ? rate(usage.diskReadBytes - p.diskRead, now - p.ts) : null,
      disk_write_bps: p?.diskWrite !== undefined ? rate(usage.diskWriteBytes - p.diskWrite, now - p.ts) : null,
    };
    if (guest) Object.assign(sample, this.guestFields(guest, p, next, now));
    this.prev.set(sb.id, next);
    this.latest.set(sb.id, { sample: { ...this.latest.get(sb.id)?.sample, ...stripNulls(sample) }, usage, guest: guest ?? this.latest.get(sb.id)?.guest });
    return { series: sb.id, sample };
  }

  private guestFields(g: Metrics, p: Counters | undefined, next: Counters, now: number): MetricSample {
    const c = g.cpu;
    const busy = c.user + c.nice + c.system + c.irq + c.softirq + c.steal;
    const total = busy + c.idle + c.iowait;
    next.guestBusy = busy;
    next.guestTotal = total;
    const s: MetricSample = {
      ts: now,
      // Percent of the whole guest (all its vCPUs), as top shows it for a machine.
      guest_cpu_pct: p?.guestTotal !== undefined && total > p.guestTotal ? round2(((busy - p.guestBusy!) / (total - p.guestTotal)) * 100) : null,
      mem_used_bytes: g.memory.total - g.memory.available,
      mem_total_bytes: g.memory.total,
      disk_used_bytes: g.disk.used,
      disk_total_bytes: g.disk.total,
      load1: g.cpu.load[0],
      processes: g.processes,
    };
    if (g.net) {
      if (p?.rx !== undefined && p.guestTs !== undefined) {
        s.net_rx_bps = rate(g.net.rx_bytes - p.rx, now - p.guestTs);
        s.net_tx_bps = rate(g.net.tx_bytes - p.tx!, now - p.guestTs);
      }
      next.rx = g.net.rx_bytes;
      next.tx = g.net.tx_bytes;
    }
    next.guestTs = now;
    return s;
  }

  private async sampleHost(now: number): Promise<MetricSample> {
    const p = this.prev.get(HOST_SERIES);
    const cpu = await hostCpu();
    const disk = await statfs(this.dataDir).catch(() => null);
    const total = totalmem();
    const sample: MetricSample = {
      ts: now,
      guest_cpu_pct: cpu && p?.hostTotal !== undefined && cpu.total > p.hostTotal ? round2(((cpu.busy - p.hostBusy!) / (cpu.total - p.hostTotal)) * 100) : null,
      mem_used_bytes: total - (await memAvailable().catch(() => freemem())),
      mem_total_bytes: total,
      disk_used_bytes: disk ? (disk.blocks - disk.bfree) * disk.bsize : null,
      disk_total_bytes: disk ? disk.blocks * disk.bsize : null,
      load1: round2(loadavg()[0]),
    };
    this.prev.set(HOST_SERIES, { ts: now, hostBusy: cpu?.busy, hostTotal: cpu?.total });
    this.latest.set(HOST_SERIES, { sample: { ...this.latest.get(HOST_SERIES)?.sample, ...stripNulls(sample) } });
    return sample;
  }
}

async function guestMetrics(sb: Sandbox): Promise<Metrics | null> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<null>((r) => (timer = setTimeout(() => r(null), GUEST_TIMEOUT_MS)));
  try {
    return await Promise.race([sb.metrics().catch(() => null), timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** The host's busy and total CPU ticks since boot (all CPUs). */
async function hostCpu(): Promise<{ busy: number; total: number } | null> {
  const text = await readFile("/proc/stat", "utf8").catch(() => "");
  const v = /^cpu\s+(.*)$/m.exec(text)?.[1].trim().split(/\s+/).map(Number);
  if (!v || v.length < 8) return null;
  const [user, nice, system, idle, iowait, irq, softirq, steal] = v;
  const busy = user + nice + system + irq + softirq + steal;
  return { busy, total: busy + idle + iowait };
}

/** MemAvailable: what the host can still give without swapping (free alone ignores the page cache). */
async function memAvailable(): Promise<number> {
  const text = await readFile("/proc/meminfo", "utf8");
  const kb = /^MemAvailable:\s+(\d+)/m.exec(text)?.[1];
  if (!kb) throw new Error("no MemAvailable");
  return Number(kb) * 1024;
}

const round2 = (x: number) => Math.round(x * 100) / 100;
const pct = (cpuMs: number, wallMs: number) => (wallMs > 0 ? round2(Math.max(0, (cpuMs / wallMs) * 100)) : null);
const rate = (bytes: number, wallMs: number) => (wallMs > 0 ? Math.round(Math.max(0, (bytes * 1000) / wallMs)) : null);

function stripNulls(s: MetricSample): MetricSample {
  return Object.fromEntries(Object.entries(s).filter(([, v]) => v !== null && v !== undefined)) as unknown as MetricSample;
}
