// Which tier each test file is in, and which files must run alone. `npm test` runs the tiers in
// order (unit first, so that a broken build fails in seconds), two files at a time except those
// that must run alone; `npm run test:unit` runs the unit tier only. A test file in no tier fails
// test/layers.test.ts. docs/testing.md says how long each tier takes.

/** The tiers, in the order they run. */
export const TIERS = {
  /** No VM, no server process: pure functions, parsers, the C agent under ASan, static checks. */
  unit: [
    "adopt",
    "agent-c",
    "allowlist",
    "channel",
    "config",
    "contract",
    "dockerfile",
    "docs-names",
    "egress-inject",
    "egress-proxy",
    "flatten",
    "frame",
    "host-tree",
    "image-diff",
    "layers",
    "log-caps",
    "mcp-policy",
    "qemu-args",
    "shell-markers",
    "wire",
  ],
  /** HTTP behaviour: servers over a core, the local provider, or no sandbox at all where a VM adds nothing. */
  api: ["api-auth", "connection-limits", "local-provider", "setup"],
  /** Real VMs: everything whose behaviour is the VM's. */
  vm: [
    "api",
    "api-errors",
    "browser",
    "build",
    "code",
    "commit",
    "console",
    "custom-http",
    "daytona",
    "daytona-sdks",
    "e2b",
    "e2b-code",
    "e2b-mcp",
    "e2b-provider",
    "e2b-templates",
    "egress-secrets",
    "environments",
    "failures",
    "frameworks",
    "full-disk",
    "host-dirs",
    "images",
    "lifecycle",
    "clock",
    "limits",
    "mcp",
    "metrics",
    "network",
    "package-cache",
    "pause-cycles",
    "pool-mode",
    "prestart",
    "providers",
    "qemu-provider",
    "readme",
    "reclaim",
    "recovery",
    "registry",
    "remote-provider",
    "sdk-python",
    "sdk-typescript",
    "secrets",
    "server-process",
    "service",
    "snapshot-transfer",
    "snapshots",
    "standby",
    "tui",
    "uploads",
    "validation",
    "vm",
    "vmm-jail",
    "volumes",
    "warm-pool",
    "workloads",
  ],
  /** A PostgreSQL of their own and several servers: the cluster. */
  cluster: ["catalogue", "cluster", "deploy"],
} as const;

export type Tier = keyof typeof TIERS;

/**
 * The files that take longest (over a minute of test time each under TCG), longest first. The
 * runner starts them before the others, so that the two lanes of a phase end close together
 * instead of one long file running alone at the end. Only the order depends on this list.
 */
export const LONGEST = ["environments", "snapshots", "e2b", "api", "sdk-python", "commit", "workloads", "pause-cycles", "egress-secrets"];

/**
 * Files that run alone, each for a reason another file running beside it would break: host state
 * they change or read whole, or timings they measure.
 */
export const ALONE: Record<string, string> = {
  network: "installs and flushes the host's iptables chain for VMMs with a network device",
  "vmm-jail": "inspects the host's VMM processes and their uids",
  console: "drives Chromium, whose start-up and timings another file's VMs slow past its deadlines",
  tui: "drives the terminal UI in a pseudo-terminal against timings",
  standby: "measures idle timers and resume times",
  reclaim: "measures a guest's memory given back to the host",
  metrics: "samples the host's CPU and memory, which another file's VMs change",
  "full-disk": "fills a filesystem and watches the server's disk-space refusals",
  limits: "asks for what the host has (memory, vCPUs) and measures the VMs' share",
  recovery: "kills servers and finds their VMM processes again by the host's process table",
  catalogue: "starts a PostgreSQL of its own",
  cluster: "starts a PostgreSQL and several servers that place sandboxes by the host's free memory",
  deploy: "starts a PostgreSQL of its own",
};
