// `forgevm serve`: load config, open the core, listen, and shut down gracefully on a signal.
import type { FastifyInstance } from "fastify";
import { loadConfig, type Config } from "../config/config.js";
import { parseDuration } from "../core/durations.js";
import { Forge } from "../core/forge.js";
import { setTimeout as sleep } from "node:timers/promises";
import { buildApp } from "./app.js";

/** How long a graceful shutdown waits for requests in flight before stopping the VMs. */
const SHUTDOWN_GRACE_MS = 10_000;

export interface RunningServer {
  app: FastifyInstance;
  forge: Forge;
  url: string;
  close(): Promise<void>;
}

/** Starts the server from a validated config; resolves once it listens. */
export async function startServer(cfg: Config, version: string, opts: { logger?: boolean } = {}): Promise<RunningServer> {
  const forge = await Forge.open({
    dataDir: cfg.data_dir,
    accel: cfg.providers.qemu.accel,
    jail: cfg.providers.qemu.jail ? undefined : false,
    hostSecrets: hostSecrets(process.env),
    defaults: {
      image: cfg.defaults.image,
      memoryMb: cfg.defaults.memory_mb,
      vcpus: cfg.defaults.vcpus,
      diskMb: cfg.defaults.disk_mb,
      ttlMs: parseDuration(cfg.defaults.ttl, "defaults.ttl"),
    },
    historyRetentionMs: parseDuration(cfg.store.history_retention, "store.history_retention"),
    registryAuth: cfg.registries,
    baseSnapshots: cfg.snapshots.base,
    warmPool: { size: cfg.warm_pool.size, memoryBudgetMb: cfg.warm_pool.memory_budget_mb },
    guestLimits: { pidsMax: cfg.limits.pids_max, memoryReserveMb: cfg.limits.memory_reserve_mb },
    network: { default: cfg.network.default, allowPrivate: cfg.network.allow_private, presetsFile: cfg.network.presets_file || undefined },
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
  });
  const app = await buildApp({
    forge,
    version,
    apiKey: cfg.auth.api_key || undefined,
    bodyLimitBytes: cfg.server.body_limit_mb * 1024 * 1024,
    maxOutputBytes: cfg.exec.max_output_bytes,
    logger: opts.logger,
  });
  const address = await app.listen({ host: cfg.server.host, port: cfg.server.port });
  let closing: Promise<void> | null = null;
  const close = () =>
    (closing ??= (async () => {
      // Stop accepting and let requests in flight finish, but not forever: after the grace
      // period the VMs are stopped, which ends whatever still runs in them.
      const draining = app.close();
      // Connections that were busy when closing began go idle later and would otherwise stay
      // open until their keep-alive timeout (72 s), holding the close up.
      const sweep = setInterval(() => app.server.closeIdleConnections(), 100);
      void draining.finally(() => clearInterval(sweep));
      const graceOver = await Promise.race([draining.then(() => false), sleep(SHUTDOWN_GRACE_MS, undefined, { ref: false }).then(() => true)]);
      await forge.close(); // stop the VMs and leave the store consistent
      if (graceOver) await draining;
    })());
  return { app, forge, url: address, close };
}

/** Template secret values the server holds: its FORGEVM_SECRET_<NAME> variables. */
export function hostSecrets(env: NodeJS.ProcessEnv): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(env)) if (k.startsWith("FORGEVM_SECRET_") && v !== undefined) out[k.slice(15)] = v;
  return out;
}

/** Runs the server until SIGINT or SIGTERM. */
export async function serveForever(version: string, configFile?: string): Promise<void> {
  const cfg = loadConfig({ file: configFile });
  const server = await startServer(cfg, version);
  const h = await server.forge.providerHealth();
  console.log(`forgevm ${version} listening on ${server.url} (provider qemu, accel ${h.accel ?? "unknown"}, data ${cfg.data_dir}${cfg.auth.api_key ? ", API key required" : ""})`);
  for (const p of h.problems) console.log(`warning: ${p}`);
  await new Promise<void>((resolve) => {
    const stop = (sig: string) => {
      console.log(`forgevm: ${sig}, shutting down`);
      server.close().then(resolve, (e) => {
        console.error(`forgevm: shutdown failed: ${e.message}`);
        resolve();
      });
    };
    process.once("SIGINT", () => stop("SIGINT"));
    process.once("SIGTERM", () => stop("SIGTERM"));
  });
}
