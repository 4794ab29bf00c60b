// Server configuration: defaults, then forgevm.yaml (working directory) or
// ~/.forgevm/config.yaml, then FORGEVM_<SECTION>_<KEY> environment variables. Validated once at
// start; an unknown key or a bad value is an error that names it.
import { readFileSync } from "node:fs";
import { homedir } from "node:os";
import { join, resolve } from "node:path";
import { Value } from "typebox/value";
import { parse as parseYaml } from "yaml";
import { defaultDataDir } from "./paths.js";
import { ConfigSchema, type Config } from "./schema.js";
import { compatNames } from "./compat-config.js";

export { ConfigSchema, type Config } from "./schema.js";

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
      on_stop: "keep",
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
    network: { default: "none", allow_private: [], presets_file: "", cache: false, cache_max_mb: 2048, upstream_ca_file: "", hosts: {} },
    mounts: { host_dirs: [] },
    forward: { ssh_agent: "" },
    e2b: { domain: "" },
    daytona: { preview_domain: "" },
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
      custom: { base_url: "", api_key: "", timeout: "60s", name: "custom" },
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
 * Loads and validates the configuration (explicit file, else the default locations). A ForgeVM API config file's
 * names are read as what serves them here (compatNames); `notes` says what was read so.
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
  const { notes, problem } = compatNames(cfg as Config);
  if (problem) throw new ConfigError(`${problem} (from ${source.join(", ")})`);
  return { ...(cfg as Config), source, notes };
}
