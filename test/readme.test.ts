// The README's TypeScript snippet, copied verbatim into the repository folder and run.
import assert from "node:assert/strict";
import { readFile, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { it } from "node:test";
import { run } from "../src/util/process.js";
import { childEnv, testDataDir } from "./helpers.js";

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
