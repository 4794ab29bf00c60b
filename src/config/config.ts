// Server configuration: defaults, then forgevm.yaml (working directory) or
// ~/.forgevm/config.yaml, then FORGEVM_<SECTION>_<KEY> environment variables. Validated once at
// start; an unknown key or a bad value is an error that names it.
import { readFileSync } from "node:fs";
import { homedir } from "node:os";
import { join, resolve } from "node:path";
import { Type, type Static } from "typebox";
import { Value } from "typebox/value";
import { parse as parseYaml } from "yaml";
import { TemplateFields } from "../schemas/rest.js";
import { defaultDataDir } from "./paths.js";
import { seedCompat } from "./seed-config.js";

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
      },
      strict,
    ),
    /** `enabled: false` (the seed's) turns the key off without removing it from the file. */
    auth: Type.Object({ enabled: Type.Boolean(), api_key: Type.String() }, strict),
    defaults: Type.Object(
      {
        image: Type.String({ minLength: 1 }),
        memory_mb: Type.Integer({ minimum: 64, maximum: 65536 }),
        vcpus: Type.Integer({ minimum: 1, maximum: 64 }),
        disk_mb: Type.Integer({ minimum: 64 }),
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
        memory_mb: Type.Integer({ minimum: 64, maximum: 65536 }),
        vcpus: Type.Integer({ minimum: 1, maximum: 64 }),
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
        memory_mb: Type.Integer({ minimum: 256, maximum: 65536 }),
        /** The key registry secrets are encrypted with (32 bytes); empty: <data_dir>/keys/environments.key, made on first use. */
        secret_key_file: Type.String(),
      },
      strict,
    ),
    /** Host directories sandboxes may mount (`-v /dir:/path`, `forgevm mount`): none unless listed. */
    mounts: Type.Object({ host_dirs: Type.Array(Type.String({ minLength: 1 })) }, strict),
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
        max_memory_mb: Type.Integer({ minimum: 64, maximum: 65536 }),
        max_vcpus: Type.Integer({ minimum: 1, maximum: 64 }),
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
        /** The seed's Firecracker section, so its forgevm.yaml loads: QEMU serves the sandboxes it names (seed-config.ts). */
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

/** The port `forgevm serve` listens on unless the config says otherwise. */
export const DEFAULT_PORT = 7423;

export function defaultConfig(env: NodeJS.ProcessEnv = process.env): Config {
  return {
    data_dir: defaultDataDir(env),
    server: {
      host: "127.0.0.1",
      port: DEFAULT_PORT,
      body_limit_mb: 256,
      request_log: true,
      allowed_origins: [],
      allowed_hosts: [],
      headers_timeout: "10s",
      body_idle_timeout: "60s",
      max_pending_connections: 256,
    },
    auth: { enabled: true, api_key: "" },
    defaults: { image: "forgevm/debian:bookworm", memory_mb: 512, vcpus: 1, disk_mb: 2048, ttl: "30m" },
    exec: { max_output_bytes: 16 * 1024 * 1024 },
    store: { history_retention: "168h" },
    registries: {},
    templates: {},
    snapshots: { base: true, prestart: 1 },
    warm_pool: { size: 0, memory_budget_mb: 2048 },
    memory: { reclaim_after: "10m", ksm: false },
    pool: { enabled: false, max_vms: 10, max_users_per_vm: 5, image: "", memory_mb: 2048, vcpus: 2, overflow: "reject", queue_timeout: "30s" },
    limits: { pids_max: 1024, memory_reserve_mb: 48 },
    network: { default: "none", allow_private: [], presets_file: "", cache: false, cache_max_mb: 2048 },
    mounts: { host_dirs: [] },
    environments: { python_index: "https://pypi.org/simple/", apt_sources: [], allow: [], concurrency: 1, memory_mb: 1024, secret_key_file: "" },
    metrics: { enabled: true, interval: "5s", guest_every: 3 },
    cluster: { role: "standalone", database: "", advertise: "", node_id: "", heartbeat: "2s", node_timeout: "10s" },
    mcp: {
      enabled: true,
      network: "full",
      allow: [],
      max_sandboxes: 20,
      max_sandboxes_per_session: 5,
      max_memory_mb: 4096,
      max_vcpus: 4,
      max_ttl: "2h",
      images: [],
      host_dirs: [],
      session_idle: "30m",
      max_output_bytes: 65536,
      max_read_bytes: 1048576,
    },
    providers: {
      default: "qemu",
      qemu: { accel: "auto", jail: true },
      local: { enabled: false },
      remote: { url: "", api_key: "" },
      e2b: { api_url: "", api_key: "", sandbox_url: "", domain: "", template: "base" },
      firecracker: { enabled: false, firecracker_path: "/usr/local/bin/firecracker", kernel_path: "", agent_path: "", data_dir: "" },
    },
  };
}

export class ConfigError extends Error {
  override name = "ConfigError";
}

function merge(into: any, from: any, where: string): void {
  if (from === null || from === undefined) return;
  if (typeof from !== "object" || Array.isArray(from)) throw new ConfigError(`${where || "config"} must be a mapping`);
  for (const [k, v] of Object.entries(from)) {
    const key = where ? `${where}.${k}` : k;
    if (where === "registries" || where === "templates") {
      into[k] = v; // a map of registry host → login, or name → template; checked by the schema below
      continue;
    }
    if (!(k in into)) throw new ConfigError(`unknown config key "${key}"`);
    if (typeof into[k] === "object" && into[k] !== null && !Array.isArray(into[k])) merge(into[k], v, key);
    else into[k] = v;
  }
}

/**
 * Loads and validates the configuration (explicit file, else the default locations). The seed's
 * own names are read as what serves them here (seedCompat); `notes` says what was read so.
 */
export function loadConfig(opts: { file?: string; env?: NodeJS.ProcessEnv; cwd?: string; home?: string } = {}): Config & { source: string[]; notes: string[] } {
  const env = opts.env ?? process.env;
  const cfg = defaultConfig(env) as any;
  const source: string[] = ["defaults"];
  const candidates = opts.file ? [resolve(opts.file)] : [join(opts.cwd ?? process.cwd(), "forgevm.yaml"), join(opts.home ?? homedir(), ".forgevm", "config.yaml")];
  for (const f of candidates) {
    let text: string;
    try {
      text = readFileSync(f, "utf8");
    } catch {
      if (opts.file) throw new ConfigError(`config file ${f} cannot be read`);
      continue;
    }
    let doc: unknown;
    try {
      doc = parseYaml(text);
    } catch (e) {
      throw new ConfigError(`${f} is not valid YAML: ${(e as Error).message}`);
    }
    merge(cfg, doc, "");
    source.push(f);
    break;
  }
  // FORGEVM_<SECTION>_<KEY>: the section is the first word, the key the rest.
  for (const [name, raw] of Object.entries(env)) {
    if (!name.startsWith("FORGEVM_") || raw === undefined) continue;
    const rest = name.slice(8).toLowerCase();
    if (rest === "data_dir") {
      cfg.data_dir = raw;
      source.push(name);
      continue;
    }
    // Short names kept from earlier releases for the two QEMU switches.
    if (rest === "accel") {
      cfg.providers.qemu.accel = raw;
      source.push(name);
      continue;
    }
    if (rest === "jail") {
      cfg.providers.qemu.jail = raw !== "off" && raw !== "false";
      source.push(name);
      continue;
    }
    // Section names may hold underscores themselves (warm_pool): the longest that fits wins.
    const section = Object.keys(cfg)
      .filter((k) => typeof cfg[k] === "object" && rest.startsWith(`${k}_`))
      .sort((a, b) => b.length - a.length)[0];
    const key = section ? rest.slice(section.length + 1) : "";
    if (!section || !(key in cfg[section])) continue; // other FORGEVM_* variables (FORGEVM_URL, …)
    const current = cfg[section][key];
    cfg[section][key] = Array.isArray(current)
      ? raw
          .split(",")
          .map((x) => x.trim())
          .filter(Boolean)
      : typeof current === "number" && /^-?\d+$/.test(raw)
        ? Number(raw)
        : typeof current === "boolean" && /^(true|false)$/.test(raw)
          ? raw === "true"
          : raw;
    source.push(name);
  }
  const errors = [...Value.Errors(ConfigSchema, cfg)];
  if (errors.length) {
    const e = errors.find((x) => x.instancePath) ?? errors[0];
    const key = e.instancePath.slice(1).replace(/\//g, ".") || "config";
    throw new ConfigError(`config key "${key}" ${e.message} (from ${source.join(", ")})`);
  }
  const { notes, problem } = seedCompat(cfg as Config);
  if (problem) throw new ConfigError(`${problem} (from ${source.join(", ")})`);
  return { ...(cfg as Config), source, notes };
}
