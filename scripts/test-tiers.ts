// Which tier each test file is in (the folder of test/ it lives in), and which files are kept
// apart from the shared phase. `npm test` runs the tiers in order (unit first, so that a broken build fails in seconds),
// two files at a time except those kept apart; `npm run test:unit` runs the unit tier
// only. A test file outside a tier folder fails test/unit/layers.test.ts. docs/testing.md says how
// long each tier takes.
import { readdirSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

/** The tiers, in the order they run, each with what its files may do. A test file's tier is the folder of test/ it lives in. */
export const TIER_NAMES = {
  /** No VM, no server process: pure functions, parsers, the C agent under ASan, static checks. */
  unit: "test/unit",
  /** HTTP behaviour: servers over a core, the local provider, or no sandbox at all where a VM adds nothing. */
  api: "test/api",
  /** Real VMs: everything whose behaviour is the VM's. */
  vm: "test/vm",
  /** A PostgreSQL of their own and several servers: the cluster. */
  cluster: "test/cluster",
} as const;

export type Tier = keyof typeof TIER_NAMES;

const repo = fileURLToPath(new URL("../../", import.meta.url));

/** The test files of each tier, by name (`test/vm/e2b.test.ts` is "e2b" of vm), read from its folder. */
export const TIERS: Record<Tier, string[]> = Object.fromEntries(
  (Object.keys(TIER_NAMES) as Tier[]).map((t) => [
    t,
    readdirSync(join(repo, TIER_NAMES[t]))
      .filter((f) => f.endsWith(".test.ts"))
      .map((f) => f.replace(/\.test\.ts$/, ""))
      .sort(),
  ]),
) as Record<Tier, string[]>;

/**
 * Seconds of test time per file in a measured clean-clone run (2026-12-06, 2 cores, TCG), for the
 * files of the shared phases. The runner starts each phase's files longest first, so that its two
 * lanes end close together instead of one long file running alone at the end, and the short files
 * fill the gaps last (longest-processing-time order). Only the order depends on these figures; a
 * file not listed counts as UNLISTED_SECONDS.
 */
export const FILE_SECONDS: Record<string, number> = {
  environments: 173,
  // With its image built, which the runner starts ahead of the phase (two minutes of debootstrap on a fresh machine).
  "system-image": 120,
  // It takes about 200 s, and is listed lower so that it starts once its image, built ahead after
  // the system image (three more minutes of one core at the lowest priority), is likely ready.
  desktop: 61,
  snapshots: 130,
  e2b: 119,
  "pause-cycles": 100,
  "sdk-python": 93,
  commit: 90,
  workloads: 77,
  recovery: 76,
  network: 73,
  build: 68,
  api: 65,
  frameworks: 64,
  "egress-secrets": 61,
  projects: 75,
  "npm-install": 100,
  ssh: 45,
  images: 60,
  "e2b-templates": 59,
  daytona: 55,
  "sdk-typescript": 47,
  "package-cache": 45,
  mcp: 43,
  reclaim: 39,
  "e2b-code": 37,
  readme: 35,
  tui: 32,
  "qemu-provider": 30,
  registry: 29,
  vm: 28,
  volumes: 27,
  secrets: 26,
  clock: 23,
  balloon: 17,
  forward: 15,
  "git-forward": 20,
  "server-process": 23,
  "full-disk": 22,
  standby: 21,
  providers: 20,
  metrics: 20,
  "e2b-mcp": 19,
  failures: 19,
  "daytona-sdks": 19,
  service: 18,
  "snapshot-transfer": 18,
  validation: 17,
  "pool-mode": 17,
  "remote-provider": 15,
  "custom-http": 15,
  "warm-pool": 14,
  uploads: 12,
  "vmm-jail": 11,
  "e2b-provider": 10,
  "host-dirs": 10,
  code: 9,
  "api-errors": 6,
  prestart: 6,
  "connection-limits": 4,
  catalogue: 4,
  "local-provider": 4,
  lifecycle: 3,
  "api-auth": 2,
  "setup-guide": 22,
  "cli-json": 7,
  browser: 2,
  setup: 1,
  deploy: 1,
};

/** What a file missing from FILE_SECONDS counts as: mid-sized, so a new heavy file does not start last. */
export const UNLISTED_SECONDS = 30;

/**
 * Files kept apart from the shared phase, each for a reason that phase's load would break:
 * deadlines that two busy files beside it push it past. They run two at a time among themselves,
 * in this order (the first two together, the third when one of them ends: `console` and `limits`
 * are the lightest pair, and `cluster` then has little beside it), which neither of them breaks:
 * apart, the three took 78–84 s against 111–123 s one after another. (Files that wait on timers of their own sandboxes
 * (`standby`'s idle pauses, `reclaim`'s memory given back, `metrics`' samples) run beside others:
 * a neighbour slows those timers, and their waits allow for it, but changes nothing they assert.)
 */
export const APART: Record<string, string> = {
  console: "drives Chromium, whose start-up and timings another file's VMs slow past its deadlines",
  limits: "asserts that another sandbox answers within 5 s while a fork bomb runs",
  cluster: "starts a PostgreSQL and several servers that place sandboxes by the host's free memory, against heartbeat timeouts",
};

/**
 * Files that change host state an ordinary file depends on, or read it whole: they run after the
 * others, two at a time among themselves, since none of them reads what another of them changes
 * (only `network` gives VMMs a network device, installs the host's firewall chain or adds a
 * route; the others' VMs have no network device, and each finds only its own VMMs).
 */
export const HOST_STATE: Record<string, string> = {
  network: "installs and flushes the host's iptables chain for VMMs with a network device, and adds a route",
  "vmm-jail": "inspects VMM processes, their uids and cgroups",
  "full-disk": "loop-mounts a filesystem and fills it",
  recovery: "kills servers and finds their VMM processes again by the host's process table",
  catalogue: "starts a PostgreSQL of its own",
  deploy: "starts a PostgreSQL of its own",
};
