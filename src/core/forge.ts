// Past 400 lines because it is still the facade of every operation; issue 29 splits it into facades.
// The core's one way in. Every interface (library, CLI, REST, and the ones to come) calls these
// operations; none of them knows about HTTP, and none reaches the stores, the provider or the
// other services, which Forge holds privately in its `Core` and hands to the operation modules:
// spawn.ts, create.ts, lifecycle.ts, copies.ts, stop-start.ts, template-ops.ts, recovery.ts,
// reaper.ts, pool-mode.ts, guest-processes.ts. It is past 500 lines because it is the whole surface every interface sees: each
// method is a one-line doc and a call into those modules, and splitting it would split that list.
import { expiryAfter } from "../schemas/durations.js";
import { randomBytes } from "node:crypto";
import { mkdir, stat } from "node:fs/promises";
import type { Readable } from "node:stream";
import { join } from "node:path";
import { isIP } from "node:net";
import { defaultDataDir, pathsFor, type Paths } from "../config/paths.js";
import { BlobStore } from "../images/blobs.js";
import type { RegistryOptions } from "../images/registry.js";
import { canonicalName, DEFAULT_IMAGE, listImages, resolveImage, type LocalImage } from "../images/store.js";
import { ext4Has } from "../images/ext4.js";
import { openEnvironments, type Environments } from "./environments/index.js";
import { EgressProxy } from "../net/egress-proxy.js";
import { PackageCache } from "../net/package-cache.js";
import { loadPresets } from "../net/allowlist.js";
import { BLOCKED_V4 } from "../net/addresses.js";
import type { EgressEntry } from "../net/egress-log.js";
import type { PortMapping } from "../net/ports.js";
import type { ProviderFeatures, ProviderHealth } from "../providers/provider.js";
import { QemuProvider } from "../providers/qemu/qemu-provider.js";
import { LocalProvider } from "../providers/local/local-provider.js";
import { RemoteProvider } from "../providers/remote/remote-provider.js";
import { E2bProvider } from "../providers/e2b/e2b-provider.js";
import { Providers } from "./providers.js";
import { NodeMember, type NodeMemberOptions } from "./cluster/node-member.js";
import { Catalogue } from "../store/catalogue.js";
import { openDb, type Db } from "../store/db.js";
import { AuditStore, type AuditEntry, type AuditQuery } from "../store/audit.js";
import { EventStore, type EventRow } from "../store/events.js";
import { SandboxStore, type HostDirMount, type NetworkRecord, type SandboxRow, type SandboxState } from "../store/sandboxes.js";
import { SnapshotStore, type SnapshotRow, type SnapshotState } from "../store/snapshots.js";
import { TemplateStore, type TemplateBody, type TemplateRow } from "../store/templates.js";
import * as copies from "./copies.js";
import { commit, type CommitOptions, type CommitResult } from "./commit.js";
import type { ImageWork } from "./image-layers.js";
import { build, checkDockerfile, type BuildOptions, type BuildReport, type BuildResult, type BuildWork } from "./build/builder.js";
import { BuildCache } from "./build/cache.js";
import { BuildContext, unpackContext } from "./build/context.js";
import { BuildJobs, removeDir, type BuildJob } from "./build/jobs.js";
import { exportSnapshot, importSnapshot } from "./snapshot-transfer.js";
import { exportImage, pushImage, type PushedBlob, type PushResult } from "./image-transfer.js";
import type { Core } from "./core.js";
import { ForgevmError, notFound, sandboxGone } from "../http/errors.js";
import { EventBus } from "./events.js";
import { Images, parseImageReference, type ImportOptions } from "./images.js";
import { PullJobs, type PullJob } from "./pull-jobs.js";
import { destroy, logs, markLost } from "./lifecycle.js";
import { readMainLog, type LogLine } from "./main-process.js";
import { requireState } from "./states.js";
import * as stopStart from "./stop-start.js";
import { create, startCreated } from "./create.js";
import { guestProcesses, type GuestProcess } from "./guest-processes.js";
import { Networks } from "./network.js";
import type { ForgeOptions, ForkOptions, ForkResult, SpawnDefaults, SpawnOptions } from "./options.js";
import { claimDataDir, type Ownership } from "./owner.js";
import { makePoolHost } from "./pool-mode.js";
import { lifeAfterWake, pause, resume, wake } from "./pause.js";
import { prune, reap } from "./reaper.js";
import { reconcile } from "./recovery.js";
import { DiskSpace } from "./disk-space.js";
import type { Sandbox } from "./sandbox.js";
import { Snapshots } from "./snapshots.js";
import { configurePools, snapshotsInUse, spawn } from "./spawn.js";
import * as templateOps from "./template-ops.js";
import { TenantPool } from "./tenant-pool.js";
import { Tokens } from "./tokens.js";
import { WarmPools } from "./warm-pool.js";
import { PRESTART_BASES, Prestarts, prestartState } from "./prestart.js";
import { Volumes, type VolumeInfo } from "./volumes.js";
import { HostDirs } from "./host-dirs/host-dirs.js";
import { VolumeStore } from "../store/volumes.js";
import { HOST_SERIES, MetricStore, type MetricSample } from "../store/metrics.js";
import { MetricsSampler } from "./metrics/sampler.js";
import { ServerMetrics } from "./metrics/prometheus.js";
import { enableKsm, idleReclaimState, ksmState } from "./host-memory.js";
import { DEFAULT_RECLAIM_AFTER_MS } from "./reaper.js";
import { ignore } from "../util/ignore.js";

/** How long a main process gets after SIGTERM when the server shuts down. */
const SHUTDOWN_STOP_GRACE_MS = 5000;
export { MAX_FORK } from "./core.js";
export type { LogLine } from "./main-process.js";
export { CODE_IMAGE, DEFAULT_IMAGE } from "../images/store.js";
export type { VolumeInfo } from "./volumes.js";
export type { MetricSample } from "../store/metrics.js";
export type { BuildJob } from "./build/jobs.js";
export type { BuildOptions, BuildStep } from "./build/builder.js";
export type { ForgeOptions, ForkOptions, ForkResult, NetworkOptions, PoolModeOptions, SpawnDefaults, SpawnOptions } from "./options.js";

export const SPAWN_DEFAULTS: SpawnDefaults = { image: DEFAULT_IMAGE, memoryMb: 512, vcpus: 1, diskMb: 2048, ttlMs: 30 * 60_000 };

/** A local image as every interface lists it. */
export interface ImageInfo {
  name: string;
  digest?: string;
  size: number;
  createdAt: string;
  source: string;
  layers?: string[];
  parent?: string;
  inUse: boolean;
}

/** How every interface lists a local image. */
export function imageInfo(i: LocalImage, inUse: boolean): ImageInfo {
  return {
    name: i.name,
    ...(i.digest ? { digest: i.digest } : {}),
    size: i.size,
    createdAt: i.createdAt,
    source: i.source,
    ...(i.layers ? { layers: i.layers } : {}),
    ...(i.parent ? { parent: i.parent } : {}),
    inUse,
  };
}

/** One provider as /providers shows it. */
export interface ProviderStatus extends ProviderHealth {
  default: boolean;
  isolation: ProviderFeatures["isolation"];
  features: ProviderFeatures;
  sandbox_count: number;
}

export class Forge {
  private readonly core: Core;
  private reaper: NodeJS.Timeout | null = null;
  /** Puts the host's KSM back as it was before this server turned it on (config memory.ksm). */
  private restoreKsm: (() => Promise<void>) | null = null;
  private ownership: Ownership | null = null;
  private readonly pullJobs = new PullJobs((ref, log) => this.pullImage(ref, log));
  private readonly tokens: Tokens;
  private readonly blobs: BlobStore;
  private readonly buildCache: BuildCache;
  private readonly buildJobs = new BuildJobs();
  readonly defaults: SpawnDefaults;
  /** The Environments API: specs, builds of them into images, registry connections. */
  readonly environments: Environments;
  private member: NodeMember | null = null;
  private leaveCluster: () => Promise<void> = async () => {};

  private constructor(
    readonly paths: Paths,
    providers: Providers,
    private readonly db: Db,
    opts: ForgeOptions,
  ) {
    const sandboxes = new SandboxStore(db);
    const snapshotRows = new SnapshotStore(db);
    const eventStore = new EventStore(db);
    const events = new EventBus(eventStore);
    this.defaults = { ...SPAWN_DEFAULTS, ...opts.defaults };
    this.tokens = new Tokens(paths.dataDir);
    this.blobs = new BlobStore(paths.blobsDir);
    this.buildCache = new BuildCache(join(paths.dataDir, "build-cache"), this.blobs);
    const net = opts.network ?? {};
    const metricStore = new MetricStore(db);
    const sampler = new MetricsSampler(metricStore, () => core.live.values(), paths.dataDir, opts.metrics);
    const prom = new ServerMetrics({
      sampler,
      states: () => sandboxes.countByState(),
      imageOf: (id) => core.live.get(id)?.image,
      pools: () => this.warmPools(),
    });
    events.subscribe(prom.onEvent);
    const egress = new EgressProxy({
      onDecision: (d) => prom.egressDecision(d),
      logDir: join(paths.dataDir, "egress"),
      allowPrivate: net.allowPrivate,
      hostsOverride: net.hostsOverride,
      cache: new PackageCache(join(paths.dataDir, "package-cache"), (net.cacheMaxMb ?? 2048) * 1048576),
    });
    const pull = (ref: string) => this.pullImage(ref);
    const templates = new TemplateStore(db);
    const core: Core = {
      paths,
      opts,
      provider: providers.default,
      providers,
      defaults: this.defaults,
      sandboxes,
      templates,
      snapshotRows,
      eventStore,
      audit: new AuditStore(db),
      events,
      egress,
      metricStore,
      sampler,
      prom,
      networks: new Networks(
        egress,
        loadPresets(net.presetsFile),
        net.default ?? "none",
        (id, r) => sandboxes.setNetwork(id, r),
        // A connection to a published port is work in flight, and wakes a paused sandbox: its
        // first bytes wait in the held channel until the guest runs again.
        (id) => {
          const end = (core.live.get(id) ?? core.sleeping.get(id))?.busy() ?? (() => {});
          if (core.sleeping.has(id)) void wake(core, id, "port", true).catch(ignore("a failed wake leaves the sandbox paused; the connection's next try wakes it again"));
          return end;
        },
        !!net.cache,
      ),
      volumes: new Volumes(join(paths.dataDir, "volumes"), new VolumeStore(db), sandboxes),
      hostDirs: new HostDirs(opts.hostDirs ?? [], sandboxes),
      warm: new WarmPools(opts.warmPool?.memoryBudgetMb ?? 2048, events.emit),
      prestarts: new Prestarts(opts.baseSnapshots === false ? 0 : (opts.prestart ?? 0), PRESTART_BASES, events.emit),
      snaps: new Snapshots({ paths, provider: providers.default, store: snapshotRows, events, inUse: () => snapshotsInUse(core) }),
      images: new Images({
        paths,
        blobs: this.blobs,
        events,
        registryAuth: opts.registryAuth,
        sandboxesUsing: (image) =>
          this.list()
            .filter((r) => r.image === image)
            .map((r) => r.id),
        snapshotsUsing: (image) =>
          snapshotRows
            .list(["ready"])
            .filter((r) => r.image === image && r.kind !== "base")
            .map((r) => r.name ?? r.id),
        dropBases: (image) => core.snaps.dropBases((r) => r.image === image),
        keepBlobs: () => this.buildCache.layers(),
      }),
      tenants: opts.pool?.enabled ? new TenantPool(opts.pool, () => makePoolHost(core, pull), events.emit) : null,
      live: new Map(),
      mains: new Map(),
      secrets: new Map(),
      destroying: new Map(),
      waking: new Map(),
      sleeping: new Map(),
      pausing: new Map(),
      disk: new DiskSpace(paths.dataDir, {
        vms: () => [...core.live.values()].map((sb) => ({ id: sb.id, vm: sb.vm })),
        onRoom: async () => {
          events.flush();
          await markLost(core, "its VM went away while the server's disk was full");
        },
        log: (line) => console.error(`forgevm: ${line}`),
      }),
      closed: false,
    };
    this.core = core;
    this.environments = openEnvironments({
      db,
      dataDir: paths.dataDir,
      options: opts.environments ?? {},
      operatorSecrets: opts.hostSecrets ?? {},
      provider: () => providers.default.name,
      scratchDir: paths.dataDir,
      build: (dir, o, report, signal) => this.build(dir, o, report, signal),
      push: (image, reference, login, log) => pushImage(this.core, this.imageWork(), image, reference, log, undefined, login),
      imageHas: async (image, files) => {
        const found = await resolveImage(paths, image).catch(() => null);
        return found ? ext4Has(found.rootfs, files) : null;
      },
      imageBytes: async (image) => {
        const st = await stat((await resolveImage(paths, image)).rootfs);
        return st.blocks * 512;
      },
    });
  }

  /**
   * Opens ForgeVM on a data directory that ./setup.sh has prepared. One process at a time may
   * have it open: another one is refused with a DataDirInUseError naming the owner.
   */
  static async open(opts: ForgeOptions = {}): Promise<Forge> {
    const paths = pathsFor(opts.dataDir ?? defaultDataDir());
    await mkdir(paths.dataDir, { recursive: true });
    const ownership = await claimDataDir(paths.dataDir);
    try {
      return await Forge.openOwned(paths, opts, ownership);
    } catch (e) {
      await ownership.release();
      throw e;
    }
  }

  private static async openOwned(paths: Paths, opts: ForgeOptions, ownership: Ownership): Promise<Forge> {
    const db = openDb(opts.dbPath ?? join(paths.dataDir, "forgevm.db"));
    const vms =
      opts.provider ??
      new QemuProvider({
        paths,
        accel: opts.accel,
        guestLimits: opts.guestLimits,
        jail: opts.jail,
        firewall: { blockedV4: BLOCKED_V4.map(([a, p]) => `${a}/${p}`), allowV4: (opts.network?.allowPrivate ?? []).filter((c) => isIP(c.split("/")[0]) === 4) },
      });
    const providers = new Providers(
      [
        vms,
        ...(opts.localProvider ? [new LocalProvider({ paths })] : []),
        ...(opts.remoteProvider ? [new RemoteProvider({ paths, url: opts.remoteProvider.url, apiKey: opts.remoteProvider.apiKey })] : []),
        ...(opts.e2bProvider ? [new E2bProvider({ paths, ...opts.e2bProvider })] : []),
      ],
      opts.defaultProvider ?? vms.name,
    );
    const forge = new Forge(paths, providers, db, opts);
    forge.ownership = ownership;
    const core = forge.core;
    await reconcile(core);
    await core.snaps.collect(true);
    await forge.configurePools();
    core.tenants?.prewarm();
    const every = opts.reapIntervalMs ?? 1000;
    if (every > 0) {
      forge.reaper = setInterval(() => void reap(core), every);
      forge.reaper.unref();
      // Host-wide, so only a serving core turns it on, and puts it back as it was when it closes.
      if (opts.memory?.ksm) forge.restoreKsm = await enableKsm().catch(() => null);
      // A serving core (it reaps) applies the restart policies of stopped sandboxes; a command's short-lived core does not.
      void stopStart.applyRestartPolicies(core);
      if (opts.metrics?.enabled !== false) {
        forge.dropStaleSeries();
        core.sampler.start();
      }
      core.disk.start();
    }
    return forge;
  }

  // ---- sandboxes

  /**
   * Starts a sandbox and returns once its agent answers: restored from its image's (or
   * template's) base snapshot when one exists or can be made, else booted. A failed start is
   * recorded as `error`.
   */
  async spawn(opts: SpawnOptions = {}): Promise<Sandbox> {
    this.core.disk.require("a spawn");
    const started = performance.now();
    try {
      // A template made through another front may not have reached this node's mirror yet.
      if (this.member && opts.template && !this.core.templates.get(opts.template)) await this.member.mirrorTemplates();
      const sb = await spawn(this.core, opts, (ref) => this.pullImage(ref));
      this.core.prom.spawned((performance.now() - started) / 1000, this.core.sandboxes.get(sb.id)?.origin ?? "boot");
      return sb;
    } catch (e) {
      this.core.prom.spawnFailed();
      throw e;
    }
  }

  // Creates in progress by idempotency key: a retry that comes meanwhile waits for the same one.
  private readonly creatingByKey = new Map<string, Promise<string>>();

  /**
   * Runs `make` (a spawn or create given `key`) once per idempotency key: a retry gets the
   * sandbox the first try made (waiting for it while it starts); a sandbox that ended since is a
   * 409 naming it. Resolves with its id and whether it was made before.
   */
  async once(key: string, make: () => Promise<string>): Promise<{ id: string; replayed: boolean }> {
    const pending = this.creatingByKey.get(key);
    if (pending) return { id: await pending, replayed: true };
    const made = this.core.sandboxes.byIdempotencyKey(key);
    if (made) {
      if (made.state === "destroyed" || made.state === "error")
        throw new ForgevmError(
          "CONFLICT",
          `Idempotency-Key: the sandbox this key made (${made.id}) is ${made.state}${made.error ? `: ${made.error.split("\n")[0]}` : ""}; send another key to make another`,
        );
      return { id: made.id, replayed: true };
    }
    const p = make().then((id) => {
      // A sandbox claimed from a warm pool was made before the key came: it takes it now.
      if (!this.core.sandboxes.get(id)?.idempotency_key) this.core.sandboxes.update(id, { idempotency_key: key });
      return id;
    });
    this.creatingByKey.set(key, p);
    try {
      return { id: await p, replayed: false };
    } finally {
      this.creatingByKey.delete(key);
    }
  }

  /** The id of a sandbox named by its id or its name. */
  private idOf(idOrName: string): string {
    if (this.core.sandboxes.get(idOrName)) return idOrName;
    return this.core.sandboxes.byName(idOrName)?.id ?? idOrName;
  }

  /** The stored record of any sandbox ever seen (history included), by id or name. */
  get(idOrName: string): SandboxRow {
    const id = this.idOf(idOrName);
    const row = this.core.sandboxes.get(id);
    if (!row) throw sandboxGone(id, `sandbox ${id} not found`);
    return this.member ? { ...row, node: this.member.id } : row;
  }

  /** The stored record of a sandbox, or null when there is none. */
  find(id: string): SandboxRow | null {
    return this.core.sandboxes.get(id) ?? null;
  }

  /** Live sandboxes (creating or running), newest first. */
  list(ownerId?: string, states: SandboxState[] = ["creating", "running"]): SandboxRow[] {
    const rows = this.core.sandboxes.list(states, ownerId);
    return this.member ? rows.map((r) => ({ ...r, node: this.member!.id })) : rows;
  }

  /**
   * Joins a cluster as a node (docs/scale-out.md): heartbeats into the catalogue at `database`,
   * records where each sandbox lives, and names this node in every sandbox's JSON.
   */
  async joinCluster(o: { database: string } & NodeMemberOptions): Promise<void> {
    const catalogue = await Catalogue.open(o.database);
    const member = new NodeMember(this, catalogue, o);
    try {
      await member.start();
    } catch (e) {
      member.stop();
      await catalogue.close();
      throw e;
    }
    this.member = member;
    this.leaveCluster = async () => {
      member.stop();
      await catalogue.close();
    };
  }

  /** How many sandboxes are live, and how many rows the store holds. */
  counts(): { live: number; total: number } {
    return this.core.sandboxes.count();
  }

  /** Whether the data directory's disk is full, and which sandboxes wait for room. */
  storage(): { full: boolean; waiting_sandboxes: string[] } {
    return { full: this.core.disk.full, waiting_sandboxes: [...this.core.disk.waiting] };
  }

  /** The running sandbox with this id (or name), ready for exec and file operations. */
  sandbox(idOrName: string): Sandbox {
    const id = this.idOf(idOrName);
    const sb = this.core.live.get(id);
    if (sb) {
      this.core.disk.requireAnswering(id);
      return sb;
    }
    const row = this.core.sandboxes.get(id);
    if (!row) throw sandboxGone(id, `sandbox ${id} not found`);
    requireState(row, "exec");
    throw new ForgevmError("CONFLICT", `sandbox ${id} is run by another ForgeVM process`);
  }

  /** The running sandbox with this id (or name), resumed first when it is paused (`by` names the call in its sandbox.resumed event). */
  async use(idOrName: string, by: string): Promise<Sandbox> {
    const id = this.idOf(idOrName);
    await wake(this.core, id, by, true);
    return this.sandbox(id);
  }

  /** Sets a new expiry `ttlMs` from now. */
  extend(id: string, ttlMs: number): SandboxRow {
    const row = this.get(id);
    requireState(row, "extend");
    this.core.sandboxes.update(row.id, { expires_at: expiryAfter(ttlMs) });
    return this.get(row.id);
  }

  /** Stops a sandbox and removes its files; idempotent for sandboxes that existed. */
  async destroy(id: string, reason: "destroyed" | "expired" = "destroyed"): Promise<void> {
    return destroy(this.core, this.idOf(id), reason);
  }

  /** Stops a running sandbox: its main process gets SIGTERM, then SIGKILL after `graceMs`; its disk is kept and it costs no memory. */
  async stop(id: string, graceMs?: number): Promise<SandboxRow> {
    this.core.disk.require("a stop (its memory is saved)");
    await stopStart.stop(this.core, this.idOf(id), graceMs);
    return this.get(id);
  }

  /** Defines a sandbox without starting it (Docker's create): checked, its image pulled, its name taken; `start` boots it. */
  async create(opts: SpawnOptions = {}): Promise<SandboxRow> {
    this.core.disk.require("a create");
    return create(this.core, opts, (ref) => this.pullImage(ref));
  }

  /** Starts a created sandbox, or a stopped one again (files as they were, its main process run anew); it lives `ttlMs` from now. */
  async start(id: string, ttlMs?: number): Promise<Sandbox> {
    const row = this.get(id);
    if (row.state === "created") return startCreated(this.core, row.id, ttlMs, (ref) => this.pullImage(ref));
    return stopStart.start(this.core, row.id, stopStart.lifeOf(this.core, row, ttlMs));
  }

  /** Stops (when running) and starts a sandbox. */
  async restart(id: string, ttlMs?: number, graceMs?: number): Promise<Sandbox> {
    const row = this.get(id);
    if (row.state === "created") return this.start(id, ttlMs);
    return stopStart.restart(this.core, row.id, stopStart.lifeOf(this.core, row, ttlMs), graceMs);
  }

  /** Sends a signal (a number) to a sandbox's main process. */
  async kill(id: string, signal: number): Promise<void> {
    return stopStart.kill(this.core, this.idOf(id), signal);
  }

  /** A sandbox's main process output: the last `tail` lines, or those since `sinceMs` (kept after it is gone). */
  async mainLogs(id: string, opts: { tail?: number; sinceMs?: number } = {}): Promise<LogLine[]> {
    const row = this.get(id);
    await this.core.mains.get(row.id)?.flushed();
    return readMainLog(this.core, row.id, opts);
  }

  /** Calls `onLine` for each line the main process writes from now on, and `onEnd` when it has ended for good or the sandbox stops running; returns the unsubscribe function. */
  followMain(id: string, onLine: (l: LogLine) => void, onEnd: () => void): () => void {
    const row = this.get(id);
    const runner = this.core.mains.get(row.id);
    if (!runner || runner.finished) {
      onEnd();
      return () => {};
    }
    // A pause that carried the sandbox's streams over (pause.ts) leaves the main process running.
    const off = this.core.events.subscribe((e) => {
      if (e.sandbox_id !== row.id) return;
      if (["sandbox.stopped", "sandbox.destroyed", "sandbox.expired", "sandbox.error"].includes(e.type) || (e.type === "sandbox.paused" && !e.data?.streams_kept)) onEnd();
    });
    const done = () => onEnd();
    // A client following the logs is waiting on the sandbox: it does not idle meanwhile.
    const end = (this.core.live.get(row.id) ?? this.core.sleeping.get(row.id))?.busy() ?? (() => {});
    runner.lines.on("line", onLine);
    runner.lines.once("done", done);
    return () => {
      end();
      off();
      runner.lines.off("line", onLine);
      runner.lines.off("done", done);
    };
  }

  /** The processes running in a sandbox (its cgroup), read from the guest's /proc. */
  async processes(id: string): Promise<GuestProcess[]> {
    return guestProcesses(await this.use(id, "processes"));
  }

  /** Saves a running sandbox's whole state (with `memory: false`, its disk only) and stops its VM (no memory or CPU while paused). */
  async pause(id: string, opts: { memory?: boolean } = {}): Promise<void> {
    this.core.disk.require("a pause (its memory is saved)");
    return pause(this.core, this.sandbox(id), "paused", "request", opts.memory !== false);
  }

  /** Brings a paused sandbox back under its id, processes and files as they were, to live `ttlMs` from now (default: what it had left). */
  async resume(id: string, ttlMs?: number, opts: { reboot?: boolean } = {}): Promise<Sandbox> {
    const row = this.get(id);
    if (this.core.waking.has(row.id)) await this.core.waking.get(row.id);
    if (this.core.live.has(row.id) && ttlMs === undefined) return this.sandbox(row.id);
    return resume(this.core, row.id, ttlMs ?? lifeAfterWake(this.core, row), "paused", "request", opts);
  }

  /** Resumes a sandbox paused with auto-resume (its lifecycle) before a call `by` is served; nothing for any other. */
  wake(id: string, by: string): Promise<void> {
    return wake(this.core, this.idOf(id), by);
  }

  /** Destroys every live sandbox whose expiry has passed; returns how many. */
  async prune(): Promise<number> {
    return prune(this.core);
  }

  /** The last `lines` lines of a sandbox's serial console (kept after destroy, with its history). */
  async logs(id: string, lines = 100): Promise<string[]> {
    return logs(this.core, this.get(id), lines);
  }

  /** The access token for `purpose` on a sandbox (derived from this data directory's secret). */
  accessToken(id: string, purpose: string): string {
    return this.tokens.token(id, purpose);
  }

  /** Whether `given` is the access token for `purpose` on a sandbox. */
  checkAccessToken(id: string, purpose: string, given: string): boolean {
    return this.tokens.check(id, purpose, given);
  }

  // ---- network

  /** A running sandbox's network mode, allowlist and published ports. */
  network(id: string): NetworkRecord {
    const sid = this.sandbox(id).id;
    return this.core.networks.get(sid);
  }

  /** Replaces a running sandbox's egress allowlist; effective on its next request. */
  setAllowlist(id: string, allow: string[]): NetworkRecord {
    const sid = this.sandbox(id).id;
    return this.core.networks.setAllow(sid, allow);
  }

  /** The entries of allowlist `asked` that reach beyond allowlist `pinned` (presets expanded); a bad entry is a 400. */
  allowlistOutside(asked: string[], pinned: string[]): string[] {
    return this.core.networks.outside(asked, pinned);
  }

  /** The network mode spawns get when they name none and have no allowlist. */
  get defaultNetwork(): string {
    return this.core.networks.defaultNetwork;
  }

  /** Publishes a port of a running sandbox ("8080:80"); 409 if the host port is taken. */
  async publishPort(id: string, spec: string): Promise<PortMapping> {
    const sid = this.sandbox(id).id;
    return this.core.networks.addPort(sid, spec);
  }

  /** Stops publishing a host port of a running sandbox. */
  async unpublishPort(id: string, hostPort: number): Promise<void> {
    const sid = this.sandbox(id).id;
    await this.core.networks.removePort(sid, hostPort);
  }

  /** The last `lines` egress decisions of a sandbox (kept with its history after it is destroyed). */
  async egressLog(id: string, lines = 100): Promise<EgressEntry[]> {
    return this.core.networks.egressLog(this.get(id).id, lines);
  }

  // ---- snapshots, forks, restores

  /** Snapshots a running sandbox (memory, devices, disk) under an optional name; it keeps running. */
  async snapshot(id: string, name?: string): Promise<SnapshotRow> {
    this.core.disk.require("a snapshot");
    return copies.snapshot(this.core, this.sandbox(id), name);
  }

  /** Makes `count` running copies of a sandbox as it is now (see copies.ts). */
  async fork(id: string, opts: ForkOptions = {}): Promise<ForkResult> {
    this.core.disk.require("a fork");
    return copies.fork(this.core, this.sandbox(id), opts);
  }

  /** Starts `count` sandboxes from a snapshot, each as the sandbox was when it was taken. */
  async restore(idOrName: string, opts: ForkOptions = {}): Promise<Sandbox[]> {
    this.core.disk.require("a restore");
    return copies.restore(this.core, idOrName, opts);
  }

  /** A named snapshot as an archive (its memory, its disk over its image, its description) for another host. */
  async exportSnapshot(idOrName: string): Promise<{ stream: Readable; filename: string }> {
    return exportSnapshot(this.core, this.getSnapshot(idOrName));
  }

  /** A snapshot made here from an exported archive (taken by the same VMM build and accelerator). */
  async importSnapshot(archive: AsyncIterable<Buffer>, name?: string): Promise<SnapshotRow> {
    this.core.disk.require("a snapshot import");
    return importSnapshot(this.core, archive, name);
  }

  /** A snapshot by id or name. */
  getSnapshot(idOrName: string): SnapshotRow {
    return copies.getSnapshot(this.core, idOrName);
  }

  /** Snapshots in these states (default: ready), newest first; base and fork snapshots included. */
  listSnapshots(states: SnapshotState[] = ["ready"]): SnapshotRow[] {
    return this.core.snapshotRows.list(states);
  }

  /** Deletes a snapshot; its files go once no sandbox restored from it runs. */
  async deleteSnapshot(idOrName: string): Promise<void> {
    await this.core.snaps.remove(this.getSnapshot(idOrName));
  }

  // ---- templates

  listTemplates(): TemplateRow[] {
    return this.core.templates.list();
  }

  /** A template by name; 404 when there is none. */
  getTemplate(name: string): TemplateRow {
    return templateOps.getTemplate(this.core, name);
  }

  /** Stores a new template (false when the name is taken) and starts its warm pool. */
  async createTemplate(t: TemplateBody): Promise<boolean> {
    return templateOps.createTemplate(this.core, t, (ref) => this.pullImage(ref));
  }

  /** Replaces a template; its base snapshots and warm VMs are remade from the new definition. */
  async replaceTemplate(t: TemplateBody): Promise<boolean> {
    return templateOps.replaceTemplate(this.core, t, (ref) => this.pullImage(ref));
  }

  /** Makes the stored templates agree with these (the config file's); returns the names created or replaced. */
  async applyTemplates(templates: TemplateBody[]): Promise<string[]> {
    return templateOps.applyTemplates(this.core, templates, (ref) => this.pullImage(ref));
  }

  /** Deletes a template with its base snapshots and warm VMs. */
  async deleteTemplate(name: string): Promise<boolean> {
    return templateOps.deleteTemplate(this.core, name, (ref) => this.pullImage(ref));
  }

  // ---- images

  /** Pulls an image from its registry (verifying every byte) and installs it; concurrent pulls of one image share the work. */
  async pullImage(reference: string, log?: (m: string) => void, onLayerBytes?: RegistryOptions["onLayerBytes"]): Promise<LocalImage> {
    this.core.disk.require("a pull");
    return this.core.images.pull(reference, log, onLayerBytes);
  }

  /** Imports an image from an OCI layout directory, an OCI archive or a `docker save` tarball on this host. */
  async importImage(source: string, opts: ImportOptions = {}): Promise<LocalImage> {
    this.core.disk.require("an image import");
    return this.core.images.import(source, opts);
  }

  /** Imports an image from an uploaded archive (OCI archive, docker save or docker-archive tarball). */
  async importImageStream(archive: AsyncIterable<Uint8Array> | NodeJS.ReadableStream, opts: ImportOptions = {}): Promise<LocalImage> {
    this.core.disk.require("an image import");
    return this.core.images.importStream(archive, opts);
  }

  /** Starts pulling an image and returns the job at once; its progress and outcome are kept for an hour. */
  startPull(reference: string): PullJob {
    this.core.disk.require("a pull");
    parseImageReference(reference);
    return this.pullJobs.start(reference);
  }

  /** A pull job by id. */
  pullJob(id: string): PullJob {
    return this.pullJobs.get(id);
  }

  /** The name an image reference is stored under ("alpine" → "docker.io/library/alpine:latest"). */
  imageName(reference: string): string {
    return canonicalName(reference);
  }

  /** Local images, and whether a live sandbox uses each. */
  async listImages(): Promise<ImageInfo[]> {
    const used = new Set(this.list().map((s) => s.image));
    return (await listImages(this.paths)).map((i) => imageInfo(i, used.has(i.name)));
  }

  /** Removes a local image; refused while a sandbox or a kept snapshot uses it. */
  async removeImage(name: string): Promise<void> {
    return this.core.images.remove(name);
  }

  /** Makes a new image from a running sandbox's disk: one layer on top of its image (or all in one with `squash`). */
  async commit(id: string, opts: CommitOptions): Promise<CommitResult> {
    this.core.disk.require("a commit");
    return commit(this.core, this.imageWork(), this.idOf(id), opts);
  }

  /** An image as an OCI archive stream (manifest and layers as stored), with a file name for it. */
  async exportImage(name: string, log?: (m: string) => void): Promise<{ stream: Readable; filename: string; digest: string }> {
    return exportImage(this.core, this.imageWork(), name, log);
  }

  /** Pushes a local image to a registry (`reference`, default its own name); blobs the registry has are skipped or mounted. */
  async pushImage(name: string, reference?: string, log?: (m: string) => void, onBlob?: (b: PushedBlob) => void): Promise<PushResult> {
    return pushImage(this.core, this.imageWork(), name, reference, log, onBlob);
  }

  /** Builds an image from the Dockerfile in a context directory on this host, waiting for it. */
  async build(
    contextDir: string,
    opts: BuildOptions,
    report: BuildReport = { steps: () => {}, step: () => {}, log: () => {} },
    signal: AbortSignal = new AbortController().signal,
  ): Promise<BuildResult> {
    const ctx = await BuildContext.open(contextDir);
    return build(this.core, this.buildWork(), ctx, opts, report, signal);
  }

  /** Starts a build of an uploaded context (a tar stream) as a job; returns it once the context is unpacked. */
  async startBuild(context: AsyncIterable<Buffer>, opts: BuildOptions): Promise<BuildJob> {
    this.core.disk.require("a build");
    if (this.core.closed) throw new ForgevmError("UNAVAILABLE", "the server is shutting down");
    const dir = join(this.paths.dataDir, `.build-context-${randomBytes(6).toString("hex")}`);
    try {
      await unpackContext(context, dir);
      const ctx = await BuildContext.open(dir);
      await checkDockerfile(ctx, opts); // a Dockerfile that cannot be built is a 400 now, not a failed job
      return this.buildJobs.start(opts, (o, report, signal) => build(this.core, this.buildWork(), ctx, o, report, signal), removeDir(dir));
    } catch (e) {
      await removeDir(dir)();
      throw e;
    }
  }

  /** A build job by id. */
  buildJob(id: string): BuildJob {
    return this.buildJobs.get(id);
  }

  /** Cancels a running build job. */
  cancelBuild(id: string): BuildJob {
    return this.buildJobs.cancel(id);
  }

  /** Calls `onLine` with each new line of a build's log, then null when it ends; returns the unsubscribe. */
  followBuild(id: string, onLine: (line: string | null) => void): () => void {
    return this.buildJobs.follow(id, onLine);
  }

  private buildWork(): BuildWork {
    return {
      ...this.imageWork(),
      cache: this.buildCache,
      pull: (ref) => this.pullImage(ref),
      spawnBuild: (image, o) =>
        this.spawn({ image, network: o.network ?? "none", allow: o.allow, memoryMb: o.memoryMb, ttlMs: 2 * 60 * 60_000, metadata: { "forgevm.build": o.buildId } }),
      removeImage: (n) => this.removeImage(n),
    };
  }

  // What image operations need beyond the image store: throwaway sandboxes, and who uses an image.
  private imageWork(): ImageWork {
    return {
      blobs: this.blobs,
      spawnHelper: (image) => this.spawn({ image, network: "none", ttlMs: 15 * 60_000, metadata: { "forgevm.helper": "image-files" } }),
      destroyHelper: (id) => this.destroy(id),
      imageUsers: (image) => [
        ...this.list(undefined, ["creating", "running", "paused", "stopped", "created"])
          .filter((r) => r.image === image)
          .map((r) => r.id),
        ...this.core.snapshotRows
          .list(["ready"])
          .filter((r) => r.image === image && r.kind !== "base")
          .map((r) => r.name ?? r.id),
      ],
    };
  }

  /** Deletes blobs that no local image refers to; returns how many. */
  async pruneBlobs(): Promise<number> {
    return this.core.images.pruneBlobs();
  }

  // ---- host directories

  /** Mounts a host directory (inside the config's mounts.host_dirs) into a running sandbox, live. */
  async mountHostDir(id: string, host: string, path: string, readOnly = false): Promise<HostDirMount[]> {
    const sb = this.sandbox(id);
    const row = this.core.sandboxes.get(sb.id);
    if (row) this.core.providers.require(this.core.providers.of(row), "volumes", `sandbox ${sb.id}`);
    return this.core.hostDirs.mount(sb, host, path, readOnly);
  }

  /** Unmounts a host directory from a running sandbox. */
  async unmountHostDir(id: string, path: string): Promise<HostDirMount[]> {
    return this.core.hostDirs.unmount(this.sandbox(id), path);
  }

  // ---- volumes

  /** Creates a named volume (an ext4 filesystem of `sizeMb`, sparse on the host). */
  async createVolume(name: string, sizeMb?: number, labels?: Record<string, string>): Promise<VolumeInfo> {
    this.core.disk.require("a volume");
    return this.core.volumes.create(name, sizeMb, labels);
  }

  /** Named volumes, with the sandboxes that mount each. */
  async listVolumes(): Promise<VolumeInfo[]> {
    return this.core.volumes.list();
  }

  /** One volume by name. */
  async volume(name: string): Promise<VolumeInfo> {
    return this.core.volumes.info(name);
  }

  /** Deletes a volume and its data; refused while a sandbox mounts it. */
  async removeVolume(name: string): Promise<void> {
    return this.core.volumes.remove(name);
  }

  // ---- events

  /** Calls `fn` for every event from now on; returns the unsubscribe function. */
  subscribe(fn: (e: EventRow) => void): () => void {
    return this.core.events.subscribe(fn);
  }

  /** The newest stored event's number (0 when there is none). */
  lastEventSeq(): number {
    return this.core.events.lastSeq();
  }

  /** Stored events after `seq`, oldest first. */
  replayEvents(afterSeq: number, limit?: number): EventRow[] {
    return this.core.events.replay(afterSeq, limit);
  }

  // ---- audit

  /** Records one call an agent made through an agent interface (arguments already redacted). */
  recordAudit(e: Omit<AuditEntry, "seq" | "time">): AuditEntry {
    return this.core.audit.append(e);
  }

  /** Audit entries, oldest first: the newest `limit` matching the query. */
  auditLog(q: AuditQuery = {}): AuditEntry[] {
    return this.core.audit.list(q);
  }

  // ---- providers and pools

  /** The default provider's name (spawns that name none run on it). */
  get providerName(): string {
    return this.core.providers.defaultName;
  }

  /** The names of the enabled providers. */
  providerNames(): string[] {
    return this.core.providers.names();
  }

  /** Every enabled provider: its health, whether it is the default, what isolates its sandboxes, how many run on it. */
  async providers(): Promise<ProviderStatus[]> {
    const running = this.core.sandboxes.list(["creating", "running", "paused"]);
    const reclaim = {
      memory_idle_reclaim: idleReclaimState(this.core.opts.memory?.reclaimAfterMs ?? DEFAULT_RECLAIM_AFTER_MS),
      memory_ksm: await ksmState(),
      prestarted_vmms: prestartState(this.core.prestarts.status()),
    };
    return Promise.all(
      this.core.providers.all().map(async (p) => ({
        ...(await p.health().then((h) => (p.features.isolation === "vm" && p.features.snapshots ? { ...h, details: { ...h.details, ...reclaim } } : h))),
        default: p.name === this.core.providers.defaultName,
        isolation: p.features.isolation,
        features: p.features,
        sandbox_count: running.filter((r) => this.core.providers.of(r) === p).length,
      })),
    );
  }

  /** Whether a provider (default: the default one) can run sandboxes here, and what it found; 404 for one not enabled. */
  providerHealth(name?: string): Promise<ProviderHealth> {
    const p = name === undefined ? this.core.providers.default : this.core.providers.find(name);
    if (!p) throw notFound(`provider ${name} not found (enabled: ${this.core.providers.names().join(", ")})`);
    return p.health();
  }

  /** A real probe of every provider: starts a throwaway sandbox (no disk) on each and pings its agent. */
  async testProviders(): Promise<Record<string, boolean>> {
    const out: Record<string, boolean> = {};
    for (const p of this.core.providers.all()) out[p.name] = await p.probe().catch(() => false);
    return out;
  }

  /** Pool mode's shared VMs, warm pools and prestarted VMMs, in the shape of the REST contract. */
  poolStatus(): Record<string, unknown> {
    return { ...(this.core.tenants?.status() ?? { enabled: false }), warm: this.warmPools(), prestarted: this.core.prestarts.status() };
  }

  /** The warm pools: which image or template each is for, how many VMs it keeps and has ready. */
  warmPools(): { pool: string; size: number; ready: number; memory_mb: number }[] {
    return this.core.warm.status().map(({ label, size, ready, memory_mb }) => ({ pool: label, size, ready, memory_mb }));
  }

  /**
   * (Re)sizes the warm pools from the config (default spawns) and the templates' `pool_size`.
   * Resolves once the pools are set; they fill in the background.
   */
  async configurePools(): Promise<void> {
    return configurePools(this.core, (ref) => this.pullImage(ref));
  }

  // ---- metrics

  /**
   * A sandbox's samples from `sinceMs` in buckets of `stepMs` (averages): host side (its VMM) and
   * guest side; full resolution for the last minutes, minute averages for a day. Stopped
   * sandboxes keep theirs; a destroyed one has none.
   */
  metricsHistory(idOrName: string, sinceMs: number, stepMs: number): { sandbox: string; samples: MetricSample[] } {
    const row = this.get(idOrName);
    return { sandbox: row.id, samples: this.core.metricStore.query(row.id, sinceMs, stepMs) };
  }

  /** The host's samples (CPU, memory, the data directory's disk, load), as metricsHistory. */
  hostMetricsHistory(sinceMs: number, stepMs: number): MetricSample[] {
    return this.core.metricStore.query(HOST_SERIES, sinceMs, stepMs);
  }

  /** The newest sample of the host and of each running sandbox, and how often they are taken. */
  latestMetrics(): { interval_ms: number; host: MetricSample | null; sandboxes: { id: string; name: string | null; image: string; sample: MetricSample }[] } {
    const latest = this.core.sampler.latest;
    const sandboxes = this.list()
      .filter((r) => latest.has(r.id))
      .map((r) => ({ id: r.id, name: r.name, image: r.image, sample: latest.get(r.id)!.sample }));
    return { interval_ms: this.metricsIntervalMs, host: latest.get(HOST_SERIES)?.sample ?? null, sandboxes };
  }

  /** How often the sampler samples, in ms. */
  get metricsIntervalMs(): number {
    return this.core.sampler.intervalMs;
  }

  /** Takes a sample of the host and every running sandbox now. */
  sampleMetrics(): Promise<void> {
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

  // Series of sandboxes destroyed while no server sampled are dropped at start; stopped ones keep theirs.
  private dropStaleSeries(): void {
    for (const id of this.core.metricStore.seriesIds()) {
      if (id === HOST_SERIES) continue;
      const row = this.core.sandboxes.get(id);
      if (!row || row.state === "destroyed" || row.state === "error") this.core.metricStore.drop(id);
    }
  }

  /** Stops the reaper and destroys every sandbox this process runs. */
  async close(): Promise<void> {
    if (this.core.closed) return;
    this.core.closed = true;
    if (this.reaper) clearInterval(this.reaper);
    await this.core.sampler.stop();
    await this.core.disk.stop();
    await this.environments.close();
    await this.buildJobs.closeAll();
    await this.core.warm.close();
    await this.core.prestarts.close();
    await this.core.tenants?.close();
    await Promise.all([...this.core.live.keys()].map((id) => this.closeOne(id)));
    for (const p of this.core.providers.all()) await p.destroyAll();
    await this.leaveCluster();
    this.core.egress.close();
    await this.restoreKsm?.();
    this.db.close();
    await this.ownership?.release();
  }

  // A sandbox whose main process has a restart policy is stopped (saved, disk kept) and the next
  // server start brings it back, so a service restart or a host reboot keeps it; the rest end here.
  private async closeOne(id: string): Promise<void> {
    const m = this.core.sandboxes.get(id)?.main;
    if (m && m.restart !== "no" && !m.stopped_by_user && this.reaper) {
      try {
        return await stopStart.stop(this.core, id, SHUTDOWN_STOP_GRACE_MS, false);
      } catch {
        // cannot be saved (secrets, a shared VM): it ends as any other
      }
    }
    await this.destroy(id);
  }

  /** Records where this process serves the API, so that CLI commands on this data directory find it. */
  announce(url: string): Promise<void> {
    return this.ownership?.announce(url) ?? Promise.resolve();
  }
}
