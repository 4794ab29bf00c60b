// Which tier each test file is in (the folder of test/ it lives in), and which files must run
// alone. `npm test` runs the tiers in order (unit first, so that a broken build fails in seconds),
// two files at a time except those that must run alone; `npm run test:unit` runs the unit tier
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
 * The files that take longest (over a minute of test time each under TCG), longest first. The
 * runner starts them before the others, so that the two lanes of a phase end close together
 * instead of one long file running alone at the end. Only the order depends on this list.
 */
export const LONGEST = ["environments", "snapshots", "e2b", "api", "sdk-python", "commit", "workloads", "pause-cycles", "egress-secrets"];

/**
 * Files that run alone, each for a reason another file running beside it would break: deadlines
 * that another file's load pushes them past. (Files that wait on timers of their own sandboxes
 * (`standby`'s idle pauses, `reclaim`'s memory given back, `metrics`' samples) run beside others:
 * a neighbour slows those timers, and their waits allow for it, but changes nothing they assert.)
 */
export const ALONE: Record<string, string> = {
  console: "drives Chromium, whose start-up and timings another file's VMs slow past its deadlines",
  tui: "drives the terminal UI in a pseudo-terminal against timings",
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
