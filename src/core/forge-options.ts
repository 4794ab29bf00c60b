// A loaded configuration as the options of a Forge: what `forgevm serve` and the CLI's local
// commands (run, images, pull… without a server) open the core with.
import type { ForgeOptions } from "./options.js";
import { defaultProviderName, extraProvidersFromConfig } from "../providers/registry.js";
import { parseDuration, parseIdle, parseTtl } from "../schemas/durations.js";
import type { Config } from "../config/config.js";

/** Template secret values the server holds: its FORGEVM_SECRET_<NAME> variables. */
export function hostSecrets(env: NodeJS.ProcessEnv): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(env)) if (k.startsWith("FORGEVM_SECRET_") && v !== undefined) out[k.slice(15)] = v;
  return out;
}

/** The Forge options a configuration stands for (`env` supplies template secret values). */
export function forgeOptions(cfg: Config, env: NodeJS.ProcessEnv = {}): ForgeOptions {
  return {
    dataDir: cfg.data_dir,
    accel: cfg.providers.qemu.accel,
    jail: cfg.providers.qemu.jail ? undefined : false,
    extraProviders: extraProvidersFromConfig(cfg.providers),
    defaultProvider: defaultProviderName(cfg.providers),
    hostSecrets: hostSecrets(env),
    hostDirs: cfg.mounts.host_dirs,
    sshAgentSocket: cfg.forward.ssh_agent || env.SSH_AUTH_SOCK || undefined,
    defaults: {
      image: cfg.defaults.image,
      memoryMb: cfg.defaults.memory_mb,
      vcpus: cfg.defaults.vcpus,
      diskMb: cfg.defaults.disk_mb,
      ttlMs: parseTtl(cfg.defaults.ttl, "defaults.ttl"),
      ...(cfg.defaults.idle ? { idle: parseIdle(cfg.defaults.idle, "defaults.idle") } : {}),
    },
    historyRetentionMs: parseDuration(cfg.store.history_retention, "store.history_retention"),
    metrics: { enabled: cfg.metrics.enabled, intervalMs: parseDuration(cfg.metrics.interval, "metrics.interval"), guestEvery: cfg.metrics.guest_every },
    registryAuth: cfg.registries,
    environments: {
      pythonIndex: cfg.environments.python_index,
      aptSources: cfg.environments.apt_sources,
      allow: cfg.environments.allow,
      concurrency: cfg.environments.concurrency,
      memoryMb: cfg.environments.memory_mb,
      secretKeyFile: cfg.environments.secret_key_file || undefined,
    },
    baseSnapshots: cfg.snapshots.base,
    prestart: cfg.snapshots.prestart,
    warmPool: { size: cfg.warm_pool.size, memoryBudgetMb: cfg.warm_pool.memory_budget_mb },
    memory: { reclaimAfterMs: cfg.memory.reclaim_after === "0" ? 0 : parseDuration(cfg.memory.reclaim_after, "memory.reclaim_after"), ksm: cfg.memory.ksm },
    guestLimits: { pidsMax: cfg.limits.pids_max, memoryReserveMb: cfg.limits.memory_reserve_mb },
    network: {
      default: cfg.network.default,
      allowPrivate: cfg.network.allow_private,
      presetsFile: cfg.network.presets_file || undefined,
      cache: cfg.network.cache,
      cacheMaxMb: cfg.network.cache_max_mb,
      upstreamCaFile: cfg.network.upstream_ca_file || undefined,
      hostsOverride: Object.keys(cfg.network.hosts).length ? cfg.network.hosts : undefined,
    },
    pool: {
      enabled: cfg.pool.enabled,
      maxVms: cfg.pool.max_vms,
      maxUsersPerVm: cfg.pool.max_users_per_vm,
      image: cfg.pool.image || undefined,
      memoryMb: cfg.pool.memory_mb,
      vcpus: cfg.pool.vcpus,
      overflow: cfg.pool.overflow,
      queueTimeoutMs: parseDuration(cfg.pool.queue_timeout, "pool.queue_timeout"),
    },
  };
}
