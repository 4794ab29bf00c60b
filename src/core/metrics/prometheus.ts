// The Prometheus view of a server: the sampler's newest figures of the host and each sandbox,
// sandboxes by state, warm pools, and the server's own counters (spawn latency, execs, errors,
// egress decisions), rendered in the text format by prom-client.
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from "prom-client";
import type { EventRow } from "../../store/events.js";
import { HOST_SERIES } from "../../store/metrics.js";
import type { MetricsSampler } from "./sampler.js";

/** What the exposition reads at scrape time besides the sampler. */
export interface ScrapeSources {
  sampler: MetricsSampler;
  /** Sandboxes in the store by state (history included). */
  states: () => Record<string, number>;
  /** Image of a live sandbox, for labels. */
  imageOf: (id: string) => string | undefined;
  pools: () => { pool: string; size: number; ready: number }[];
}

export class ServerMetrics {
  readonly registry = new Registry();
  private readonly spawnSeconds: Histogram<"origin">;
  private readonly resumeSeconds: Histogram<"by">;
  private readonly pauses: Counter<"reason">;
  private readonly spawnFailures: Counter;
  private readonly execs: Counter;
  private readonly apiErrors: Counter<"code">;
  private readonly sandboxErrors: Counter;
  private readonly egress: Counter<"decision">;

  constructor(src: ScrapeSources) {
    const registers = [this.registry];
    collectDefaultMetrics({ register: this.registry, prefix: "forgevm_server_" });
    const latest = () => src.sampler.latest;
    const hostGauge = (name: string, help: string, pick: (s: Record<string, number | null | undefined>) => number | null | undefined) =>
      new Gauge({
        name,
        help,
        registers,
        collect() {
          const v = pick((latest().get(HOST_SERIES)?.sample ?? {}) as Record<string, number | null | undefined>);
          if (typeof v === "number") this.set(v);
        },
      });
    hostGauge("forgevm_host_cpu_percent", "CPU in use on the host, percent of all CPUs.", (s) => s.guest_cpu_pct);
    hostGauge("forgevm_host_memory_used_bytes", "Host memory in use (total less available).", (s) => s.mem_used_bytes);
    hostGauge("forgevm_host_memory_total_bytes", "Host memory.", (s) => s.mem_total_bytes);
    hostGauge("forgevm_host_disk_used_bytes", "Used bytes of the filesystem of the data directory.", (s) => s.disk_used_bytes);
    hostGauge("forgevm_host_disk_total_bytes", "Size of the filesystem of the data directory.", (s) => s.disk_total_bytes);
    hostGauge("forgevm_host_load1", "Host load average over one minute.", (s) => s.load1);

    // Per sandbox: one series per running sandbox, gone with it.
    const perSandbox = <K extends "counter" | "gauge">(
      kind: K,
      name: string,
      help: string,
      pick: (l: ReturnType<MetricsSampler["latest"]["get"]> & object) => number | undefined | null,
    ) => {
      const labelNames = ["sandbox", "image"] as const;
      const each = (set: (labels: { sandbox: string; image: string }, v: number) => void) => {
        for (const [id, l] of latest()) {
          if (id === HOST_SERIES) continue;
          const v = pick(l);
          if (typeof v === "number" && Number.isFinite(v)) set({ sandbox: id, image: src.imageOf(id) ?? "" }, v);
        }
      };
      if (kind === "counter")
        return new Counter({
          name,
          help,
          labelNames,
          registers,
          collect() {
            this.reset();
            each((labels, v) => this.inc(labels, v));
          },
        });
      return new Gauge({
        name,
        help,
        labelNames,
        registers,
        collect() {
          this.reset();
          each((labels, v) => this.set(labels, v));
        },
      });
    };
    perSandbox("counter", "forgevm_sandbox_cpu_seconds_total", "CPU time of the sandbox's VMM on the host.", (l) => (l.usage ? l.usage.cpuMs / 1000 : null));
    perSandbox("gauge", "forgevm_sandbox_memory_rss_bytes", "Resident memory of the sandbox's VMM.", (l) => l.usage?.rssBytes);
    perSandbox("gauge", "forgevm_sandbox_memory_pss_bytes", "Proportional memory of the sandbox's VMM (shared snapshot pages in shares).", (l) => l.usage?.pssBytes);
    perSandbox("counter", "forgevm_sandbox_host_disk_read_bytes_total", "Bytes the sandbox's VMM read from host block devices.", (l) => l.usage?.diskReadBytes);
    perSandbox("counter", "forgevm_sandbox_host_disk_written_bytes_total", "Bytes the sandbox's VMM wrote to host block devices.", (l) => l.usage?.diskWriteBytes);
    perSandbox("gauge", "forgevm_sandbox_guest_cpu_percent", "CPU in use inside the guest, percent of its vCPUs.", (l) => l.sample.guest_cpu_pct);
    perSandbox("gauge", "forgevm_sandbox_guest_memory_used_bytes", "Memory in use inside the guest.", (l) => l.sample.mem_used_bytes);
    perSandbox("gauge", "forgevm_sandbox_guest_memory_total_bytes", "Memory the guest sees.", (l) => l.sample.mem_total_bytes);
    perSandbox("gauge", "forgevm_sandbox_guest_disk_used_bytes", "Used bytes of the guest's root filesystem.", (l) => l.sample.disk_used_bytes);
    perSandbox("gauge", "forgevm_sandbox_guest_processes", "Processes in the guest.", (l) => l.sample.processes);
    perSandbox("gauge", "forgevm_sandbox_guest_load1", "Guest load average over one minute.", (l) => l.sample.load1);
    perSandbox("counter", "forgevm_sandbox_network_receive_bytes_total", "Bytes the guest received (all interfaces but loopback).", (l) => l.guest?.net?.rx_bytes);
    perSandbox("counter", "forgevm_sandbox_network_transmit_bytes_total", "Bytes the guest sent (all interfaces but loopback).", (l) => l.guest?.net?.tx_bytes);

    new Gauge({
      name: "forgevm_sandboxes",
      help: "Sandboxes in the store by state (destroyed ones until their history is pruned).",
      labelNames: ["state"],
      registers,
      collect() {
        this.reset();
        for (const [state, n] of Object.entries(src.states())) this.set({ state }, n);
      },
    });
    // The first two names this endpoint had, kept for the scrapers and alerts that use them.
    const states = () => Object.entries(src.states());
    new Gauge({
      name: "forgevm_sandboxes_active",
      help: "Sandboxes creating or running.",
      registers,
      collect() {
        this.set(states().reduce((n, [s, c]) => n + (s === "creating" || s === "running" ? c : 0), 0));
      },
    });
    new Gauge({
      name: "forgevm_sandboxes_total",
      help: "Sandboxes in the store, history included.",
      registers,
      collect() {
        this.set(states().reduce((n, [, c]) => n + c, 0));
      },
    });
    for (const [name, help, pick] of [
      ["forgevm_pool_ready", "Warm VMs ready in a pool.", (p: { ready: number }) => p.ready],
      ["forgevm_pool_size", "Warm VMs a pool keeps.", (p: { size: number }) => p.size],
    ] as const) {
      new Gauge({
        name,
        help,
        labelNames: ["pool"],
        registers,
        collect() {
          this.reset();
          for (const p of src.pools()) this.set({ pool: p.pool }, pick(p));
        },
      });
    }

    this.spawnSeconds = new Histogram({
      name: "forgevm_spawn_duration_seconds",
      help: "From a spawn call to its sandbox running, by how it started (boot, snapshot, warm pool, ...).",
      labelNames: ["origin"],
      buckets: [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
      registers,
    });
    this.resumeSeconds = new Histogram({
      name: "forgevm_resume_duration_seconds",
      help: "From a resume (asked for, or a call that woke a paused sandbox) to the sandbox running, by what woke it.",
      labelNames: ["by"],
      buckets: [0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
      registers,
    });
    this.pauses = new Counter({ name: "forgevm_pauses_total", help: "Sandboxes paused, by why (request, idle, timeout).", labelNames: ["reason"], registers });
    this.spawnFailures = new Counter({ name: "forgevm_spawn_failures_total", help: "Spawns that failed.", registers });
    this.execs = new Counter({ name: "forgevm_execs_total", help: "Commands started in sandboxes.", registers });
    this.sandboxErrors = new Counter({ name: "forgevm_sandbox_errors_total", help: "Sandboxes that ended in error.", registers });
    this.apiErrors = new Counter({ name: "forgevm_api_errors_total", help: "API requests answered with an error, by its code.", labelNames: ["code"], registers });
    this.egress = new Counter({ name: "forgevm_egress_requests_total", help: "Egress proxy decisions, by decision.", labelNames: ["decision"], registers });
  }

  /** Counts what the event stream reports: execs started, sandboxes in error, and spawn latencies. */
  onEvent = (e: EventRow): void => {
    if (e.type === "exec.started") this.execs.inc();
    else if (e.type === "sandbox.error") this.sandboxErrors.inc();
    else if (e.type === "sandbox.paused") this.pauses.inc({ reason: String(e.data?.reason ?? "request") });
    else if (e.type === "sandbox.resumed" && typeof e.data?.resume_ms === "number") this.resumeSeconds.observe({ by: String(e.data.by ?? "request") }, e.data.resume_ms / 1000);
  };

  /** Records a finished spawn. */
  spawned(seconds: number, origin: string): void {
    this.spawnSeconds.observe({ origin }, seconds);
  }

  spawnFailed(): void {
    this.spawnFailures.inc();
  }

  /** Counts an error answered by an interface, by its code. */
  apiError(code: string): void {
    this.apiErrors.inc({ code });
  }

  /** Counts one egress decision. */
  egressDecision(decision: "allow" | "deny"): void {
    this.egress.inc({ decision });
  }

  /** The exposition in Prometheus' text format. */
  text(): Promise<string> {
    return this.registry.metrics();
  }

  get contentType(): string {
    return this.registry.contentType;
  }
}
