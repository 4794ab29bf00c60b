// The unmodified `@e2b/code-interpreter@2.8.0` against a real server: Sandbox.create() gives a
// code-interpreter-v1 sandbox (the built-in code image) whose runCode keeps state, streams
// output, reports errors, survives timeouts and returns charts; contexts in other languages.
import assert from "node:assert/strict";
import { readFile, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, describe, it } from "node:test";
import { Sandbox } from "@e2b/code-interpreter";
import type { FastifyInstance } from "fastify";
import { buildApp } from "../../src/compose/app.js";
import { CODE_IMAGE, DEFAULT_IMAGE } from "../../src/core/forge.js";
import type { Forge } from "../../src/index.js";
import { e2bEnv } from "../e2b-env.js";
import { run } from "../../src/util/process.js";
import { assertNoVmLeft, childEnv, openForge } from "../helpers.js";

const API_KEY = "e2b_feedface";
let forge: Forge;
let app: FastifyInstance;
let sbx: Sandbox;
let base: string;
const repo = fileURLToPath(new URL("../../../", import.meta.url));

before(async () => {
  forge = await openForge({ reapIntervalMs: 500 }, [DEFAULT_IMAGE, CODE_IMAGE]);
  app = await buildApp({ forge, version: "test", apiKey: API_KEY });
  base = await app.listen({ host: "127.0.0.1", port: 0 });
  e2bEnv(base, API_KEY);
  sbx = await Sandbox.create({ timeoutMs: 600_000 });
});

after(async () => {
  await app?.close();
  await forge?.close();
  if (forge) await assertNoVmLeft(forge);
});

describe("runCode", () => {
  it("keeps state between calls and returns the last expression", async () => {
    const first = await sbx.runCode("x = 20\nimport os\nos.getcwd()");
    assert.equal(first.text, "'/home/user'");
    const r = await sbx.runCode("x + 22");
    assert.equal(r.text, "42");
    assert.equal(r.error, undefined);
    assert.ok((r.executionCount ?? 0) >= 2);
  });

  it("streams stdout and stderr as they are produced", async () => {
    const out: string[] = [];
    const err: string[] = [];
    const r = await sbx.runCode("import sys, time\nprint('one', flush=True)\ntime.sleep(0.5)\nprint('two', file=sys.stderr)", {
      onStdout: (m) => void out.push(m.line),
      onStderr: (m) => void err.push(m.line),
    });
    assert.equal(out.join(""), "one\n");
    assert.equal(err.join(""), "two\n");
    assert.equal(r.logs.stdout.join(""), "one\n");
  });

  it("reports an error with its name, value and traceback", async () => {
    const r = await sbx.runCode("def f():\n    return 1 / 0\nf()");
    assert.equal(r.error?.name, "ZeroDivisionError");
    assert.equal(r.error?.value, "division by zero");
    assert.match(r.error?.traceback ?? "", /line 2, in f/);
    assert.equal((await sbx.runCode("x")).text, "20", "the context lives on after an error");
  });

  it("interrupts code at its timeout and keeps the context", async () => {
    await assert.rejects(sbx.runCode("import time\ntime.sleep(60)", { timeoutMs: 1500 }), /timed out|Timeout/i);
    const r = await sbx.runCode("x * 2");
    assert.equal(r.text, "40");
  });

  it("returns a matplotlib chart as a PNG", async () => {
    const r = await sbx.runCode("import matplotlib.pyplot as plt\nplt.plot([1, 4, 9])\nplt.title('squares')\nplt.show()", { timeoutMs: 120_000 });
    const png = r.results.find((x) => x.png)?.png;
    assert.ok(png, JSON.stringify(r));
    assert.deepEqual([...Buffer.from(png, "base64").subarray(0, 4)], [0x89, 0x50, 0x4e, 0x47]);
  });

  it("runs other languages in contexts of their own", async () => {
    const js = await sbx.createCodeContext({ language: "javascript" });
    assert.equal((await sbx.runCode("const a = 20; a + 22", { context: js })).text, "42");
    assert.equal((await sbx.runCode("a * 2", { context: js })).text, "40");
    const sh = await sbx.createCodeContext({ language: "bash", cwd: "/tmp" });
    assert.equal((await sbx.runCode("cd /etc; pwd", { context: sh })).logs.stdout.join(""), "/etc\n");
    assert.equal((await sbx.runCode("pwd", { context: sh })).logs.stdout.join(""), "/etc\n");
    const listed = await sbx.listCodeContexts();
    assert.ok(listed.some((c) => c.id === js.id) && listed.some((c) => c.id === sh.id));
    await sbx.restartCodeContext(js);
    assert.equal((await sbx.runCode("typeof a", { context: js })).text, "'undefined'");
    await sbx.removeCodeContext(sh);
    assert.ok(!(await sbx.listCodeContexts()).some((c) => c.id === sh.id));
    // (requestTimeoutMs: 0 — the SDK leaves its request timer running when the answer is an error, which would hold this process open for a minute.)
    await assert.rejects(sbx.runCode("1", { context: sh, requestTimeoutMs: 0 }), /not found/i);
  });
});

describe("the E2B guide", () => {
  it("its snippet runs unchanged in a program that has only the E2B variables the guide sets", async () => {
    const readme = await readFile(join(repo, "docs", "e2b.md"), "utf8");
    const m = /<!-- snippet:e2b -->\s*```js\n([\s\S]*?)```/.exec(readme);
    assert.ok(m, "docs/e2b.md has the E2B snippet");
    const vars = /```sh\n(export E2B_API_URL=[\s\S]*?)```/.exec(readme);
    assert.ok(vars, "docs/e2b.md has the E2B variables");
    const env: Record<string, string> = {};
    // The guide's addresses become this server's, its placeholder key this server's key.
    for (const [, name, value] of vars[1].matchAll(/^export (E2B_\w+)=(\S+)/gm)) env[name] = /^https?:/.test(value) ? base : name === "E2B_API_KEY" ? API_KEY : value;
    assert.deepEqual(Object.keys(env).sort(), ["E2B_API_KEY", "E2B_API_URL", "E2B_SANDBOX_URL", "E2B_VOLUME_API_URL"]);
    const file = join(repo, `.readme-e2b-${process.pid}.mjs`);
    await writeFile(file, m[1]);
    try {
      const before = new Set(forge.sandboxes.list().map((s) => s.id));
      const { stdout } = await run(process.execPath, [file], { cwd: repo, env: childEnv(env) });
      assert.equal(stdout, "42\nhello from user\n");
      assert.deepEqual(
        forge.sandboxes.list().filter((s) => !before.has(s.id)),
        [],
        "the snippet's sandbox is gone",
      );
    } finally {
      await rm(file, { force: true });
    }
  });
});
