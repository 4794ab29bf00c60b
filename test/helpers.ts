// Shared fixtures. Tests leave the user's machine alone: every Forge and server a test opens has
// a data directory of its own (kernel, initramfs and default image hard-linked from a prepared
// one, so nothing is rebuilt), listens on a free port, and gets an explicit configuration;
// nothing here reads ~/.forgevm, FORGEVM_* variables or the user's data directory.
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { mkdtemp, readdir } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { defaultConfig, type Config } from "../src/config/config.js";
import { preparedDataDir } from "../src/setup/index.js";
import { buildApp } from "../src/compose/app.js";
import { startServer, type RunningServer } from "../src/compose/serve.js";
import { seedDataDir } from "../src/setup/seed.js";
import { DEFAULT_IMAGE, Forge, type ForgeOptions } from "../src/index.js";
import { adoptSharedBases } from "./shared-bases.js";

// The suite runner (scripts/test-suite.ts) names a directory for this run and a seed prepared in
// it; a test file run on its own makes its own, seeding from the data directory ./setup.sh
// recorded as prepared (never from the environment).
const ownRunDir = !process.env.TEST_RUN_DIR;
const runDir = process.env.TEST_RUN_DIR || mkdtempSync(join(tmpdir(), "fvt-"));
const seed = process.env.TEST_SEED_DATA_DIR || preparedDataDir();
if (ownRunDir) process.once("exit", () => rmSync(runDir, { recursive: true, force: true }));

/** What a fresh data directory starts with besides its images. */
export interface DataDirOptions {
  /** The run's shared base snapshots of the default image (test/shared-bases.ts), when the suite built them; default true. */
  sharedBases?: boolean;
}

/** A fresh data directory for this test file, ready to boot VMs (with these built-in images); see removeAtExit. */
export async function testDataDir(images?: string[], o: DataDirOptions = {}): Promise<string> {
  const dir = await mkdtemp(join(runDir, "d-"));
  await seedDataDir(seed, dir, images);
  // Only from the suite's own seed: a file run alone seeds from the prepared data directory, whose store is not the tests'.
  if (process.env.TEST_SEED_DATA_DIR && o.sharedBases !== false && (images ?? [DEFAULT_IMAGE]).includes(DEFAULT_IMAGE)) await adoptSharedBases(seed, dir);
  return dir;
}

/**
 * Removes `dir` when the process exits. Registered after the Forge that uses it is open, so
 * that the provider's own exit hook (which kills its VMs) runs first.
 */
export function removeAtExit(dir: string): void {
  // Retried: a VMM killed by that hook a moment ago may still add an entry (ENOTEMPTY).
  process.once("exit", () => rmSync(dir, { recursive: true, force: true, maxRetries: 5, retryDelay: 20 }));
}

/** Opens a Forge on a data directory of its own (unless `opts.dataDir` names one), with these built-in images. */
export async function openForge(opts: ForgeOptions = {}, images?: string[]): Promise<Forge> {
  const dataDir = opts.dataDir ?? (await testDataDir(images));
  const forge = await Forge.open({ ...opts, dataDir });
  if (!opts.dataDir) removeAtExit(dataDir);
  return forge;
}

let shared: Promise<Forge> | null = null;

/** One Forge per test process, on its own data directory. */
export function testForge(): Promise<Forge> {
  shared ??= openForge();
  return shared;
}

/** An explicit server configuration: defaults, a data directory of its own (with these built-in images), a free port. */
export async function testConfig(change: (c: Config) => void = () => {}, images?: string[], o: DataDirOptions = {}): Promise<Config> {
  const c = defaultConfig({});
  c.data_dir = await testDataDir(images, o);
  c.server.port = 0;
  // A test's server ends its sandboxes when it stops: nothing it made outlives the test.
  c.server.on_stop = "destroy";
  change(c);
  return c;
}

/** Starts a server on its own data directory (with these built-in images) and a free port; `url` is its base URL. */
export async function startTestServer(change?: (c: Config) => void, images?: string[], o: DataDirOptions = {}): Promise<RunningServer> {
  const cfg = await testConfig(change, images, o);
  const server = await startServer(cfg, "test");
  removeAtExit(cfg.data_dir);
  return server;
}

/**
 * The environment for a program a test starts: this one's, without any FORGEVM_* or E2B_*
 * variable, and with a home of its own (no user config file), so only what the test passes counts.
 */
export function childEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith("FORGEVM_") && !k.startsWith("E2B_")) env[k] = v;
  mkdirSync(childHome, { recursive: true });
  return { ...env, HOME: childHome, ...extra };
}

const childHome = join(runDir, "home-of-tests");

/** Runs the forgevm CLI with `input` as its stdin (closed after it: `exec` forwards stdin and waits for its end). */
export function runCli(args: string[], env: NodeJS.ProcessEnv, input?: Buffer | string): Promise<{ status: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const p = spawn(process.execPath, [fileURLToPath(new URL("../src/cli/main.js", import.meta.url)), ...args], { env });
    p.stdin.end(input);
    let stdout = "";
    let stderr = "";
    p.stdout.on("data", (d) => (stdout += d));
    p.stderr.on("data", (d) => (stderr += d));
    p.on("close", (status) => resolve({ status, stdout, stderr }));
  });
}

/** Serves a test's Forge over HTTP (no API key) and records it as its data directory's server, as `forgevm serve` does. */
export async function serveForge(forge: Forge): Promise<{ url: string; close: () => Promise<void> }> {
  const app = await buildApp({ forge, version: "test" });
  const url = await app.listen({ host: "127.0.0.1", port: 0 });
  await forge.announce(url);
  return { url, close: () => app.close() };
}

// The runner stops a test file with a signal on timeout or Ctrl-C; exit normally then so the
// provider's exit hook kills the VMs this file started.
for (const sig of ["SIGINT", "SIGTERM"] as const) process.once(sig, () => process.exit(130));

export { processAlive as alive } from "../src/util/process.js";
export { freePort } from "./ports.js";

/** Servers this test process started and that still run: killed if it exits, however it exits. */
const serverProcesses = new Set<ChildProcess>();
process.once("exit", () => {
  for (const p of serverProcesses) p.kill("SIGKILL");
});

/** Stops every server this test process started that still runs (whatever a failed test left). */
export async function stopServers(): Promise<void> {
  await Promise.all([...serverProcesses].map((p) => stopProcess(p)));
}

/** How a child process ended: its exit code, or "signal NAME" when a signal ended it (an exit code of 0 expected reads as which signal came). */
export function exitOf(proc: ChildProcess): Promise<number | string> {
  if (proc.exitCode !== null || proc.signalCode !== null) return Promise.resolve(proc.signalCode ? `signal ${proc.signalCode}` : (proc.exitCode as number));
  return new Promise((resolve) => proc.once("exit", (code, signal) => resolve(signal ? `signal ${signal}` : (code as number))));
}

/**
 * `forgevm serve --config FILE` as a user runs it, in a process of its own (a test may SIGKILL
 * it); resolves once `<apiBase>/health` answers (with the key, when given).
 */
export async function startServerProcess(
  configFile: string,
  apiBase: string,
  apiKey?: string,
  o: {
    /** The CLI to run (another build's dist/src/cli/main.js); this checkout's by default. */
    main?: string;
    /** Hears what the server prints on stdout. */
    stdout?: (text: string) => void;
  } = {},
): Promise<ChildProcess> {
  const main = o.main ?? fileURLToPath(new URL("../src/cli/main.js", import.meta.url));
  const proc = spawn(process.execPath, [main, "serve", "--config", configFile], { env: childEnv(), stdio: ["ignore", o.stdout ? "pipe" : "ignore", "inherit"] });
  if (o.stdout) proc.stdout?.on("data", (d: Buffer) => o.stdout?.(d.toString()));
  serverProcesses.add(proc);
  proc.once("exit", () => serverProcesses.delete(proc));
  const headers: Record<string, string> = apiKey ? { "X-API-Key": apiKey } : {};
  // A server that exits (a port or data directory in use) must fail here, not pass on another's health.
  let exited = false;
  proc.once("exit", () => {
    exited = true;
  });
  try {
    await waitFor(
      () => {
        if (exited) throw new Error(`the server exited with ${proc.exitCode ?? proc.signalCode} before it answered`);
        return fetch(`${apiBase}/health`, { headers }).then(
          (r) => r.ok && !exited,
          () => false,
        );
      },
      30_000,
      "the server",
    );
  } catch (e) {
    await stopProcess(proc);
    throw e;
  }
  return proc;
}

/** Stops a child process: SIGTERM, then SIGKILL after `graceMs`; resolves once it has exited (at once if it had). */
export async function stopProcess(proc: ChildProcess, graceMs = 10_000): Promise<void> {
  if (proc.exitCode !== null || proc.signalCode !== null) return;
  const gone = exitOf(proc);
  proc.kill("SIGTERM");
  const timer = setTimeout(() => proc.kill("SIGKILL"), graceMs);
  await gone;
  clearTimeout(timer);
}

/** One REST call: an object body goes as JSON, a string as it is; the reply parsed when it is JSON. */
export async function apiRequest(base: string, method: string, path: string, body?: unknown, headers: Record<string, string> = {}) {
  const res = await fetch(`${base}/api/v1${path}`, {
    method,
    headers: { ...(body !== undefined && typeof body !== "string" ? { "Content-Type": "application/json" } : {}), ...headers },
    body: body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body),
  });
  const text = await res.text();
  let json: any = null;
  try {
    json = JSON.parse(text);
  } catch {
    json = text;
  }
  return { status: res.status, body: json, headers: res.headers };
}

/** Asserts that no VM directory is left under the data directory. */
export async function assertNoVmLeft(f: Forge): Promise<void> {
  const left = await readdir(f.paths.vmsDir).catch(() => []);
  assert.deepEqual(left, [], `VM directories left behind: ${left.join(", ")}`);
}

/** Polls `cond` until it holds or `ms` pass. */
export async function waitFor(cond: () => boolean | Promise<boolean>, ms: number, what: string): Promise<void> {
  const end = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Half-finished image installs or blob downloads left in the data directory. */
export async function imageLeftovers(f: Forge): Promise<string[]> {
  const imgs = await readdir(f.paths.imagesDir);
  const parts = await readdir(join(f.paths.blobsDir, "sha256")).catch(() => []);
  return [...imgs.filter((n) => n.startsWith(".staging")), ...parts.filter((n) => n.includes(".part"))];
}
