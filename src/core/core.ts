// The services one Forge is made of, as the composition root (open.ts, operations.ts) wires them:
// the only files that see all of it. Every operation and facade is given the few of these it uses,
// named in its own deps type.
import type { Paths } from "../config/paths.js";
import type { EgressProxy } from "../net/egress-proxy.js";
import type { Provider } from "../providers/provider.js";
import type { Providers } from "./providers.js";
import type { AuditStore } from "../store/audit.js";
import type { EventStore } from "../store/events.js";
import type { SandboxStore } from "../store/sandboxes.js";
import type { SnapshotStore } from "../store/snapshots.js";
import type { TemplateStore } from "../store/templates.js";
import type { EventBus } from "./events.js";
import type { Images } from "./images/images.js";
import type { Networks } from "./network.js";
import type { SandboxTable } from "./sandboxes/table.js";
import type { Planner } from "./sandboxes/plan.js";
import type { ForgeOptions, SpawnDefaults } from "./options.js";
import type { Snapshots } from "./snapshots/snapshots.js";
import type { Secrets } from "./secrets/secrets.js";
import type { TenantPool } from "./pools/tenant-pool.js";
import type { Volumes } from "./volumes.js";
import type { HostDirs } from "./host-dirs/host-dirs.js";
import type { Forwards } from "./guest/forwards.js";
import type { Prestarts } from "./pools/prestart.js";
import type { WarmPools } from "./pools/warm-pool.js";
import type { MetricStore } from "../store/metrics.js";
import type { MetricsSampler } from "./metrics/sampler.js";
import type { DiskSpace } from "./host/disk-space.js";
import type { ServerMetrics } from "./metrics/prometheus.js";

export interface Core {
  readonly paths: Paths;
  readonly opts: ForgeOptions;
  /** The default provider (base snapshots, warm pools and pool mode run on it). */
  readonly provider: Provider;
  /** Every enabled provider; a sandbox runs on the one its row names. */
  readonly providers: Providers;
  readonly defaults: SpawnDefaults;
  readonly sandboxes: SandboxStore;
  readonly templates: TemplateStore;
  readonly snapshotRows: SnapshotStore;
  readonly eventStore: EventStore;
  readonly audit: AuditStore;
  readonly events: EventBus;
  readonly snaps: Snapshots;
  readonly warm: WarmPools;
  /** VMMs started ahead for restores of the base snapshots in use. */
  readonly prestarts: Prestarts;
  readonly images: Images;
  readonly tenants: TenantPool | null;
  readonly networks: Networks;
  readonly volumes: Volumes;
  readonly hostDirs: HostDirs;
  /** Credentials forwarded into sandboxes (guest/forwards.ts). */
  readonly forwards: Forwards;
  readonly egress: EgressProxy;
  readonly metricStore: MetricStore;
  /** Samples of the host and every running sandbox (metrics/sampler.ts). */
  readonly sampler: MetricsSampler;
  /** The server's counters and the Prometheus exposition (metrics/prometheus.ts). */
  readonly prom: ServerMetrics;
  /** The run-time state of this process's sandboxes, and its one owner (sandboxes/table.ts). */
  readonly table: SandboxTable;
  /** Secrets kept on the host for the egress proxy to add to requests (secrets/secrets.ts). */
  readonly secretStore: Secrets;
  /** The data directory's free space: refusals while it is full, writes that wait for room (disk-space.ts). */
  readonly disk: DiskSpace;
  /** Turns spawn requests into plans and rows (sandboxes/plan.ts). */
  readonly planner: Planner;
}

/** Most copies one fork or restore call makes. */
export const MAX_FORK = 32;
