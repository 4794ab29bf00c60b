// The composition root: claims a data directory, builds the providers, the stores and the
// services of the core context, the facades over it, and what runs in the background of a
// serving core (the reaper, the sampler, the disk watch); and takes all of it down again. The
// rest of core receives what it needs from here and builds nothing of its own.
import { mkdir, stat } from "node:fs/promises";
import { isIP } from "node:net";
import { join } from "node:path";
import { installTrust } from "./guest/trust.js";
import { makeEgress } from "./egress.js";
import type { Secrets } from "./secrets/secrets.js";
import { defaultDataDir, pathsFor, type Paths } from "../config/paths.js";
import { BlobStore } from "../images/blobs.js";
import { ext4Has } from "../images/ext4.js";
import { resolveImage } from "../images/store.js";
import { BLOCKED_V4 } from "../net/addresses.js";
import { loadPresets } from "../net/allowlist.js";
import { QemuProvider } from "../providers/qemu/qemu-provider.js";
import { makeExtraProviders } from "../providers/registry.js";
import { AuditStore } from "../store/audit.js";
import { Catalogue } from "../store/catalogue.js";
import { openDb, type Db } from "../store/db.js";
import { EventStore } from "../store/events.js";
import { MetricStore } from "../store/metrics.js";
import { SandboxStore } from "../store/sandboxes.js";
import { SnapshotStore } from "../store/snapshots.js";
import { TemplateStore } from "../store/templates.js";
import { VolumeStore } from "../store/volumes.js";
import { ignore } from "../util/ignore.js";
import { BuildCache } from "./builder/cache.js";
import { NodeMember, type NodeMemberOptions } from "./cluster/node-member.js";
import type { Core } from "./core.js";
import { DiskSpace } from "./host/disk-space.js";
import { openEnvironments, type Environments } from "./environments/index.js";
import { EventBus } from "./events.js";
import { BuildsFacade } from "./facades/builds.js";
import { AuditFacade, EventsFacade } from "./facades/events.js";
import { ImagesFacade } from "./facades/images.js";
import { MetricsFacade } from "./facades/metrics.js";
import { NetworkFacade } from "./facades/network.js";
import { PoolsFacade, ProvidersFacade } from "./facades/providers.js";
import { SandboxesFacade, type ClusterLink } from "./facades/sandboxes.js";
import { SshFacade } from "./facades/ssh.js";
import { SnapshotsFacade } from "./facades/snapshots.js";
import { TemplatesFacade } from "./facades/templates.js";
import { VolumesFacade } from "./facades/volumes.js";
import { HostDirs } from "./host-dirs/host-dirs.js";
import { Forwards } from "./guest/forwards.js";
import { hostCredentialFill } from "./guest/git-credentials.js";
import { enableKsm } from "./host/host-memory.js";
import { Images } from "./images/images.js";
import { ServerMetrics } from "./metrics/prometheus.js";
import { MetricsSampler } from "./metrics/sampler.js";
import { Networks } from "./network.js";
import { SPAWN_DEFAULTS, type ForgeOptions } from "./options.js";
import { claimDataDir, type Ownership } from "./host/owner.js";
import { makePoolHost } from "./sandboxes/pool-mode.js";
import { PRESTART_BASES, Prestarts } from "./pools/prestart.js";
import { Providers } from "./providers.js";
import type { TakeBackReport } from "./sandboxes/recovery.js";
import { Snapshots } from "./snapshots/snapshots.js";
import { type Build, Planner, type Pull } from "./sandboxes/plan.js";
import { makeOperations, type Operations } from "./operations.js";
import { snapshotsInUse } from "./sandboxes/spawn.js";
import type { OnStop, StopReport } from "./sandboxes/server-stop.js";
import { TenantPool } from "./pools/tenant-pool.js";
import { Tokens } from "./sandboxes/tokens.js";
import { SandboxTable } from "./sandboxes/table.js";
import { Volumes } from "./volumes.js";
import { WarmPools } from "./pools/warm-pool.js";

/** The operations every interface calls, by responsibility. */
export interface Facades {
  readonly sandboxes: SandboxesFacade;
  readonly network: NetworkFacade;
  readonly snapshots: SnapshotsFacade;
  readonly templates: TemplatesFacade;
  readonly images: ImagesFacade;
  readonly builds: BuildsFacade;
  readonly volumes: VolumesFacade;
  readonly events: EventsFacade;
  readonly audit: AuditFacade;
  readonly providers: ProvidersFacade;
  readonly pools: PoolsFacade;
  readonly metrics: MetricsFacade;
  readonly ssh: SshFacade;
  readonly secrets: Secrets;
}

/** An opened core: its facades, and what the hub does beyond them. */
export interface OpenedCore {
  readonly paths: Paths;
  readonly defaults: Core["defaults"];
  readonly environments: Environments;
  readonly facades: Facades;
  joinCluster(o: { database: string } & NodeMemberOptions): Promise<void>;
  announce(url: string): Promise<void>;
  /** What this core took back from the server before it (sandboxes/recovery.ts). */
  tookBack(): TakeBackReport;
  /** Stops the background work and, as `mode` says, leaves, pauses or destroys the sandboxes (sandboxes/server-stop.ts). */
  close(mode?: OnStop): Promise<StopReport>;
}

/**
 * Opens ForgeVM on a data directory that ./setup.sh has prepared. One process at a time may
 * have it open: another one is refused with a DataDirInUseError naming the owner.
 */
export async function openCore(opts: ForgeOptions = {}): Promise<OpenedCore> {
  const paths = pathsFor(opts.dataDir ?? defaultDataDir());
  await mkdir(paths.dataDir, { recursive: true });
  const ownership = await claimDataDir(paths.dataDir);
  try {
    return await openOwned(paths, opts, ownership);
  } catch (e) {
    await ownership.release();
    throw e;
  }
}

/** The providers the options enable: QEMU (or the one given) first and default unless named. */
function makeProviders(paths: Paths, opts: ForgeOptions): Providers {
  const vms =
    opts.provider ??
    new QemuProvider({
      paths,
      accel: opts.accel,
      guestLimits: opts.guestLimits,
      jail: opts.jail,
      // Resumes take VMMs started ahead as spawns from a base do (snapshots.prestart).
      blanksPerShape: opts.baseSnapshots === false ? 0 : (opts.prestart ?? 0),
      firewall: { blockedV4: BLOCKED_V4.map(([a, p]) => `${a}/${p}`), allowV4: (opts.network?.allowPrivate ?? []).filter((c) => isIP(c.split("/")[0]) === 4) },
    });
  return new Providers([vms, ...makeExtraProviders(paths, opts.extraProviders)], opts.defaultProvider ?? vms.name);
}

async function openOwned(paths: Paths, opts: ForgeOptions, ownership: Ownership): Promise<OpenedCore> {
  const db = openDb(opts.dbPath ?? join(paths.dataDir, "forgevm.db"));
  const blobs = new BlobStore(paths.blobsDir);
  const buildCache = new BuildCache(join(paths.dataDir, "build-cache"), blobs);
  const cluster: ClusterLink = { member: null };
  // The services' few calls back into the operations (a port's connection wakes a paused sandbox;
  // the disk's room back settles sandboxes lost meanwhile) are bound here, once both exist.
  const core = makeCore(paths, makeProviders(paths, opts), db, opts, {
    keepBlobs: () => buildCache.layers(),
    blobs,
    wakeForPort: (id) => ops.pauses.wake(id, "port", true),
    markLost: (reason) => ops.lifecycle.markLost(reason),
  });
  const ops = makeOperations(core);
  const facades = makeFacades(core, ops, { blobs, buildCache, tokens: new Tokens(paths.dataDir), cluster });
  const environments = openEnvironments({
    db,
    dataDir: paths.dataDir,
    options: opts.environments ?? {},
    operatorSecrets: opts.hostSecrets ?? {},
    provider: () => core.providers.default.name,
    scratchDir: paths.dataDir,
    build: (dir, o, report, signal) => facades.builds.run(dir, o, report, signal),
    push: (image, reference, login, log) => facades.images.push(image, reference, log, undefined, login),
    imageHas: async (image, files) => {
      const found = await resolveImage(paths, image).catch(() => null);
      return found ? ext4Has(found.rootfs, files) : null;
    },
    imageBytes: async (image) => {
      const st = await stat((await resolveImage(paths, image)).rootfs);
      return st.blocks * 512;
    },
  });

  let reaper: NodeJS.Timeout | null = null;
  // Puts the host's KSM back as it was before this server turned it on (config memory.ksm).
  let restoreKsm: (() => Promise<void>) | null = null;
  let leaveCluster = async () => {};
  const opened: OpenedCore = {
    paths,
    tookBack: () => tookBack,
    defaults: core.defaults,
    environments,
    facades,
    async joinCluster(o) {
      const catalogue = await Catalogue.open(o.database);
      const member = new NodeMember(facades, catalogue, o);
      try {
        await member.start();
      } catch (e) {
        member.stop();
        await catalogue.close();
        throw e;
      }
      cluster.member = member;
      leaveCluster = async () => {
        member.stop();
        await catalogue.close();
      };
    },
    announce: (url) => ownership.announce(url),
    async close(mode = "destroy") {
      if (core.table.closed) return { kept: [], paused: [], stopped: [], destroyed: [] };
      core.table.close();
      if (reaper) clearInterval(reaper);
      await core.sampler.stop();
      await core.disk.stop();
      await environments.close();
      await facades.builds.closeAll();
      await core.warm.close();
      await core.prestarts.close();
      await core.tenants?.close();
      // Only a serving core leaves its sandboxes to the next one; a command's short-lived core ends them.
      const report = await ops.serverStop.stopSandboxes(reaper !== null ? mode : "destroy", (id, ending) => facades.sandboxes.destroy(id, ending.by, ending.reason));
      for (const p of core.providers.all()) await p.destroyAll();
      await leaveCluster();
      core.egress.close();
      await restoreKsm?.();
      db.close();
      await ownership.release();
      return report;
    },
  };

  const tookBack = await ops.recovery.reconcile();
  await core.snaps.collect(true);
  await facades.pools.configure();
  core.tenants?.prewarm();
  const every = opts.reapIntervalMs ?? 1000;
  if (every > 0) {
    reaper = setInterval(() => void ops.reaper.reap(), every);
    reaper.unref();
    // Host-wide, so only a serving core turns it on, and puts it back as it was when it closes.
    if (opts.memory?.ksm) restoreKsm = await enableKsm().catch(() => null);
    // A serving core (it reaps) resumes what its predecessor paused as it stopped, and applies
    // the restart policies of stopped sandboxes; a command's short-lived core does neither.
    await ops.recovery.resumeServerPaused(tookBack);
    void ops.stopStart.applyRestartPolicies();
    if (opts.metrics?.enabled !== false) {
      facades.metrics.dropStaleSeries();
      core.sampler.start();
    }
    core.disk.start();
  }
  return opened;
}

/** What the core's services take from beside the core: the blob store, the blobs the build cache keeps, and their calls into the operations. */
interface CoreParts {
  keepBlobs: () => Promise<string[]>;
  blobs: BlobStore;
  /** Resumes a paused sandbox a connection to one of its published ports reached. */
  wakeForPort: (id: string) => Promise<void>;
  /** Ends as `error` the sandboxes whose VM went while their end could not be written. */
  markLost: (reason: string) => Promise<void>;
}

/** Pulls an image, refused while the data directory is full: the one pull every operation of core uses. */
function pullWithRoom(core: Pick<Core, "disk" | "images">): Pull {
  return (ref) => {
    core.disk.require("a pull");
    return core.images.pull(ref);
  };
}

/** Builds one of the server's own images for a spawn where it can (else null), refused while the data directory is full. */
function buildWithRoom(core: Pick<Core, "disk" | "images">): Build {
  return (name) => {
    if (!core.images.canBuild(name)) return null;
    core.disk.require("an image build");
    return core.images.build(name);
  };
}

/** The stores and services of one core context, wired to each other. */
function makeCore(paths: Paths, providers: Providers, db: Db, opts: ForgeOptions, hooks: CoreParts): Core {
  const sandboxes = new SandboxStore(db);
  const snapshotRows = new SnapshotStore(db);
  const eventStore = new EventStore(db);
  const events = new EventBus(eventStore);
  const net = opts.network ?? {};
  const metricStore = new MetricStore(db);
  const sampler = new MetricsSampler(metricStore, () => core.table.live.values(), paths.dataDir, opts.metrics);
  const prom = new ServerMetrics({
    sampler,
    states: () => sandboxes.countByState(),
    imageOf: (id) => core.table.live.get(id)?.image,
    pools: () => core.warm.shown(),
  });
  events.subscribe(prom.onEvent);
  const { egress, secretStore, egressCa } = makeEgress(paths, db, opts, (d) => prom.egressDecision(d));
  const services: Omit<Core, "planner"> = {
    paths,
    opts,
    provider: providers.default,
    providers,
    defaults: { ...SPAWN_DEFAULTS, ...opts.defaults },
    sandboxes,
    templates: new TemplateStore(db),
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
      // A new connection to a published port wakes a paused sandbox (its first bytes wait in the
      // held channel until the guest runs again); while open, it keeps the sandbox from idling
      // but, as any follower, does not undo a pause made while it is open.
      (id) => {
        const end = (core.table.live.get(id) ?? core.table.sleeping.get(id))?.follow() ?? (() => {});
        if (core.table.sleeping.has(id)) void hooks.wakeForPort(id).catch(ignore("a failed wake leaves the sandbox paused; the connection's next try wakes it again"));
        return end;
      },
      !!net.cache,
      {
        trust: async (_id, vm) => installTrust(vm, await egressCa.certPem()),
        env: (id, env) => core.table.live.get(id)?.setNetworkEnv(env),
      },
    ),
    secretStore,
    volumes: new Volumes(join(paths.dataDir, "volumes"), new VolumeStore(db), sandboxes),
    hostDirs: new HostDirs(opts.hostDirs ?? [], sandboxes),
    forwards: new Forwards({
      sshAgentSocket: opts.sshAgentSocket,
      gitHelper: paths.gitCredentialHelper,
      fill: hostCredentialFill(),
      egressAllows: (id, host, port) => core.networks.allowsHost(id, host, port),
      refused: (id, why) => console.error(`forgevm: sandbox ${id}: ${why}`),
    }),
    warm: new WarmPools(opts.warmPool?.memoryBudgetMb ?? 2048, events.emit),
    prestarts: new Prestarts(opts.baseSnapshots === false ? 0 : (opts.prestart ?? 0), PRESTART_BASES, events.emit),
    snaps: new Snapshots({ paths, provider: providers.default, store: snapshotRows, events, inUse: () => snapshotsInUse(core), restoredFrom: () => snapshotsInUse(core, true) }),
    images: new Images({
      paths,
      blobs: hooks.blobs,
      events,
      registryAuth: opts.registryAuth,
      builtIn: opts.builtInImages,
      sandboxesUsing: (image) => sandboxes.list(["creating", "running"]).flatMap((r) => (r.image === image ? [r.id] : [])),
      snapshotsUsing: (image) => snapshotRows.list(["ready"]).flatMap((r) => (r.image === image && r.kind !== "base" ? [r.name ?? r.id] : [])),
      dropBases: (image) => core.snaps.dropBases((r) => r.image === image),
      keepBlobs: hooks.keepBlobs,
    }),
    tenants: opts.pool?.enabled ? new TenantPool(opts.pool, () => makePoolHost(core), events.emit) : null,
    table: new SandboxTable(),
    disk: new DiskSpace(paths.dataDir, {
      vms: () => [...core.table.live.values()].map((sb) => ({ id: sb.id, vm: sb.vm })),
      failFileOps: (id, err) => void core.table.live.get(id)?.vm.guest.failFileOps(err),
      onRoom: async () => {
        events.flush();
        await hooks.markLost("its VM went away while the server's disk was full");
      },
      log: (line) => console.error(`forgevm: ${line}`),
    }),
  };
  // Plans pull what they name and is not local: refused while the data directory is full.
  const core: Core = { ...services, planner: new Planner({ ...services, pull: pullWithRoom(services), build: buildWithRoom(services) }) };
  return core;
}

/** What the facades need beyond the core context and its operations. */
interface FacadeParts {
  blobs: BlobStore;
  buildCache: BuildCache;
  tokens: Tokens;
  cluster: ClusterLink;
}

/** The facades over one core context, each given the others' operations it calls as narrow hooks. */
function makeFacades(core: Core, ops: Operations, p: FacadeParts): Facades {
  const sandboxes = new SandboxesFacade({ ...core, ...ops }, { tokens: p.tokens, cluster: p.cluster });
  const images = new ImagesFacade(core, {
    blobs: p.blobs,
    sandboxes,
    spawnHelper: (image) => sandboxes.spawn({ image, network: "none", ttlMs: 15 * 60_000, metadata: { "forgevm.helper": "image-files" } }),
    destroy: (id) => sandboxes.destroy(id, "server"),
  });
  return {
    sandboxes,
    network: new NetworkFacade(core, sandboxes),
    snapshots: new SnapshotsFacade({ ...core, copies: ops.copies }, sandboxes),
    templates: new TemplatesFacade(core.templates, ops.templateOps),
    images,
    builds: new BuildsFacade(core, { cache: p.buildCache, images, spawn: (o) => sandboxes.spawn(o) }),
    volumes: new VolumesFacade(core, sandboxes),
    events: new EventsFacade(core),
    audit: new AuditFacade(core),
    providers: new ProvidersFacade(core),
    pools: new PoolsFacade({ ...core, spawner: ops.spawner }),
    metrics: new MetricsFacade(core, sandboxes),
    ssh: new SshFacade(core.paths.sshServer, sandboxes),
    secrets: core.secretStore,
  };
}
