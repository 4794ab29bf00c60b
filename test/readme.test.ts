// The README's TypeScript snippet, copied verbatim into the repository folder and run.
import assert from "node:assert/strict";
import { readFile, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { it } from "node:test";
import { run } from "../src/util/process.js";
import { CODE_IMAGE, DEFAULT_IMAGE } from "../src/core/forge.js";
import { childEnv, startTestServer, testDataDir } from "./helpers.js";

const repo = fileURLToPath(new URL("../../", import.meta.url));

it("the README hello snippet prints 42 (on a data directory of its own, named by FORGEVM_DATA_DIR)", async () => {
  const readme = await readFile(join(repo, "README.md"), "utf8");
  const m = /<!-- snippet:hello -->\s*```js\n([\s\S]*?)```/.exec(readme);
  assert.ok(m, "README has the hello snippet");
  const file = join(repo, `.readme-hello-${process.pid}.mjs`);
  await writeFile(file, m[1]);
  const dataDir = await testDataDir();
  try {
    const { stdout } = await run(process.execPath, [file], { cwd: repo, env: childEnv({ FORGEVM_DATA_DIR: dataDir }) });
    assert.equal(stdout, "42\n");
  } finally {
    await rm(file, { force: true });
    await rm(dataDir, { recursive: true, force: true });
  }
});

it("the README quick start names the set-up and test commands CI runs", async () => {
  const readme = await readFile(join(repo, "README.md"), "utf8");
  const ci = await readFile(join(repo, ".ci", "run"), "utf8");
  assert.match(readme, /```sh\n\.\/setup\.sh && forgevm serve\n```/);
  assert.match(readme, /```sh\nnpm test\n```/);
  assert.match(ci, /^\.\/setup\.sh$/m);
  assert.match(ci, /^npm test$/m);
});

it("the README E2B snippet runs unchanged against a server named by the three E2B variables", async () => {
  const readme = await readFile(join(repo, "README.md"), "utf8");
  const m = /<!-- snippet:e2b -->\s*```js\n([\s\S]*?)```/.exec(readme);
  assert.ok(m, "README has the E2B snippet");
  const vars = /```sh\n(export E2B_API_URL=[\s\S]*?)```/.exec(readme);
  assert.ok(vars, "README has the E2B variables");
  const key = "e2b_0123abcd";
  const server = await startTestServer((c) => (c.auth.api_key = key), [DEFAULT_IMAGE, CODE_IMAGE]);
  const file = join(repo, `.readme-e2b-${process.pid}.mjs`);
  await writeFile(file, m[1]);
  try {
    // The variables as the README sets them, with this server's address and key.
    const env: Record<string, string> = {};
    for (const [, name, value] of vars[1].matchAll(/^export (E2B_\w+)=(\S+)/gm)) env[name] = value.replace("http://127.0.0.1:7423", server.url).replace("e2b_0000", key);
    assert.deepEqual(Object.keys(env).sort(), ["E2B_API_KEY", "E2B_API_URL", "E2B_SANDBOX_URL"]);
    const { stdout } = await run(process.execPath, [file], { cwd: repo, env: childEnv(env) });
    assert.equal(stdout, "42\nhello from user\n");
    assert.deepEqual(
      server.forge.list().map((s) => s.id),
      [],
    );
  } finally {
    await rm(file, { force: true });
    await server.close();
  }
});
