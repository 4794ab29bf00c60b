// `forgevm serve`: load config, open the core, listen, and shut down gracefully on a signal.
import type { FastifyInstance } from "fastify";
import { ConfigError, type Config } from "../config/config.js";
import { templateBody } from "../core/sandboxes/template-ops.js";
import { forgeOptions } from "../core/forge-options.js";
import { Forge, type OnStop, type StopReport, type TakeBackReport } from "../core/forge.js";
import type { ForgeOptions } from "../core/options.js";
import { setTimeout as sleep } from "node:timers/promises";
import { policyFromConfig } from "../interfaces/mcp/policy.js";
import { buildApp } from "./app.js";
import { startFront } from "../front/front.js";
import { parseDuration } from "../schemas/durations.js";
import { writeFile } from "node:fs/promises";
import { sessionOf } from "../util/process.js";
import { pathsFor } from "../config/paths.js";
import { systemImageBuilder } from "../setup/base-image.js";
import { hostname } from "node:os";

/** How long a graceful shutdown waits for requests in flight before stopping the VMs. */
const SHUTDOWN_GRACE_MS = 10_000;

export interface RunningServer {
  app: FastifyInstance;
  forge: Forge;
  url: string;
  /** Stops serving; its sandboxes are left, paused or destroyed as `mode` says (default: the config's server.on_stop). */
  close(mode?: OnStop): Promise<StopReport>;
}

/**
 * The scheduling weight of the server's own session (its autogroup) against each VMM's: -20 is
 * about eighty-seven busy VMs' worth. Every VMM runs in a session of its own, and with autogroup
 * scheduling (the Linux default) each session competes as one whole, so at nice 0 the server had
 * one share among a hundred restoring VMs and its event loop stood still for up to 2 s
 * (`bench/burst.ts`), every request with it; at -10 (nine VMs' worth) still 60–110 ms at a time,
 * at -20 20–45 ms. The server uses little CPU, so the weight buys promptness, not a larger share;
 * what it starts in its own session (qemu-img, mkfs, an image's build) shares the weight.
 */
export const SERVER_AUTOGROUP_NICE = -20;

/**
 * Raises the session's scheduling group when this process leads its session (a service, or a
 * server started with setsid): a server started from a terminal or inside another program shares
 * their session, and raising it would raise them too, so it is left as it is. Root only.
 */
export async function raiseSchedulingGroup(): Promise<boolean> {
  if (process.getuid?.() !== 0) return false;
  if (sessionOf(process.pid) !== process.pid) return false;
  return writeFile("/proc/self/autogroup", String(SERVER_AUTOGROUP_NICE)).then(
    () => true,
    () => false, // no autogroup scheduling: nothing to raise
  );
}

/** Starts the server from a validated config; resolves once it listens. */
export async function startServer(
  cfg: Config,
  version: string,
  opts: { logger?: boolean; env?: NodeJS.ProcessEnv; requestLog?: (line: string) => void; builtInImages?: ForgeOptions["builtInImages"] } = {},
): Promise<RunningServer> {
  const mcp = cfg.mcp.enabled ? policyFromConfig(cfg.mcp) : undefined;
  // The system images a spawn names before anyone built them are built then (setup's builder).
  const forge = await Forge.open({ ...forgeOptions(cfg, opts.env), builtInImages: opts.builtInImages ?? systemImageBuilder(pathsFor(cfg.data_dir)) });
  try {
    await forge.templates.apply(Object.entries(cfg.templates).map(([name, t]) => templateBody({ name, ...t })));
  } catch (e) {
    await forge.close();
    throw new ConfigError(`templates in the config: ${(e as Error).message}`);
  }
  const app = await buildApp({
    forge,
    version,
    apiKey: cfg.auth.api_key || undefined,
    bodyLimitBytes: cfg.server.body_limit_mb * 1024 * 1024,
    maxOutputBytes: cfg.exec.max_output_bytes,
    logger: opts.logger,
    requestLog: opts.requestLog,
    allowedOrigins: cfg.server.allowed_origins,
    allowedHosts: cfg.server.allowed_hosts,
    listenHost: cfg.server.host,
    e2bDomain: cfg.e2b.domain || undefined,
    daytonaPreviewDomain: cfg.daytona.preview_domain || undefined,
    mcp,
    connectionLimits: {
      headersTimeoutMs: parseDuration(cfg.server.headers_timeout, "server.headers_timeout"),
      bodyIdleMs: parseDuration(cfg.server.body_idle_timeout, "server.body_idle_timeout"),
      maxPending: cfg.server.max_pending_connections,
    },
  });
  let address: string;
  try {
    address = await app.listen({ host: cfg.server.host, port: cfg.server.port });
  } catch (e) {
    await forge.close();
    throw listenError(e, cfg.server.host, cfg.server.port);
  }
  await forge.announce(address);
  if (cfg.cluster.role === "node") {
    if (!cfg.cluster.database) {
      await app.close();
      await forge.close();
      throw new ConfigError("a node needs cluster.database (--database postgres://…)");
    }
    try {
      await forge.joinCluster({
        database: cfg.cluster.database,
        id: cfg.cluster.node_id || `${hostname()}-${new URL(address).port}`,
        url: cfg.cluster.advertise || address,
        heartbeatMs: parseDuration(cfg.cluster.heartbeat, "cluster.heartbeat"),
        version,
      });
    } catch (e) {
      await app.close();
      await forge.close();
      throw new ConfigError(`joining the cluster at ${redactUrl(cfg.cluster.database)}: ${(e as Error).message}`);
    }
  }
  let closing: Promise<StopReport> | null = null;
  const close = (mode: OnStop = cfg.server.on_stop) =>
    (closing ??= (async () => {
      // Stop accepting and let requests in flight finish, but not forever: after the grace
      // period the sandboxes are let go of (or paused, or destroyed), which ends the streams
      // still open with a reason, while what runs in a sandbox that is kept goes on.
      const draining = app.close();
      // Connections that were busy when closing began go idle later and would otherwise stay
      // open until their keep-alive timeout (72 s), holding the close up.
      const sweep = setInterval(() => app.server.closeIdleConnections(), 100);
      void draining.finally(() => clearInterval(sweep));
      const graceOver = await Promise.race([draining.then(() => false), sleep(SHUTDOWN_GRACE_MS, undefined, { ref: false }).then(() => true)]);
      const report = await forge.close(mode); // leaves the store consistent
      if (graceOver) await draining;
      return report;
    })());
  return { app, forge, url: address, close };
}

/** Why the server cannot listen, saying which address and which setting changes it. */
function listenError(e: unknown, host: string, port: number): Error {
  const code = (e as NodeJS.ErrnoException)?.code;
  const where = `${host}:${port}`;
  if (code === "EADDRINUSE")
    return new ConfigError(
      `port ${port} on ${host} is in use (another forgevm serve, or another program): choose another with --port, server.port in forgevm.yaml or FORGEVM_SERVER_PORT`,
    );
  if (code === "EACCES") return new ConfigError(`may not listen on ${where} (ports below 1024 need root): choose another with --port or server.port`);
  if (code === "EADDRNOTAVAIL" || code === "ENOTFOUND") return new ConfigError(`${host} is not an address of this machine: set --host or server.host to one (127.0.0.1, 0.0.0.0)`);
  return e as Error;
}

/** A database URL without its password, for messages. */
function redactUrl(url: string): string {
  return url.replace(/\/\/([^:@/]+):[^@/]*@/, "//$1:***@");
}

/**
 * Keeps a serving process alive through an error nothing handled (a stream's 'error' event, a
 * promise nobody awaited): it is logged with its stack, and every other sandbox's client keeps
 * its server. Every known source of such errors has an owner; this is the net under them.
 */
export function surviveStrayErrors(log: (line: string) => void = (l) => console.error(l)): void {
  process.on("uncaughtException", (e, origin) => log(`forgevm: an error nothing handled (${origin}), the server goes on: ${(e as Error)?.stack ?? e}`));
  process.on("unhandledRejection", (e) => log(`forgevm: a promise failed and nothing handled it, the server goes on: ${(e as Error)?.stack ?? e}`));
}

/** Runs a front (cluster.role "front") until SIGINT or SIGTERM. */
async function serveFront(version: string, cfg: Config): Promise<void> {
  surviveStrayErrors();
  const onStop = stopSignals();
  const front = await startFront(cfg, version);
  console.log(`forgevm ${version} front listening on ${front.url} (catalogue ${redactUrl(cfg.cluster.database)}${cfg.auth.api_key ? ", API key required" : ""})`);
  await new Promise<void>((resolve) =>
    onStop((sig) => {
      console.log(`forgevm: ${sig}, shutting down`);
      front.close().then(resolve, resolve);
    }),
  );
}

/**
 * SIGINT and SIGTERM, heard from this call on: the first one is held until `onStop` says what a
 * stop does (a signal that comes while the server starts, or after it answers but before it has
 * written who owns the data directory, is a graceful stop once it can be, never Node's default
 * exit that would leave its sandboxes to the next start), and a second one ends the process at once.
 */
function stopSignals(): (stop: (sig: string) => void) => void {
  let heard: string | null = null;
  let stop: ((sig: string) => void) | null = null;
  const listeners = (["SIGINT", "SIGTERM"] as const).map((sig) => [sig, () => hear(sig)] as const);
  const hear = (sig: string) => {
    for (const [s, l] of listeners) process.off(s, l);
    heard = sig;
    if (stop) stop(sig);
    else console.log(`forgevm: ${sig} while starting: the server stops once it has started (${sig} again stops it at once)`);
  };
  for (const [s, l] of listeners) process.on(s, l);
  return (f) => {
    stop = f;
    if (heard) f(heard);
  };
}

/** Runs the server until SIGINT or SIGTERM; `notes` (what the config loader read the ForgeVM API's names as) are printed first. */
export async function serveForever(version: string, cfg: Config, notes: string[] = []): Promise<void> {
  for (const n of notes) console.log(`note: ${n}`);
  if (cfg.cluster.role === "front") return serveFront(version, cfg);
  surviveStrayErrors();
  const onStop = stopSignals();
  await raiseSchedulingGroup();
  const server = await startServer(cfg, version, { env: process.env, requestLog: cfg.server.request_log ? (l) => console.log(l) : undefined });
  // A stop that comes while the provider's health is still being read is graceful too.
  const stopped = new Promise<void>((resolve) => {
    onStop((sig) => {
      console.log(`forgevm: ${sig}, shutting down (server.on_stop: ${cfg.server.on_stop})`);
      server.close().then(
        (report) => {
          for (const line of stopLines(report)) console.log(`forgevm: ${line}`);
          resolve();
        },
        (e) => {
          console.error(`forgevm: shutdown failed: ${e.message}`);
          resolve();
        },
      );
    });
  });
  // (A stop during this read may close what it reads: then there is nothing to announce.)
  const providers = await server.forge.providers.list().catch(() => null);
  if (providers) {
    const vm = providers.find((p) => p.default) ?? providers[0];
    const names = providers.map((p) => (p.default ? `${p.name} (default)` : p.name)).join(", ");
    console.log(
      `forgevm ${version} listening on ${server.url} (providers ${names}, accel ${vm.accel ?? "none"}, data ${cfg.data_dir}${cfg.auth.api_key ? ", API key required" : ""})`,
    );
    for (const p of providers) {
      for (const problem of p.problems) console.log(`warning: ${p.name}: ${problem}`);
      if (p.details.warning) console.log(`warning: provider ${p.name} is ${p.details.warning}`);
    }
  }
  for (const line of tookBackLines(server.forge.tookBack())) console.log(`forgevm: ${line}`);
  await stopped;
}

/** What a start took back from the server before it, a line per kind, for the server's output. */
export function tookBackLines(r: TakeBackReport): string[] {
  const procs = r.reattached.reduce((n, x) => n + x.processes, 0);
  return [
    ...(r.reattached.length
      ? [
          `took back ${r.reattached.length} running sandbox${r.reattached.length === 1 ? "" : "es"} (${procs} process${procs === 1 ? "" : "es"} running in them): ${r.reattached.map((x) => x.id).join(", ")}`,
        ]
      : []),
    ...(r.resumed.length ? [`resumed ${r.resumed.length} sandbox${r.resumed.length === 1 ? "" : "es"} paused by the last stop: ${r.resumed.join(", ")}`] : []),
    ...r.failed.map((f) => `could not take back ${f.id}: ${f.error}`),
  ];
}

/** What a stop did to the sandboxes, a line per kind, for the server's output. */
export function stopLines(r: StopReport): string[] {
  const line = (ids: string[], what: string) => (ids.length ? [`${ids.length} sandbox${ids.length === 1 ? "" : "es"} ${what}: ${ids.join(", ")}`] : []);
  return [
    ...line(r.kept, "left running for the next start"),
    ...line(r.paused, "paused to disk; the next start resumes them"),
    ...line(r.stopped, "stopped; their restart policy starts them again at the next start"),
    ...line(r.destroyed, "destroyed"),
  ];
}
