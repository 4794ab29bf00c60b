// The core's one way in. Every interface (library, CLI, REST, E2B, MCP) calls the operations of
// the facades it holds, by responsibility: `forge.sandboxes.spawn(…)`, `forge.images.pull(…)`,
// `forge.snapshots.fork(…)`. None of them knows about HTTP, and none reaches the stores, the
// providers or the services of the core context, which open.ts builds and hands to the facades.
import type { Paths } from "../config/paths.js";
import type { NodeMemberOptions } from "./cluster/node-member.js";
import type { Environments } from "./environments/index.js";
import type { BuildsFacade } from "./facades/builds.js";
import type { AuditFacade, EventsFacade } from "./facades/events.js";
import type { ImagesFacade } from "./facades/images.js";
import type { MetricsFacade } from "./facades/metrics.js";
import type { NetworkFacade } from "./facades/network.js";
import type { PoolsFacade, ProvidersFacade } from "./facades/providers.js";
import type { SandboxesFacade } from "./facades/sandboxes.js";
import type { SnapshotsFacade } from "./facades/snapshots.js";
import type { SshFacade } from "./facades/ssh.js";
import type { TemplatesFacade } from "./facades/templates.js";
import type { VolumesFacade } from "./facades/volumes.js";
import type { Secrets } from "./secrets/secrets.js";
import { openCore, type OpenedCore } from "./open.js";
import type { ForgeOptions, SpawnDefaults } from "./options.js";
import type { OnStop, StopReport } from "./sandboxes/server-stop.js";
import type { TakeBackReport } from "./sandboxes/recovery.js";

export { MAX_FORK } from "./core.js";
export type { LogLine } from "./sandboxes/main-process.js";
export type { OnStop, StopReport } from "./sandboxes/server-stop.js";
export type { TakeBackReport } from "./sandboxes/recovery.js";
export { CODE_IMAGE, DEFAULT_IMAGE, DESKTOP_IMAGE } from "../images/store.js";
export type { VolumeInfo } from "./volumes.js";
export type { MetricSample } from "../store/metrics.js";
export type { BuildJob } from "./builder/jobs.js";
export type { BuildOptions, BuildStep } from "./builder/builder.js";
export { imageInfo, type ImageInfo } from "./facades/images.js";
export type { ProviderStatus } from "./facades/providers.js";
export { SPAWN_DEFAULTS } from "./options.js";
export type { ForgeOptions, ForkOptions, ForkResult, NetworkOptions, PoolModeOptions, SpawnDefaults, SpawnOptions } from "./options.js";

export class Forge {
  readonly paths: Paths;
  /** What a spawn gets for what it does not name. */
  readonly defaults: SpawnDefaults;
  /** The Environments API: specs, builds of them into images, registry connections. */
  readonly environments: Environments;
  /** Spawn, create, look up, stop, start, pause, resume and destroy sandboxes; their main process and access tokens. */
  readonly sandboxes: SandboxesFacade;
  /** A running sandbox's network mode, allowlist, published ports and egress log. */
  readonly network: NetworkFacade;
  /** Snapshots, forks, restores, and snapshots as archives. */
  readonly snapshots: SnapshotsFacade;
  readonly templates: TemplatesFacade;
  /** Pulls, imports, listing, commits, exports and pushes of local images. */
  readonly images: ImagesFacade;
  /** Dockerfile builds, waited for or as jobs. */
  readonly builds: BuildsFacade;
  /** Named volumes and live host-directory mounts. */
  readonly volumes: VolumesFacade;
  readonly events: EventsFacade;
  readonly audit: AuditFacade;
  readonly providers: ProvidersFacade;
  /** Pool mode, warm pools and prestarted VMMs. */
  readonly pools: PoolsFacade;
  readonly metrics: MetricsFacade;
  /** What an ssh client asks of a sandbox before it connects (docs/ssh.md). */
  readonly ssh: SshFacade;
  /** Secrets kept on the host, which egress rules name and the egress proxy adds to requests. */
  readonly secrets: Secrets;

  private constructor(private readonly opened: OpenedCore) {
    this.paths = opened.paths;
    this.defaults = opened.defaults;
    this.environments = opened.environments;
    ({
      sandboxes: this.sandboxes,
      network: this.network,
      snapshots: this.snapshots,
      templates: this.templates,
      images: this.images,
      builds: this.builds,
      volumes: this.volumes,
      events: this.events,
      audit: this.audit,
      providers: this.providers,
      pools: this.pools,
      metrics: this.metrics,
      ssh: this.ssh,
      secrets: this.secrets,
    } = opened.facades);
  }

  /**
   * Opens ForgeVM on a data directory that ./setup.sh has prepared. One process at a time may
   * have it open: another one is refused with a DataDirInUseError naming the owner.
   */
  static async open(opts: ForgeOptions = {}): Promise<Forge> {
    return new Forge(await openCore(opts));
  }

  /**
   * Joins a cluster as a node (docs/scale-out.md): heartbeats into the catalogue at `database`,
   * records where each sandbox lives, and names this node in every sandbox's JSON.
   */
  joinCluster(o: { database: string } & NodeMemberOptions): Promise<void> {
    return this.opened.joinCluster(o);
  }

  /** What opening took back from the server before this one: sandboxes re-attached, resumed, or lost. */
  tookBack(): TakeBackReport {
    return this.opened.tookBack();
  }

  /** Records where this process serves the API, so that CLI commands on this data directory find it. */
  announce(url: string): Promise<void> {
    return this.opened.announce(url);
  }

  /**
   * Stops the background work and ends this process's hold on its sandboxes: with `keep` a
   * serving core leaves them running for the next one to take back, with `pause` it pauses them
   * to disk first; `destroy` (the default, and always for a core that does not serve) destroys
   * them, keeping those with a restart policy, stopped. Says what it did to each.
   */
  close(mode?: OnStop): Promise<StopReport> {
    return this.opened.close(mode);
  }
}
