// What a configuration may hold: the one TypeBox definition of forgevm.yaml's keys, which both
// the loader (config.ts) and the reading of the ForgeVM API's names (compat-config.ts) work on.
import { Type, type Static } from "typebox";
import { TemplateFields } from "../schemas/rest.js";
import { MEMORY_MB } from "../schemas/bounds.js";
import { DiskMb, MemoryMb, Vcpus } from "../schemas/fields.js";

// A template in the config file: the API's fields, less the server's timestamps.
const { created_at: _c, updated_at: _u, ...ConfigTemplateFields } = TemplateFields;

const strict = { additionalProperties: false } as const;

export const ConfigSchema = Type.Object(
  {
    data_dir: Type.String({ minLength: 1 }),
    server: Type.Object(
      {
        host: Type.String({ minLength: 1 }),
        port: Type.Integer({ minimum: 0, maximum: 65535 }),
        body_limit_mb: Type.Integer({ minimum: 1, maximum: 4096 }),
        request_log: Type.Boolean(),
        /** Web origins whose pages may call the API (none: same-origin only). */
        allowed_origins: Type.Array(Type.String({ minLength: 1 })),
        /** Host names a server on loopback answers to besides localhost/127.0.0.1/::1. */
        allowed_hosts: Type.Array(Type.String({ minLength: 1 })),
        /** A request's headers must all arrive within this (slow loris). */
        headers_timeout: Type.String({ minLength: 1 }),
        /** While a request arrives, its connection may go this long without a byte (slow body). */
        body_idle_timeout: Type.String({ minLength: 1 }),
        /** Connections still waiting for their first headers, at most; past it the longest-waiting is closed. */
        max_pending_connections: Type.Integer({ minimum: 1, maximum: 65536 }),
        /**
         * What a stop of the server does to its running sandboxes: "keep" leaves them running for
         * the next start to take back, "pause" pauses them to disk first (the next start resumes
         * them), "destroy" destroys them.
         */
        on_stop: Type.Union([Type.Literal("keep"), Type.Literal("pause"), Type.Literal("destroy")]),
      },
      strict,
    ),
    /** `enabled: false` (as ForgeVM API config files have it) turns the key off without removing it from the file. */
    auth: Type.Object({ enabled: Type.Boolean(), api_key: Type.String() }, strict),
    defaults: Type.Object(
      {
        image: Type.String({ minLength: 1 }),
        memory_mb: MemoryMb(),
        vcpus: Vcpus(),
        disk_mb: DiskMb(),
        ttl: Type.String({ minLength: 1 }),
        /** What sandboxes that name no idle policy do once idle (`{after: "10m", action: "pause"}`). */
        idle: Type.Optional(Type.Object({ after: Type.String({ minLength: 1 }), action: Type.Union([Type.Literal("pause"), Type.Literal("stop"), Type.Literal("none")]) }, strict)),
      },
      strict,
    ),
    exec: Type.Object({ max_output_bytes: Type.Integer({ minimum: 1024 }) }, strict),
    store: Type.Object({ history_retention: Type.String({ minLength: 1 }) }, strict),
    registries: Type.Record(Type.String({ minLength: 1 }), Type.Object({ username: Type.String(), password: Type.String() }, strict)),
    /** Templates the server keeps as written here (created, or replaced when they change), by name. */
    templates: Type.Record(Type.String({ pattern: "^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$" }), Type.Object(ConfigTemplateFields, strict)),
    /** Base snapshots for spawns (`base`), and VMMs kept started ahead for each base in use (`prestart`). */
    snapshots: Type.Object({ base: Type.Boolean(), prestart: Type.Integer({ minimum: 0, maximum: 8 }) }, strict),
    warm_pool: Type.Object({ size: Type.Integer({ minimum: 0, maximum: 64 }), memory_budget_mb: Type.Integer({ minimum: 0 }) }, strict),
    /** Idle memory reclaim (`reclaim_after`: "0" never) and the host's same-page merging (`ksm`, host-wide). */
    memory: Type.Object({ reclaim_after: Type.String({ minLength: 1 }), ksm: Type.Boolean() }, strict),
    pool: Type.Object(
      {
        enabled: Type.Boolean(),
        max_vms: Type.Integer({ minimum: 1, maximum: 256 }),
        max_users_per_vm: Type.Integer({ minimum: 1, maximum: 64 }),
        image: Type.String(),
        memory_mb: MemoryMb(),
        vcpus: Vcpus(),
        overflow: Type.Union([Type.Literal("reject"), Type.Literal("queue")]),
        queue_timeout: Type.String({ minLength: 1 }),
      },
      strict,
    ),
    limits: Type.Object(
      {
        pids_max: Type.Integer({ minimum: 16, maximum: 4194304 }),
        memory_reserve_mb: Type.Integer({ minimum: 0, maximum: 4096 }),
      },
      strict,
    ),
    network: Type.Object(
      {
        default: Type.Union([Type.Literal("none"), Type.Literal("allowlist"), Type.Literal("full")]),
        allow_private: Type.Array(Type.String({ minLength: 1 })),
        presets_file: Type.String(),
        /** Allowlisted sandboxes keep package files fetched over HTTP in a cache on the host. */
        cache: Type.Boolean(),
        /** The package cache's budget in MiB. */
        cache_max_mb: Type.Integer({ minimum: 16, maximum: 1048576 }),
        /** CAs (a PEM file) the egress proxy trusts, with the host's, for destinations whose requests it reads to add egress rules' headers. */
        upstream_ca_file: Type.String(),
        /** Names the egress proxy resolves to these addresses without DNS (an internal service with no DNS entry, as Docker's --add-host); the operator allows those addresses. */
        hosts: Type.Record(Type.String({ minLength: 1, maxLength: 253 }), Type.String({ pattern: "^[0-9A-Fa-f:.]{2,45}$", description: "an IPv4 or IPv6 address" })),
      },
      strict,
    ),
    /** Cluster mode (docs/scale-out.md): "standalone" (one machine), "node" (runs sandboxes, registers), "front" (routes to nodes, keeps nothing). */
    cluster: Type.Object(
      {
        role: Type.Union([Type.Literal("standalone"), Type.Literal("node"), Type.Literal("front")]),
        /** The catalogue: postgres://user@host:port/db. */
        database: Type.String(),
        /** A node: the address fronts reach it at (default: where it listens). */
        advertise: Type.String(),
        /** A node: its id in the catalogue (default: the host name and port). */
        node_id: Type.String(),
        heartbeat: Type.String({ minLength: 1 }),
        /** A node without a heartbeat this long is down, and its sandboxes lost. */
        node_timeout: Type.String({ minLength: 1 }),
      },
      strict,
    ),
    /** The sampler behind the console's charts, `forgevm stats` and /metrics. */
    metrics: Type.Object(
      {
        enabled: Type.Boolean(),
        /** Host-side samples of every sandbox this often ("5s"); guest-side every `guest_every` of them. */
        interval: Type.String({ minLength: 1 }),
        guest_every: Type.Integer({ minimum: 1, maximum: 60 }),
      },
      strict,
    ),
    /** Environment builds (`/environments`, docs/environments.md): where packages come from, and the builds' limits. */
    environments: Type.Object(
      {
        /** A PEP 503 "simple" index pip installs from. */
        python_index: Type.String({ minLength: 1 }),
        /** sources.list lines apt-get uses instead of the base image's own (e.g. a local mirror). */
        apt_sources: Type.Array(Type.String({ minLength: 1 })),
        /** More egress allowlist entries for build steps. */
        allow: Type.Array(Type.String({ minLength: 1 })),
        /** Builds that run at once; more wait as "queued". */
        concurrency: Type.Integer({ minimum: 1, maximum: 16 }),
        /** Each environment build VM's memory: at least 256 MiB, which pip and npm installs need. */
        memory_mb: Type.Integer({ minimum: 256, maximum: MEMORY_MB.maximum }),
        /** The key registry secrets are encrypted with (32 bytes); empty: <data_dir>/keys/environments.key, made on first use. */
        secret_key_file: Type.String(),
      },
      strict,
    ),
    /** Host directories sandboxes may mount (`-v /dir:/path`, `forgevm mount`): none unless listed. */
    mounts: Type.Object({ host_dirs: Type.Array(Type.String({ minLength: 1 })) }, strict),
    /** Credentials sandboxes may have forwarded (`forward` at spawn). `ssh_agent`: the host agent's socket; "" takes the server's SSH_AUTH_SOCK. */
    forward: Type.Object({ ssh_agent: Type.String() }, strict),
    /** The Daytona-compatible routes (/daytona). */
    daytona: Type.Object(
      {
        /**
         * Serve previews also as `<port>-<id>.<preview_domain>` (wildcard DNS pointing at this server),
         * and hand those out; "" keeps them paths under /daytona/preview. Must differ from e2b.domain.
         */
        preview_domain: Type.String({ maxLength: 253 }),
      },
      strict,
    ),
    /** The E2B-compatible routes. */
    e2b: Type.Object(
      {
        /**
         * The domain sandboxes' ports are served under, `<port>-<id>.<domain>` (E2B's getHost), with
         * an optional port; "" answers `localhost:<the server's port>`, which browsers and curl resolve.
         */
        domain: Type.String({ maxLength: 253 }),
      },
      strict,
    ),
    /** What agents on MCP (`forgevm mcp`, /mcp) may do: the operator's policy, which they can only narrow. */
    mcp: Type.Object(
      {
        /** Serve MCP at /mcp on `forgevm serve`. */
        enabled: Type.Boolean(),
        /** The widest network agents may ask for (none < allowlist < full). */
        network: Type.Union([Type.Literal("none"), Type.Literal("allowlist"), Type.Literal("full")]),
        /** With network "allowlist": the entries agents' allowlists must stay within (and the default). */
        allow: Type.Array(Type.String({ minLength: 1 })),
        max_sandboxes: Type.Integer({ minimum: 0, maximum: 10000 }),
        max_sandboxes_per_session: Type.Integer({ minimum: 0, maximum: 10000 }),
        max_memory_mb: MemoryMb(),
        max_vcpus: Vcpus(),
        max_ttl: Type.String({ minLength: 1 }),
        /** Images and templates agents may use ("*" wildcards); empty: any. */
        images: Type.Array(Type.String({ minLength: 1 })),
        /** Host directories upload and download may use; empty: none. */
        host_dirs: Type.Array(Type.String({ minLength: 1 })),
        /** How long an HTTP session may go without a request before it ends (and its sandboxes go). */
        session_idle: Type.String({ minLength: 1 }),
        /** Output an exec returns per stream; beyond it the head and tail are kept. */
        max_output_bytes: Type.Integer({ minimum: 1024, maximum: 16777216 }),
        /** The most read_file returns. */
        max_read_bytes: Type.Integer({ minimum: 1024, maximum: 67108864 }),
      },
      strict,
    ),
    providers: Type.Object(
      {
        default: Type.String({ minLength: 1 }),
        qemu: Type.Object({ accel: Type.Union([Type.Literal("auto"), Type.Literal("kvm"), Type.Literal("tcg")]), jail: Type.Boolean() }, strict),
        /** Sandboxes as Linux namespaces (bubblewrap), no VM: not a security boundary, so off unless enabled. */
        local: Type.Object({ enabled: Type.Boolean() }, strict),
        /** Another ForgeVM server that runs this one's sandboxes of provider "remote" (on when url is set). */
        remote: Type.Object({ url: Type.String(), api_key: Type.String() }, strict),
        /** An E2B-compatible service that runs this one's sandboxes of provider "e2b" (on when api_url is set). */
        e2b: Type.Object({ api_url: Type.String(), api_key: Type.String(), sandbox_url: Type.String(), domain: Type.String(), template: Type.String({ minLength: 1 }) }, strict),
        /** A backend of the ForgeVM Custom HTTP provider protocol that runs sandboxes of provider `name` (on when base_url is set; timeout: a duration or seconds). */
        custom: Type.Object(
          {
            base_url: Type.String(),
            api_key: Type.String(),
            timeout: Type.Union([Type.String({ minLength: 1 }), Type.Integer({ minimum: 1 })]),
            name: Type.String({ minLength: 1 }),
          },
          strict,
        ),
        /** The ForgeVM API's Firecracker section, so its forgevm.yaml loads: QEMU serves the sandboxes it names (compat-config.ts). */
        firecracker: Type.Object(
          { enabled: Type.Boolean(), firecracker_path: Type.String(), kernel_path: Type.String(), agent_path: Type.String(), data_dir: Type.String() },
          strict,
        ),
      },
      strict,
    ),
  },
  strict,
);
export type Config = Static<typeof ConfigSchema>;
