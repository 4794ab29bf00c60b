// What a Forge and its spawns, forks and restores can be asked for: the options every
// interface (library, CLI, REST) fills in.
import type { BuiltInImages } from "../images/built-in.js";
import type { MetricsOptions } from "./metrics/sampler.js";
import type { ExtraProviders } from "../providers/registry.js";
import type { Credentials } from "../images/registry.js";
import { DEFAULT_IMAGE } from "../images/store.js";
import type { AccelMode } from "../providers/qemu/accel.js";
import type { GuestLimits, Provider } from "../providers/provider.js";
import type { NetworkMode } from "./network.js";
import type { Sandbox } from "./guest/sandbox.js";

export interface ForgeOptions {
  /** Host directories (and what is below them) sandboxes may mount; none unless listed. */
  hostDirs?: string[];
  /** The host's ssh agent socket that sandboxes spawned with `forward: ["ssh-agent"]` use (none: they are refused). */
  sshAgentSocket?: string;
  /** Data directory (default: $FORGEVM_DATA_DIR or the XDG data directory). */
  dataDir?: string;
  accel?: AccelMode;
  /** SQLite file; default `<dataDir>/forgevm.db`. */
  dbPath?: string;
  /** Defaults for spawns that leave fields out. */
  defaults?: Partial<SpawnDefaults>;
  /** Check expiries every this many ms (0 disables the reaper; default 1000). */
  reapIntervalMs?: number;
  /** How long rows of destroyed sandboxes are kept (default 7 days). */
  historyRetentionMs?: number;
  /** Send running guests the host's time every this many ms (sandboxes/clock.ts; default 30 s; 0: never, for measuring the guests' own clocks). */
  clockEveryMs?: number;
  /**
   * Idle memory reclaim: a sandbox unused this long drops its clean page cache for free page
   * reporting to give back (0: never; default 10 min). `ksm` turns the host's same-page merging on
   * while the server runs (host-wide; off unless asked).
   */
  memory?: { reclaimAfterMs?: number; ksm?: boolean };
  /** Environment builds (core/environments/): where packages come from, and the builds' limits. */
  environments?: EnvironmentOptions;
  /** Registry logins from the config, by registry host; ~/.docker/config.json is the fallback. */
  registryAuth?: Record<string, Credentials>;
  /** Images it builds itself when a spawn first names one (the system images; `forgevm serve` gives it setup's builder). */
  builtInImages?: BuiltInImages;
  /** Restore spawns from base snapshots made at each image's first boot (default true). */
  baseSnapshots?: boolean;
  /**
   * VMMs kept started ahead, state loaded and guest held, for each of the base snapshots spawns
   * restored last (default 0 here; the server's config defaults to 1).
   */
  prestart?: number;
  /**
   * Warm pool for spawns with default settings (`size` VMs kept restored and ready), and the
   * memory all warm pools together may hold. Templates set their own size with `pool_size`.
   */
  warmPool?: { size?: number; memoryBudgetMb?: number };
  /** Pool mode: spawns without a template become users in shared VMs (the ForgeVM API's `pool:` section). */
  pool?: PoolModeOptions;
  network?: NetworkOptions;
  /** Limits inside every guest on what its sandbox runs (processes, memory kept for the agent). */
  guestLimits?: GuestLimits;
  /** Confine each QEMU (own uid and namespaces); default: when running as root. False is for baselines. */
  jail?: boolean;
  /** The VM provider (default: QEMU on this data directory, with the options above). */
  provider?: Provider;
  /** The backends offered beside the VM provider (providers/registry.ts). */
  extraProviders?: ExtraProviders;
  /** The provider of spawns that name none (default: the VM provider). */
  defaultProvider?: string;
  /** Values of template secrets that a spawn does not pass, by name (the server's FORGEVM_SECRET_<NAME>). */
  hostSecrets?: Record<string, string>;
  /** The metrics sampler of a serving core (one whose reaper runs). */
  metrics?: MetricsOptions;
}

export interface NetworkOptions {
  /** Mode of spawns that name none and have no allowlist (default "none"). */
  default?: NetworkMode;
  /** Private or host networks the operator lets allowlisted sandboxes reach (CIDR or address). */
  allowPrivate?: string[];
  /** A JSON file of extra egress presets ({"@name": ["host", …]}). */
  presetsFile?: string;
  /**
   * The egress proxy resolves these names to these addresses without DNS, trusted as if the
   * operator allowed them (`network.hosts`: an internal service with no DNS entry; in tests, a
   * local server standing in for a public host).
   */
  hostsOverride?: Record<string, string>;
  /** Allowlisted sandboxes use the package cache unless a spawn says otherwise. */
  cache?: boolean;
  /** The package cache's budget in MiB (least recently used files go first). */
  cacheMaxMb?: number;
  /** A PEM file of CAs the egress proxy trusts, besides the host's, for upstreams whose requests it reads. */
  upstreamCaFile?: string;
}

export interface PoolModeOptions {
  enabled: boolean;
  maxVms: number;
  maxUsersPerVm: number;
  /** Image of the shared VMs (default: the default image). */
  image?: string;
  memoryMb: number;
  vcpus: number;
  overflow: "reject" | "queue";
  queueTimeoutMs: number;
}

export interface SpawnDefaults {
  image: string;
  memoryMb: number;
  vcpus: number;
  diskMb: number;
  ttlMs: number;
  /** What a sandbox that names no idle policy does once idle (config `defaults.idle`). */
  idle?: IdlePolicy;
}

/** What a spawn gets for what it does not name (the config's `defaults` override them). */
export const SPAWN_DEFAULTS: SpawnDefaults = { image: DEFAULT_IMAGE, memoryMb: 512, vcpus: 1, diskMb: 2048, ttlMs: 30 * 60_000 };

/** What an idle sandbox does: `pause` (memory kept on disk, resumed by the next call), `stop` (disk kept), or `none`. */
export type IdleAction = "pause" | "stop" | "none";

/** After `afterMs` with nothing in flight (idle.ts says what counts), `action` happens. */
export interface IdlePolicy {
  afterMs: number;
  action: IdleAction;
}

export interface SpawnOptions {
  /** Image name; default DEFAULT_IMAGE. */
  image?: string;
  /** The provider to run it on: this server's own ("" or absent means that too). */
  provider?: string;
  memoryMb?: number;
  vcpus?: number;
  /** Writable disk size; the guest's root filesystem grows to fill it. */
  diskMb?: number;
  hostname?: string;
  /** Named volumes to mount: "NAME:/path" or "NAME:/path:ro" (a missing volume is created). */
  volumes?: string[];
  /** Credentials forwarded into it ("ssh-agent", "git"): guest/forwards.ts. Nothing unless asked. */
  forward?: string[];
  /** Boot the image's systemd as init, with the agent as its service (default: what the image says; docs/system-images.md). */
  system?: boolean;
  /** Allowlist mode: package files fetched over HTTP go through the host's package cache (default: the config's network.cache). */
  cache?: boolean;
  bootTimeoutMs?: number;
  /** Lifetime; the reaper destroys the sandbox when it passes. */
  ttlMs?: number;
  ownerId?: string;
  metadata?: Record<string, string>;
  /** Environment every exec in this sandbox gets (an exec's own env wins). */
  env?: Record<string, string>;
  /** A stored template whose fields fill in what these options leave out. */
  template?: string;
  /** Who execs run as by default: a user name or uid, or "image" for the image's USER (default root). */
  user?: string;
  /** Boot from the image even when a base snapshot could be restored (baselines, debugging). */
  coldBoot?: boolean;
  /** "none" (loopback only), "allowlist" (listed hosts through the host's proxy) or "full" (a network device onto the internet, never the host); default from config. */
  network?: string;
  /** Egress allowlist: hostnames, *.domains, IPs/CIDRs with optional :port, and @presets. */
  allow?: string[];
  /**
   * Allowlist mode: headers the egress proxy adds to requests per destination, with secrets by
   * placeholder (`{"api.openai.com": {"headers": {"Authorization": "Bearer {{OPENAI_KEY}}"}}}`).
   * The values stay on the host; each destination must be on the allowlist.
   */
  egressRules?: Record<string, { headers: Record<string, string> }>;
  /** Allowlist mode: open egress to every public destination but these addresses and CIDR networks. */
  deny?: string[];
  /** Port traffic this server serves by Host (E2B's getHost): whether it needs the traffic token, and the Host the guest sees. */
  portAccess?: { private?: boolean; maskHost?: string };
  /** Published ports, "HOST:GUEST" or "ADDRESS:HOST:GUEST" (bound to 127.0.0.1 by default). */
  ports?: string[];
  /** Secret values: in every exec's environment and in /run/secrets/NAME, never stored. */
  secrets?: Record<string, string>;
  /** A name usable wherever its id is (unique among sandboxes not yet gone). */
  name?: string;
  /** Run a main process (the image's ENTRYPOINT with `command`, else its CMD) under a restart policy. */
  main?: { command?: string[]; restart?: string };
  /** Stop it (disk kept) after this long without exec, file calls or published-port traffic: `idle` with action `stop`. */
  idleStopMs?: number;
  /** What it does once idle that long (default: the config's `defaults.idle`, else nothing). */
  idle?: IdlePolicy;
  /**
   * Keep its RAM in a file of its own, so that a fork stops it only to copy that file (children
   * then share the copy's pages) and a pause hands the file over instead of writing it out.
   * Costs its RAM's sharing with the base snapshot (see docs/benchmarks.md). Default: its template's, else false.
   */
  forkable?: boolean;
  /** A desktop sandbox's screen (the desktop image): its size and DPI, set once it runs. */
  screen?: { width: number; height: number; dpi?: number };
  /** A key its client sends with every try of this create: a sandbox already made with it is returned, not made again. */
  idempotencyKey?: string;
  /** At its expiry pause it instead of destroying it; with `autoResume`, a call for it while paused wakes it to live `resumeTtlMs`. */
  lifecycle?: { onExpiry: "destroy" | "pause"; autoResume?: boolean; resumeTtlMs?: number; pauseMemory?: boolean };
}

export interface EnvironmentOptions {
  /** A PEP 503 "simple" index (default https://pypi.org/simple/). */
  pythonIndex?: string;
  /** sources.list lines apt uses instead of the image's own. */
  aptSources?: string[];
  /** More allowlist entries for build steps. */
  allow?: string[];
  /** Builds running at once; the rest wait as "queued" (default 1). */
  concurrency?: number;
  /** Memory of each build sandbox (default 1024). */
  memoryMb?: number;
  /** The key registry secrets are sealed with (default <data>/keys/environments.key, made on first use). */
  secretKeyFile?: string;
}

export interface ForkOptions {
  /** How many copies (1..MAX_FORK, default 1). */
  count?: number;
  /** Restores only: network and allowlist of the copies (default: the snapshot's source's). */
  network?: string;
  allow?: string[];
  /** Lifetime of each copy; default: what the source has left (fork) or the default TTL (restore). */
  ttlMs?: number;
  ownerId?: string;
  metadata?: Record<string, string>;
  /** Each copy keeps its RAM in a file of its own (see SpawnOptions.forkable); default false: copies share the snapshot's pages. */
  forkable?: boolean;
  /** Restores only: what each copy does at its expiry (SpawnOptions.lifecycle). */
  lifecycle?: SpawnOptions["lifecycle"];
  /** Restores only: variables later execs get, over the snapshot's (processes running in it keep theirs). */
  env?: Record<string, string>;
}

export interface ForkResult {
  sandboxes: Sandbox[];
  /** How long the parent was paused, by QEMU's clock. */
  pauseMs: number;
  totalMs: number;
  snapshotBytes: number;
}
