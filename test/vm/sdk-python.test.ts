// The Python SDK (sdk/python, package `forgevm`, standard library only) against a live server
// with real VMs: its own unittest suite, then an offline pip install that runs the README example.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtemp, readFile, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { after, before, it } from "node:test";
import type { RunningServer } from "../../src/compose/serve.js";
import { DEFAULT_PORT } from "../../src/config/config.js";
import { childEnv, startTestServer } from "../helpers.js";

/** The address the documents' examples name; the tests put their own server's in its place. */
const DOCS_URL = `http://localhost:${DEFAULT_PORT}`;
const run = promisify(execFile);
const repo = fileURLToPath(new URL("../../..", import.meta.url));
const sdk = join(repo, "sdk", "python");
const KEY = "py-sdk-test-key";
let server: RunningServer;
let dir: string;
// No bytecode caches in the repository; the server and key as a user would set them for the CLI.
let env: NodeJS.ProcessEnv;

before(async () => {
  server = await startTestServer((c) => (c.auth.api_key = KEY));
  env = childEnv({ FORGEVM_URL: server.url, FORGEVM_API_KEY: KEY, PYTHONDONTWRITEBYTECODE: "1" });
  dir = await mkdtemp(join(tmpdir(), "fvm-py-"));
});

after(async () => {
  await server?.close();
  await rm(dir, { recursive: true, force: true });
});

it("the Python SDK's suite passes against the server (every method, errors, files, streams, context managers, tools, the product document's snippets)", async () => {
  const r = await run("python3", ["-m", "unittest", "-v", "tests.test_live"], {
    cwd: sdk,
    env: { ...env, PYTHONPATH: sdk, FORGEVM_FIXTURES: join(repo, "test", "fixtures") },
    timeout: 300_000,
  }).catch((e) => e);
  const report = `${r.stdout ?? ""}${r.stderr ?? ""}`;
  assert.equal(r.code ?? 0, 0, report);
  assert.match(report, /Ran 17 tests/);
  assert.doesNotMatch(report, /skipped/);
  // Nothing the suite started is left running.
  assert.deepEqual(
    server.forge.sandboxes.list().map((s) => s.id),
    [],
  );
});

it("builds a wheel and installs with pip offline (no package index), then runs the README example", async () => {
  const venv = join(dir, "venv");
  await run("python3", ["-m", "venv", venv]);
  const pip = join(venv, "bin", "pip");
  await run(pip, ["wheel", "--no-index", "--no-deps", "-q", "-w", join(dir, "wheels"), sdk], { env });
  const [wheel] = await readdir(join(dir, "wheels"));
  assert.equal(wheel, "forgevm-0.1.0-py3-none-any.whl");
  const listing = (await run("python3", ["-m", "zipfile", "-l", join(dir, "wheels", wheel)])).stdout;
  assert.match(listing, /forgevm\/py\.typed/);
  await run(pip, ["install", "--no-index", "-q", sdk], { env });
  const readme = await readFile(join(sdk, "README.md"), "utf8");
  // The only change: the test server's address.
  const example = /```python\n([\s\S]*?)```/.exec(readme)![1].replaceAll(DOCS_URL, server.url);
  const app = await mkdtemp(join(dir, "app-"));
  await writeFile(join(app, "example.py"), example);
  const r = await run(join(venv, "bin", "python"), [join(app, "example.py")], { cwd: app, env, timeout: 120_000 });
  assert.equal(r.stdout, "42\n4\ntick 1\ntick 2\ntick 3\nexit code 0\n");
});
