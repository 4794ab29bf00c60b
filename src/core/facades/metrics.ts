// Metrics: the sampled history of the host and of each sandbox, the newest samples, and the
// server's Prometheus exposition.
import { HOST_SERIES, type MetricSample } from "../../store/metrics.js";
import type { MetricStore } from "../../store/metrics.js";
import type { SandboxStore } from "../../store/sandboxes.js";
import type { MetricsSampler } from "../metrics/sampler.js";
import type { ServerMetrics } from "../metrics/prometheus.js";
import type { SandboxLookup } from "./lookup.js";

/** What the metrics operations read: the stored samples, the sampler, the server's counters, the sandbox rows. */
export interface MetricsDeps {
  readonly metricStore: MetricStore;
  readonly sampler: MetricsSampler;
  readonly prom: ServerMetrics;
  readonly sandboxes: SandboxStore;
}

export class MetricsFacade {
  constructor(
    private readonly core: MetricsDeps,
    private readonly sandboxes: SandboxLookup,
  ) {}

  /**
   * A sandbox's samples from `sinceMs` in buckets of `stepMs` (averages): host side (its VMM) and
   * guest side; full resolution for the last minutes, minute averages for a day. Stopped
   * sandboxes keep theirs; a destroyed one has none.
   */
  history(idOrName: string, sinceMs: number, stepMs: number): { sandbox: string; samples: MetricSample[] } {
    const row = this.sandboxes.get(idOrName);
    return { sandbox: row.id, samples: this.core.metricStore.query(row.id, sinceMs, stepMs) };
  }

  /** The host's samples (CPU, memory, the data directory's disk, load), as history. */
  hostHistory(sinceMs: number, stepMs: number): MetricSample[] {
    return this.core.metricStore.query(HOST_SERIES, sinceMs, stepMs);
  }

  /** The newest sample of the host and of each running sandbox, and how often they are taken. */
  latest(): { interval_ms: number; host: MetricSample | null; sandboxes: { id: string; name: string | null; image: string; sample: MetricSample }[] } {
    const latest = this.core.sampler.latest;
    const sandboxes = this.sandboxes
      .list()
      .filter((r) => latest.has(r.id))
      .map((r) => ({ id: r.id, name: r.name, image: r.image, sample: latest.get(r.id)!.sample }));
    return { interval_ms: this.intervalMs, host: latest.get(HOST_SERIES)?.sample ?? null, sandboxes };
  }

  /** How often the sampler samples, in ms. */
  get intervalMs(): number {
    return this.core.sampler.intervalMs;
  }

  /** Takes a sample of the host and every running sandbox now. */
  sample(): Promise<void> {
    return this.core.sampler.tick();
  }

  /** The Prometheus exposition of this server (text format), and its content type. */
  async prometheus(): Promise<{ text: string; contentType: string }> {
    return { text: await this.core.prom.text(), contentType: this.core.prom.contentType };
  }

  /** Counts an error an interface answered with, by its code (forgevm_api_errors_total). */
  countError(code: string): void {
    this.core.prom.apiError(code);
  }

  /** Drops the series of sandboxes destroyed while no server sampled; stopped ones keep theirs. */
  dropStaleSeries(): void {
    for (const id of this.core.metricStore.seriesIds()) {
      if (id === HOST_SERIES) continue;
      const row = this.core.sandboxes.get(id);
      if (!row || row.state === "destroyed" || row.state === "error") this.core.metricStore.drop(id);
    }
  }
}
