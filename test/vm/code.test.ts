// Stateful code execution through our own interfaces: the REST API (buffered and streamed), the
// TypeScript SDK's runCode and contexts, and `forgevm code`, against a real server and VM; bad
// input gets 4xx errors that name what is wrong.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { after, before, describe, it } from "node:test";
import { Client, NotFoundError, BadRequestError, type Sandbox } from "forgevm";
import type { RunningServer } from "../../src/compose/serve.js";
import { apiRequest, childEnv, startTestServer } from "../helpers.js";

const KEY = "code-test-key";
const cli = fileURLToPath(new URL("../../src/cli/main.js", import.meta.url));
let server: RunningServer;
let client: Client;
let sb: Sandbox;

before(async () => {
  server = await startTestServer((c) => (c.auth.api_key = KEY));
  client = new Client({ baseUrl: server.url, apiKey: KEY });
  sb = await client.spawn({ ttl: "10m" });
});

after(async () => {
  await sb?.destroy().catch(() => {});
  await server?.close();
});

/** Runs the CLI with this server; resolves with its exit code and output. */
function forgevm(args: string[], stdin?: string): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = execFile(process.execPath, [cli, "--server", server.url, ...args], { env: childEnv({ FORGEVM_API_KEY: KEY }) }, (err, stdout, stderr) =>
      resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
    child.stdin!.end(stdin ?? "");
  });
}

describe("runCode through the SDK", () => {
  it("keeps state, returns the last expression and prints as it goes", async () => {
    const first = await sb.runCode("total = 0\nfor i in range(5):\n    total += i\ntotal");
    assert.equal(first.results[0].text, "10");
    assert.equal(first.results[0].is_main_result, true);
    assert.equal(first.error, null);
    const chunks: string[] = [];
    const t0 = Date.now();
    let firstAt = 0;
    const r = await sb.runCode("import time\nprint('a', flush=True)\ntime.sleep(1)\nprint('b')\ntotal * 2", {
      onStdout: (t) => {
        firstAt ||= Date.now();
        chunks.push(t);
      },
    });
    assert.equal(chunks.join(""), "a\nb\n");
    assert.ok(firstAt - t0 < 900, "the first line came before the code ended");
    assert.equal(r.results[0].text, "20");
    assert.ok(r.execution_count >= 2);
    assert.match(r.context, /^[0-9a-f-]{36}$/);
  });

  it("reports exceptions as the execution's error, and interrupts at a timeout without losing state", async () => {
    const e = await sb.runCode("{}['missing']");
    assert.equal(e.error?.name, "KeyError");
    assert.match(e.error?.traceback ?? "", /KeyError: 'missing'/);
    const t = await sb.runCode("while True: pass", { timeout: "1s" });
    assert.equal(t.error?.name, "TimeoutError");
    assert.equal((await sb.runCode("total")).results[0].text, "10");
  });

  it("runs bash in contexts of its own; contexts restart and go", async () => {
    const ctx = await sb.createCodeContext({ language: "bash", cwd: "/tmp" });
    assert.deepEqual([ctx.language, ctx.cwd], ["bash", "/tmp"]);
    assert.equal((await sb.runCode("X=5; cd /etc", { context: ctx })).error, null);
    const r = await sb.runCode('echo "$X $(pwd)"; exit_status() { return 3; }; exit_status', { context: ctx });
    assert.equal(r.stdout, "5 /etc\n");
    assert.equal(r.error?.name, "ExitCode");
    assert.ok((await sb.listCodeContexts()).some((c) => c.id === ctx.id));
    await sb.restartCodeContext(ctx);
    assert.equal((await sb.runCode('echo "[$X] $(pwd)"', { context: ctx })).stdout, "[] /tmp\n");
    await sb.deleteCodeContext(ctx);
    await assert.rejects(sb.runCode("true", { context: ctx }), NotFoundError);
  });

  it("refuses what it cannot run with a clear error", async () => {
    await assert.rejects(sb.runCode("1", { language: "cobol" }), (e: Error) => e instanceof BadRequestError && /language "cobol"/.test(e.message));
    await assert.rejects(sb.runCode("1", { language: "javascript" }), (e: Error) => e instanceof BadRequestError && /node is not installed/.test(e.message));
    const py = (await sb.listCodeContexts()).find((c) => c.language === "python")!;
    await assert.rejects(sb.runCode("true", { context: py, language: "bash" }), /runs python/);
  });
});

describe("the REST API and the CLI", () => {
  const api = (method: string, path: string, body?: unknown) => apiRequest(server.url, method, path, body, { "X-API-Key": KEY });

  it("validates the request and names the field", async () => {
    for (const [body, field] of [
      [{}, "code"],
      [{ code: 1 }, "code"],
      [{ code: "1", langauge: "python" }, "langauge"],
      [{ code: "1", timeout: "soon" }, "timeout"],
    ] as const) {
      const r = await api("POST", `/sandboxes/${sb.id}/code`, body);
      assert.equal(r.status, 400, JSON.stringify(r.body));
      assert.match(r.body.message, new RegExp(field));
    }
    assert.equal((await api("POST", `/sandboxes/${sb.id}/code`, { code: "1", context: "nope" })).status, 404);
    assert.equal((await api("POST", "/sandboxes/sb-nope/code", { code: "1" })).status, 404);
    assert.equal((await api("DELETE", `/sandboxes/${sb.id}/code/contexts/nope`)).status, 404);
  });

  it("streams NDJSON events ending with the end line", async () => {
    const res = await fetch(`${server.url}/api/v1/sandboxes/${sb.id}/code`, {
      method: "POST",
      headers: { "X-API-Key": KEY, "Content-Type": "application/json" },
      body: JSON.stringify({ code: "print('x')\n6 * 7", stream: true }),
    });
    assert.equal(res.headers.get("content-type"), "application/x-ndjson");
    const lines = (await res.text())
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l));
    assert.deepEqual(lines[0], { type: "stdout", text: "x\n" });
    assert.ok(lines.some((l) => l.type === "result" && l.text === "42"));
    assert.equal(lines.at(-1).type, "end");
  });

  it("forgevm code runs a program from standard input and exits 1 when it raised", async () => {
    const ok = await forgevm(["code", sb.id, "-"], "import sys\nprint('out')\nprint('err', file=sys.stderr)\ntotal + 1\n");
    assert.equal(ok.code, 0, ok.stderr);
    assert.equal(ok.stdout, "out\n11\n");
    assert.equal(ok.stderr, "err\n");
    const bad = await forgevm(["code", sb.id], "1/0\n");
    assert.equal(bad.code, 1);
    assert.match(bad.stderr, /ZeroDivisionError/);
    const json = await forgevm(["code", sb.id, "--json", "-l", "bash"], "echo hi\n");
    assert.equal(JSON.parse(json.stdout).stdout, "hi\n");
    const listed = await forgevm(["code", "contexts", sb.id]);
    assert.match(listed.stdout, /bash/);
  });
});
