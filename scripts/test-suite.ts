// Past 400 lines because it is the whole run in its one order: the stand-in user, what is made ahead, the phases.
// `npm test`: the whole suite, run as if on a user's machine, and a check that it left that user
// alone. Before the suite, a stand-in for the user starts `forgevm serve` from their own home
// (config file, data directory, port 7423 when free) with a running sandbox, a snapshot and a
// pulled image; the suite then runs with that user's HOME and with FORGEVM_* (and E2B_*) variables that point
// at the user's server and data directory and would break any test that obeyed them. Afterwards
// the user's sandbox must still run with its files, and their image, snapshot and data directory
// must be as they were. Test files get their data directories under one directory of this run,
// from a seed that shares the kernel, initramfs and default image ./setup.sh prepared.
import { spawn, type ChildProcess } from "node:child_process";
import { readFileSync } from "node:fs";
import Database from "better-sqlite3";
import { mkdir, mkdtemp, readdir, readFile, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { preparedDataDir } from "../src/setup/index.js";
import { seedDataDir } from "../src/setup/seed.js";
import { CODE_IMAGE, DEFAULT_IMAGE } from "../src/images/store.js";
import { pushImage, startRegistry, type LocalRegistry } from "../test/local-registry.js";
import { buildSharedBases } from "../test/shared-bases.js";
import { installFrameworks } from "./test-frameworks.js";
import { listenForStop, ownGroup, stopSignal } from "./test-signals.js";
import { failuresFile } from "./test-times.js";
import { APART, FILE_SECONDS, HOST_STATE, TIER_NAMES, TIERS, type Tier, UNLISTED_SECONDS } from "./test-tiers.js";
import { freePort, portFree } from "../test/ports.js";

const repo = fileURLToPath(new URL("../../", import.meta.url));
const cli = join(repo, "dist", "src", "cli", "main.js");
const USER_KEY = "the-users-own-key";
const USER_FILE = "/root/users-work.txt";
/** The whole suite should take at most 25 minutes on two cores (docs/testing.md); CI stops at 90. */
const SUITE_LIMIT_MIN = 75;
/** How long the shared base snapshots may take to make (about 50 s on two cores under TCG). */
const SHARED_BASES_LIMIT_MIN = 10;
/** A test file that hangs is stopped after this (the longest takes about 3 minutes), and the suite goes on. */
const FILE_LIMIT_MS = 15 * 60_000;

/** The stand-in user's server and what they keep on it. */
interface User {
  home: string;
  dataDir: string;
  url: string;
  server: ChildProcess;
  sandbox: string;
  image: string;
  snapshot: string;
  registry: LocalRegistry;
}

async function api(u: { url: string }, method: string, path: string, body?: unknown): Promise<any> {
  const res = await fetch(`${u.url}/api/v1${path}`, {
    method,
    headers: { "X-API-Key": USER_KEY, ...(body !== undefined ? { "Content-Type": "application/json" } : {}) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  if (!res.ok) throw new Error(`the user's server answered ${method} ${path} with ${res.status}: ${text}`);
  return text ? JSON.parse(text) : null;
}

async function until<T>(what: string, ms: number, fn: () => Promise<T | null | undefined | false>): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn().catch(() => null);
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function startUser(runDir: string, installed: string): Promise<User> {
  const t0 = performance.now();
  const home = join(runDir, "home");
  const dataDir = join(home, ".local", "share", "forgevm");
  await seedDataDir(installed, dataDir);
  const port = (await portFree(7423)) ? 7423 : await freePort();
  await mkdir(join(home, ".forgevm"), { recursive: true });
  await writeFile(join(home, ".forgevm", "config.yaml"), `server:\n  port: ${port}\nauth:\n  api_key: ${USER_KEY}\ndefaults:\n  memory_mb: 384\n`);
  // In a group of its own: a terminal's Ctrl-C reaches the suite alone, which ends this server's
  // sandbox before the server (a stopped server leaves its sandboxes running).
  const server = spawn(process.execPath, [cli, "serve"], { cwd: home, env: { PATH: process.env.PATH, HOME: home }, stdio: ["ignore", "ignore", "inherit"], detached: true });
  server.once("exit", ownGroup(server.pid, "last"));
  const url = `http://127.0.0.1:${port}`;
  const u = { url };
  await until("the user's server", 30_000, async () => server.exitCode === null && (await api(u, "GET", "/health")));
  const sb = await api(u, "POST", "/sandboxes", { ttl: "3h" });
  await api(u, "POST", `/sandboxes/${sb.id}/files`, { path: USER_FILE, content: "the user's work\n" });
  const snap = await api(u, "POST", `/sandboxes/${sb.id}/snapshot`, { name: "users-snapshot" });
  const registry = await startRegistry(runDir);
  const busybox = readFileSync("/bin/busybox");
  await pushImage(registry, runDir, "user/tools:v1", { layers: [{ entries: [{ path: "bin/busybox", data: busybox, mode: 0o755 }] }] });
  const job = await api(u, "POST", "/images/pull", { image: `${registry.host}/user/tools:v1` });
  const done = await until("the user's pull", 120_000, async () => {
    const j = await api(u, "GET", `/images/pulls/${job.id}`);
    if (j.state === "error") throw new Error(`the user's pull failed: ${j.error}`);
    return j.state === "done" && j;
  });
  console.log(
    `# the user's server: ${url} (pid ${server.pid}), sandbox ${sb.id}, snapshot ${snap.id}, image ${done.image} (ready in ${((performance.now() - t0) / 1000).toFixed(1)} s)`,
  );
  return { home, dataDir, url, server, sandbox: sb.id, image: done.image, snapshot: snap.id, registry };
}

/** What the user's data directory holds, apart from files a running server rewrites (store, console logs). */
async function listing(dataDir: string): Promise<string[]> {
  const out: string[] = [];
  for (const sub of ["images", "blobs/sha256", "snapshots", "logs", "egress", "vms"]) {
    for (const name of await readdir(join(dataDir, sub)).catch(() => [] as string[])) out.push(`${sub}/${name}`);
  }
  return out.sort();
}

/** Events the user's server recorded after `seq`, oldest first (a replay, read until the stream goes quiet). */
async function eventsAfter(u: User, seq: number): Promise<{ id: number; what: string }[]> {
  const ctl = new AbortController();
  const res = await fetch(`${u.url}/api/v1/events?last_event_id=${seq}&api_key=${USER_KEY}`, { signal: ctl.signal });
  const reader = res.body!.getReader();
  let text = "";
  for (;;) {
    const next = await Promise.race([reader.read(), new Promise<null>((r) => setTimeout(() => r(null), 500))]);
    if (!next || next.done) break;
    text += new TextDecoder().decode(next.value);
  }
  ctl.abort();
  return [...text.matchAll(/^data: (.*)$/gm)].map((m) => {
    const e = JSON.parse(m[1]) as { id: string; type: string; sandbox_id: string | null };
    return { id: Number(e.id), what: `${e.type}${e.sandbox_id ? ` ${e.sandbox_id}` : ""}` };
  });
}

interface Before {
  files: string[];
  lastEvent: number;
}

/** What the suite must not have changed: returns the differences found. */
async function checkUser(u: User, before: Before): Promise<string[]> {
  const problems: string[] = [];
  const attempt = async (what: string, fn: () => Promise<void>) => {
    try {
      await fn();
    } catch (e) {
      problems.push(`${what}: ${(e as Error).message}`);
    }
  };
  await attempt("nothing happened on the user's server", async () => {
    // The server's own housekeeping on an idle sandbox (its memory reclaimed after
    // memory.reclaim_after) is not something a test did.
    const events = (await eventsAfter(u, before.lastEvent)).filter((e) => !e.what.startsWith("sandbox.reclaimed "));
    if (events.length)
      throw new Error(
        `it recorded ${events.length} events: ${events
          .slice(0, 10)
          .map((e) => e.what)
          .join(", ")}`,
      );
  });
  await attempt("the user's data directory holds what it held", async () => {
    const now = await listing(u.dataDir);
    const gone = before.files.filter((f) => !now.includes(f));
    const added = now.filter((f) => !before.files.includes(f));
    if (gone.length || added.length) throw new Error(`gone: ${gone.join(", ") || "none"}; added: ${added.join(", ") || "none"}`);
  });
  await attempt("the user's server is still up", async () => {
    if (u.server.exitCode !== null) throw new Error(`it exited with ${u.server.exitCode}`);
  });
  await attempt("the user's sandbox still runs, with their file", async () => {
    const sb = await api(u, "GET", `/sandboxes/${u.sandbox}`);
    if (sb.state !== "running") throw new Error(`it is ${sb.state}`);
    const r = await api(u, "POST", `/sandboxes/${u.sandbox}/exec`, { command: `cat ${USER_FILE}` });
    if (r.stdout !== "the user's work\n") throw new Error(`the file reads ${JSON.stringify(r.stdout)}`);
  });
  await attempt("the user's server runs only what they started", async () => {
    const list = (await api(u, "GET", "/sandboxes")).map((s: { id: string }) => s.id);
    if (list.join() !== u.sandbox) throw new Error(`it lists ${list.join(", ")}`);
  });
  await attempt("the user's image is still there", async () => {
    const images = (await api(u, "GET", "/images")).map((i: { name: string }) => i.name);
    if (!images.includes(u.image)) throw new Error(`images: ${images.join(", ")}`);
  });
  await attempt("the user's snapshot is still there", async () => {
    await api(u, "GET", `/snapshots/${u.snapshot}`);
  });
  await attempt("no sandbox of anyone else in the user's store", async () => {
    const db = new Database(join(u.dataDir, "forgevm.db"), { readonly: true });
    try {
      const ids = (db.prepare("SELECT id FROM sandboxes").all() as { id: string }[]).map((r) => r.id);
      if (ids.join() !== u.sandbox) throw new Error(`its sandboxes table holds ${ids.join(", ")}`);
    } finally {
      db.close();
    }
  });
  return problems;
}

/** The compiled test files of a tier. */
function tierPaths(tier: Tier): string[] {
  return TIERS[tier].map((n) => join(repo, "dist", TIER_NAMES[tier], `${n}.test.js`));
}

/** A test file's name as the tiers list it. */
const testName = (path: string) => path.slice(path.lastIndexOf("/") + 1).replace(/\.test\.js$/, "");

/** The files longest first, by FILE_SECONDS (the order of a tier where two are alike). */
function longestFirst(files: string[]): string[] {
  const seconds = (f: string) => FILE_SECONDS[testName(f)] ?? UNLISTED_SECONDS;
  return files
    .map((f, i) => ({ f, i }))
    .sort((a, b) => seconds(b.f) - seconds(a.f) || a.i - b.i)
    .map((x) => x.f);
}

/**
 * Runs test files under node's runner, `concurrency` at a time, with the spec reporter and the
 * times per file; resolves with its exit code. A phase still running at the suite's deadline is
 * stopped, with a message naming it.
 */
async function runFiles(what: string, files: string[], concurrency: number, env: NodeJS.ProcessEnv, deadline: number): Promise<number> {
  if (stopSignal()) return 130;
  const t0 = performance.now();
  console.log(`\n# ${what}: ${files.length} files, ${concurrency} at a time`);
  // Node 20's runner sorts the files it is given by path: links named by rank make its order ours
  // (a test module still loads from its own path, so its imports and stack traces are unchanged).
  const ranked = await mkdtemp(join(tmpdir(), "fvt-order-"));
  const links = await Promise.all(
    files.map(async (f, i) => {
      const link = join(ranked, `${String(i).padStart(3, "0")}-${f.slice(f.lastIndexOf("/") + 1)}`);
      await symlink(resolve(f), link);
      return link;
    }),
  );
  const suite = spawn(
    process.execPath,
    [
      // each file's process notes its tests' progress: a file stopped for its time is said to have hung in one
      `--import=${join(repo, "dist", "scripts", "test-progress.js")}`,
      "--test",
      `--test-concurrency=${concurrency}`,
      `--test-timeout=${FILE_LIMIT_MS}`,
      "--test-reporter=spec",
      "--test-reporter-destination=stdout",
      `--test-reporter=${join(repo, "dist", "scripts", "test-times.js")}`,
      "--test-reporter-destination=stdout",
      ...links,
    ],
    { cwd: repo, env, stdio: "inherit", detached: true },
  );
  const forget = ownGroup(suite.pid, "runner");
  // A test that hangs must fail the run with a message, not use up the CI's time in silence.
  const watchdog = setTimeout(
    () => {
      console.error(`\n# the suite ran past ${SUITE_LIMIT_MIN} minutes in ${what}: stopped (the test running last above is the one that hangs)`);
      try {
        process.kill(-suite.pid!, "SIGKILL");
      } catch {
        // already gone
      }
    },
    Math.max(0, deadline - Date.now()),
  );
  const code: number = await new Promise((r) => suite.once("exit", (c, sig) => r(c ?? (sig ? 128 : 1))));
  forget();
  clearTimeout(watchdog);
  await rm(ranked, { recursive: true, force: true });
  console.log(`# ${what}: ${((performance.now() - t0) / 1000).toFixed(1)} s${code ? `, exit code ${code}` : ""}`);
  return code;
}

/**
 * `--tier NAME` (npm run test:unit): one tier only, two files at a time, without the stand-in
 * user; FORGEVM_* variables point at nothing, so a test that obeyed them fails.
 */
async function runTier(tier: string): Promise<number> {
  if (!(tier in TIERS)) throw new Error(`--tier takes one of ${Object.keys(TIERS).join(", ")}, got "${tier}"`);
  const runDir = await mkdtemp(join(tmpdir(), "fvt-run-"));
  try {
    const seed = join(runDir, "seed");
    await seedDataDir(preparedDataDir(), seed, [DEFAULT_IMAGE, CODE_IMAGE]);
    const env: NodeJS.ProcessEnv = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("FORGEVM_") && !k.startsWith("E2B_")));
    Object.assign(env, {
      HOME: join(runDir, "home"),
      FORGEVM_DATA_DIR: join(runDir, "not-a-data-dir"),
      FORGEVM_URL: "http://127.0.0.1:9",
      FORGEVM_ACCEL: "kvm",
      TEST_RUN_DIR: runDir,
      TEST_SEED_DATA_DIR: seed,
    });
    delete env.XDG_DATA_HOME;
    // Both run to their end before the run's directory goes, whichever fails first.
    if (tier !== "unit") for (const failed of await Promise.all([held(buildSharedBases(seed)), held(tier === "vm" ? frameworks() : Promise.resolve())])) if (failed) throw failed;
    return await runFiles(`tier ${tier}`, tierPaths(tier as Tier), 2, env, Date.now() + SUITE_LIMIT_MIN * 60_000);
  } finally {
    await rm(runDir, { recursive: true, force: true });
  }
}

/** Installs the frameworks' providers (see test-frameworks.ts), saying so. */
async function frameworks(): Promise<void> {
  console.log(`# the agent frameworks' providers: ${await installFrameworks()}`);
}

/**
 * `./setup.sh --quiet --test`: the Debian packages only the tests use (a registry, skopeo,
 * chromium, PostgreSQL, …), installed while the shared bases boot, since the bases need none of them.
 */
function testPackages(): Promise<void> {
  const p = spawn(join(repo, "setup.sh"), ["--quiet", "--test"], { cwd: repo, stdio: "inherit" });
  return new Promise((resolve, reject) =>
    p.once("exit", (code) => (code === 0 ? resolve() : reject(new Error(`./setup.sh --quiet --test failed with exit code ${code}: the tests' Debian packages are missing`)))),
  );
}

/**
 * The system image `system-image.test` uses, built with the CPU the tests leave (the files kept
 * apart wait on their deadlines, phase 3's on theirs): at the lowest CPU and I/O priority, in a session of its
 * own (scripts/system-image-ahead.ts). Root only, as the build is; the test file waits for it, or
 * builds it itself when this did not.
 */
function systemImageAhead(): Promise<void> {
  if (process.getuid?.() !== 0) return Promise.resolve();
  const p = spawn("ionice", ["-c3", "nice", "-n", "19", process.execPath, join(repo, "dist", "scripts", "system-image-ahead.js")], { cwd: repo, stdio: "inherit", detached: true });
  const forget = ownGroup(p.pid);
  p.once("exit", forget);
  return new Promise((resolve) => {
    const notBuilt = (why: string) => {
      console.log(`# the system image was not built ahead (${why}): its test builds it`);
      resolve();
    };
    p.once("error", (e) => notBuilt(e.message));
    p.once("exit", (code) => (code ? notBuilt(`exit code ${code}`) : resolve()));
  });
}

/** A promise's failure held as a value until it is awaited, so that it is never left unhandled. */
const held = (p: Promise<unknown>): Promise<unknown> =>
  p.then(
    () => null,
    (e: unknown) => e,
  );

async function main(): Promise<number> {
  listenForStop();
  const tierAt = process.argv.indexOf("--tier");
  if (tierAt >= 0) return runTier(process.argv[tierAt + 1] ?? "");
  const installed = preparedDataDir();
  const runDir = await mkdtemp(join(tmpdir(), "fvt-run-"));
  let user: User | null = null;
  const ready: Promise<unknown>[] = [];
  let ahead = Promise.resolve();
  try {
    const packages = held(testPackages());
    ready.push(packages);
    const seed = join(runDir, "seed");
    await seedDataDir(installed, seed, [DEFAULT_IMAGE, CODE_IMAGE]);
    // `--jobs N` runs the named files N at a time, as the full run does (a flake seen only beside another file).
    const args = process.argv.slice(2);
    const jobsAt = args.indexOf("--jobs");
    const jobs = jobsAt >= 0 ? Number(args[jobsAt + 1]) || 1 : 1;
    const files = jobsAt >= 0 ? args.filter((_, i) => i !== jobsAt && i !== jobsAt + 1) : args;
    // The shared bases boot their VMs while the stand-in user starts and the unit tier runs, and
    // the frameworks' providers are installed (mostly waiting on the registry) meanwhile; both are
    // awaited before the first file that needs them, and a failure is rethrown there.
    // They take about 50 s here: a VM that hangs while one is made (seen once: a disk request
    // QEMU never completed) fails the run at this limit, saying so, rather than at CI's; the VM is
    // killed with this process.
    const sharedBases = async () => {
      const t0 = performance.now();
      let timer: NodeJS.Timeout | undefined;
      const limit = new Promise<never>((_, reject) => {
        timer = setTimeout(
          () => reject(new Error(`the shared base snapshots were not made in ${SHARED_BASES_LIMIT_MIN} minutes: a VM of ${seed}/vms hung (its console.log says where)`)),
          SHARED_BASES_LIMIT_MIN * 60_000,
        );
      });
      try {
        const n = await Promise.race([buildSharedBases(seed), limit]);
        console.log(`# shared base snapshots: ${n} built in the seed in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
      } finally {
        clearTimeout(timer);
      }
    };
    const needsFrameworks = !files.length || files.some((f) => testName(f) === "frameworks");
    ready.push(held(sharedBases()), held(needsFrameworks ? frameworks() : Promise.resolve()));
    const awaitReady = async () => {
      for (const failed of await Promise.all(ready)) if (failed) throw failed;
    };
    // The user's own image comes from a registry: the packages first.
    const noPackages = await packages;
    if (noPackages) throw noPackages;
    user = await startUser(runDir, installed);
    const before: Before = { files: await listing(user.dataDir), lastEvent: Math.max(0, ...(await eventsAfter(user, 0)).map((e) => e.id)) };
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      HOME: user.home,
      FORGEVM_DATA_DIR: user.dataDir,
      FORGEVM_SERVER_PORT: new URL(user.url).port,
      FORGEVM_AUTH_API_KEY: USER_KEY,
      FORGEVM_URL: user.url,
      FORGEVM_API_KEY: USER_KEY,
      FORGEVM_DEFAULTS_MEMORY_MB: "384",
      FORGEVM_DEFAULTS_IMAGE: user.image,
      FORGEVM_ACCEL: "kvm",
      FORGEVM_JAIL: "off",
      // A user of E2B's SDKs pointed at their own server: the E2B tests must set their own.
      E2B_API_URL: user.url,
      E2B_SANDBOX_URL: user.url,
      E2B_API_KEY: USER_KEY,
      E2B_DEBUG: "true",
      TEST_RUN_DIR: runDir,
      TEST_SEED_DATA_DIR: seed,
    };
    delete env.XDG_DATA_HOME;
    const deadline = Date.now() + SUITE_LIMIT_MIN * 60_000;
    let code = 0;
    if (files.length) {
      await awaitReady();
      code = await runFiles("the files named", files, jobs, env, deadline);
    } else {
      // Unit first: a broken build fails in seconds, before any test boots a VM.
      code = await runFiles("tier unit", tierPaths("unit"), 2, env, deadline);
      // Never awaited before a file: the test that needs it waits for the build itself.
      if (code === 0) ahead = systemImageAhead();
      await awaitReady();
      if (code === 0) {
        const rest = (["api", "vm", "cluster"] as const).flatMap((t) => tierPaths(t));
        const together = longestFirst(rest.filter((f) => !(testName(f) in APART) && !(testName(f) in HOST_STATE)));
        const hostState = longestFirst(rest.filter((f) => testName(f) in HOST_STATE));
        // In APART's order, which says which two start together.
        const apart = Object.keys(APART).flatMap((name) => rest.filter((f) => testName(f) === name));
        // The files kept apart go first, while the system image builds with what CPU they leave.
        code = (await runFiles("the files kept apart, two at a time among themselves", apart, 2, env, deadline)) || code;
        code = (await runFiles("tiers api, vm and cluster, two files at a time", together, 2, env, deadline)) || code;
        code = (await runFiles("the files that change host state, two at a time among themselves", hostState, 2, env, deadline)) || code;
      } else console.error("# tier unit failed: the VM tiers were not run");
    }
    // CI keeps the end of the output: what failed, and why, is said again there.
    const failed = await readFile(failuresFile(runDir), "utf8").catch(() => "");
    if (failed) console.log(`\n# what failed in this run, again:\n${failed}`);
    const problems = await checkUser(user, before);
    if (problems.length) {
      console.error("\n# the suite did not leave the user's machine alone:");
      for (const p of problems) console.error(`#   ${p}`);
      return code || 1;
    }
    console.log("# the user's server, sandbox, snapshot, image and data directory are as they were");
    return stopSignal() ? 130 : code;
  } finally {
    // Nothing started here outlives the run: the bases' VMs are done before their directory goes.
    await Promise.all([...ready, ahead]);
    if (user) {
      // A stop leaves sandboxes running (server.on_stop: keep): the stand-in's own goes first.
      await api(user, "DELETE", `/sandboxes/${user.sandbox}`).catch(() => null);
      user.server.kill("SIGTERM");
      await new Promise((r) => (user!.server.exitCode !== null ? r(null) : user!.server.once("exit", r)));
      user.registry.stop();
    }
    await rm(runDir, { recursive: true, force: true });
  }
}

main().then(
  (code) => process.exit(code),
  (e) => {
    console.error(`test-suite: ${(e as Error).stack ?? e}`);
    process.exit(1);
  },
);
