// ForgeVM as an npm package (CHANGELOG.md, docs/getting-started.md): `npm pack` of this checkout,
// `npm install -g` of it into a temporary prefix, `forgevm setup -y` from the installed package on
// a data directory, and `forgevm run -- echo ok` in a real VM. Then `forgevm upgrade` to a newer
// package, and to one that is broken, which is installed, fails its self-check and is replaced by
// the version before it; the data directory is not touched by either.
// npm runs with a cache of the test's own, and SQLite's native binding comes from a local
// prebuild of the checkout's (npm_config_better_sqlite3_local_prebuilds, as an operator without
// access to its download host would give it), so that no install compiles it again. The npm
// cache starts empty: the first install fetches the package's dependencies from the registry.
import assert from "node:assert/strict";
import { execFile, spawn } from "node:child_process";
import { mkdir, mkdtemp, readdir, readFile, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { before, describe, it } from "node:test";
import { CODE_IMAGE, DEFAULT_IMAGE } from "../../src/images/store.js";
import { INSTALL_ROOT, PACKAGE } from "../../src/setup/install.js";
import { childEnv, removeAtExit, runCli, testDataDir } from "../helpers.js";

const run = promisify(execFile);
let work: string;
let prefix: string;
let forgevm: string;
let env: NodeJS.ProcessEnv;
let dataDir: string;

/** Runs the installed forgevm with stdin closed (`run` passes stdin on, and waits for its end); its exit status and output. */
const installed = (args: string[]) =>
  new Promise<{ status: number | null; stdout: string; stderr: string }>((resolve) => {
    const p = spawn(forgevm, args, { env, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    p.stdout.on("data", (d) => (stdout += d));
    p.stderr.on("data", (d) => (stderr += d));
    p.on("close", (status) => resolve({ status, stdout, stderr }));
  });

/** A package of this checkout under another version; `breakIt` makes its server fail to load. */
async function variant(version: string, breakIt = false): Promise<string> {
  const dir = join(work, `v${version}`);
  await mkdir(dir);
  await run("tar", ["xzf", join(work, `${PACKAGE.name}-${PACKAGE.version}.tgz`), "-C", dir]);
  const pkgFile = join(dir, "package", "package.json");
  await writeFile(pkgFile, JSON.stringify({ ...JSON.parse(await readFile(pkgFile, "utf8")), version }, null, 2));
  if (breakIt) await writeFile(join(dir, "package", "dist", "src", "compose", "serve.js"), 'throw new Error("broken on purpose");\n');
  await run("npm", ["pack", join(dir, "package"), "--pack-destination", dir, "--loglevel=error"], { env });
  return join(dir, `${PACKAGE.name}-${version}.tgz`);
}

/** Every file of a directory with its size and time: what "untouched" is checked against. */
async function listing(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const e of await readdir(dir, { recursive: true, withFileTypes: true })) {
    if (!e.isFile()) continue;
    const p = join(e.parentPath, e.name);
    const s = await stat(p);
    out.push(`${p} ${s.size} ${s.mtimeMs}`);
  }
  return out.sort();
}

before(async () => {
  work = await mkdtemp(join(tmpdir(), "fvt-npm-"));
  removeAtExit(work);
  prefix = join(work, "prefix");
  forgevm = join(prefix, "bin", "forgevm");
  const prebuilds = join(work, "prebuilds");
  await mkdir(prebuilds);
  const sqlite = JSON.parse(await readFile(join(INSTALL_ROOT, "node_modules", "better-sqlite3", "package.json"), "utf8")).version;
  await run("tar", [
    "czf",
    join(prebuilds, `better-sqlite3-v${sqlite}-node-v${process.versions.modules}-linux-x64.tar.gz`),
    "-C",
    join(INSTALL_ROOT, "node_modules", "better-sqlite3"),
    "build/Release/better_sqlite3.node",
  ]);
  // After the first install, the packages come from the cache without asking the registry again.
  env = childEnv({
    npm_config_cache: join(work, "npm-cache"),
    npm_config_prefer_offline: "true",
    npm_config_better_sqlite3_local_prebuilds: prebuilds,
    npm_config_update_notifier: "false",
  });
  await run("npm", ["pack", INSTALL_ROOT, "--pack-destination", work, "--loglevel=error"], { env });
});

describe("the npm package", () => {
  it("npm pack, npm install -g into a prefix, forgevm setup -y, forgevm run -- echo ok", async () => {
    await run("npm", ["install", "-g", "--prefix", prefix, join(work, `${PACKAGE.name}-${PACKAGE.version}.tgz`), "--no-audit", "--no-fund", "--loglevel=error"], { env });
    const v = JSON.parse((await installed(["version", "--json"])).stdout);
    assert.equal(v.version, PACKAGE.version);
    assert.equal(v.installed_as, "package");
    assert.equal(v.from, join(prefix, "lib", "node_modules", PACKAGE.name));

    // A data directory with the kernel, images and base snapshots already made (the setup guide's own test builds from nothing).
    dataDir = await testDataDir([DEFAULT_IMAGE, CODE_IMAGE]);
    const setup = await installed(["--data-dir", dataDir, "setup", "-y"]);
    assert.equal(setup.status, 0, setup.stderr);
    assert.match(setup.stdout, /setup: system packages: already installed/);
    assert.match(setup.stdout, /setup: initramfs: (built|up to date)/, "from the agent the package ships");
    assert.match(setup.stdout, /setup: a test sandbox booted and ran `uname -sr`/);
    const ok = await installed(["--data-dir", dataDir, "run", "--rm", "--", "echo", "ok"]);
    assert.equal(ok.stdout, "ok\n", ok.stderr);
  });

  it("forgevm upgrade installs a newer package, and installs the previous one again when the new one fails its self-check", async () => {
    const untouched = await listing(dataDir);
    const newer = await variant("0.99.0");
    const broken = await variant("0.99.1", true);
    const up = await installed(["upgrade", newer, "--json"]);
    assert.equal(up.status, 0, up.stderr);
    assert.deepEqual(JSON.parse(up.stdout), { upgraded: true, from: PACKAGE.version, to: "0.99.0", rolled_back: false, problems: [] });
    assert.equal(JSON.parse((await installed(["version", "--json"])).stdout).version, "0.99.0");

    const down = await installed(["upgrade", broken, "--json"]);
    assert.equal(down.status, 1);
    const r = JSON.parse(down.stdout);
    assert.equal(r.upgraded, false);
    assert.equal(r.to, "0.99.1");
    assert.equal(r.rolled_back, true);
    assert.match(r.problems.join("\n"), /the server's modules do not load: broken on purpose/);
    assert.equal(JSON.parse((await installed(["version", "--json"])).stdout).version, "0.99.0", "the version before is back");
    assert.equal((await installed(["self-check"])).status, 0);
    assert.deepEqual(await listing(dataDir), untouched, "the data directory is as it was");

    // A checkout is not upgraded by npm.
    const fromCheckout = await runCli(["upgrade"], childEnv());
    assert.equal(fromCheckout.status, 1);
    assert.match(fromCheckout.stderr, /is a checkout .*git pull && \.\/setup\.sh/);
  });
});
