// The TypeScript SDK (sdk/typescript, package `forgevm`) against a live server with real VMs.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { after, before, describe, it } from "node:test";
import {
  AuthenticationError,
  BadRequestError,
  Client,
  ConnectionError,
  ForgevmError,
  NotFoundError,
  SandboxNotFoundError,
  anthropicTools,
  handleToolCall,
  openaiTools,
  type Sandbox,
} from "forgevm";
import type { RunningServer } from "../../src/compose/serve.js";
import { DEFAULT_PORT } from "../../src/config/config.js";
import { childEnv, startTestServer, waitFor } from "../helpers.js";

/** The address the documents' examples name; the tests put their own server's in its place. */
const DOCS_URL = `http://localhost:${DEFAULT_PORT}`;
const run = promisify(execFile);
const repo = fileURLToPath(new URL("../../..", import.meta.url));
const KEY = "sdk-test-key";

let server: RunningServer;
/** The test server; the product document's snippets name the default address (DOCS_URL) instead. */
let URL_: string;
let client: Client;
let sb: Sandbox;

before(async () => {
  server = await startTestServer((c) => (c.auth.api_key = KEY));
  URL_ = server.url;
  client = new Client({ baseUrl: URL_, apiKey: KEY, timeout: 30_000 });
  sb = await client.spawn({ ttl: "10m", metadata: { test: "sdk" } });
});

after(async () => {
  await sb?.destroy().catch(() => {});
  await server?.close();
});

describe("TypeScript SDK: client", () => {
  it("spawns, gets, lists, refreshes, extends and reports on the server", async () => {
    assert.match(sb.id, /^sb-[0-9a-f]{8}$/);
    assert.equal(sb.state, "running");
    assert.equal(sb.memoryMb, 512);
    assert.equal((await client.get(sb.id)).id, sb.id);
    assert.ok((await client.list()).some((s) => s.id === sb.id));
    const before = sb.expiresAt!.getTime();
    const extended = await sb.extendTtl("2h");
    assert.equal(extended, sb, "extendTtl resolves with the sandbox");
    assert.ok(extended.expiresAt!.getTime() > before);
    assert.equal((await sb.refresh()).state, "running");
    assert.equal((await client.health()).status, "ok");
    assert.equal((await client.poolStatus()).enabled, false);
    assert.deepEqual(
      (await client.providers()).map((p) => p.name),
      ["qemu"],
    );
    assert.equal(typeof (await client.prune()), "number");
    assert.ok(Array.isArray(await client.snapshots()));
    assert.deepEqual(await client.mcpAudit({ session: "no-such-session" }), []);
    assert.equal(new Client("http://h:1/").baseUrl, "http://h:1");
    assert.equal(new Client({ host: "h", port: 2 }).baseUrl, "http://h:2");
  });

  it("manages templates", async () => {
    await client.templates.create({ name: "sdk-tpl", env: { GREETING: "hi" }, memory_mb: 256 });
    assert.equal((await client.templates.get("sdk-tpl")).memory_mb, 256);
    assert.ok((await client.templates.list()).some((t) => t.name === "sdk-tpl"));
    await client.templates.update("sdk-tpl", { env: { GREETING: "hello" }, memory_mb: 256 });
    const t = await client.templates.spawn("sdk-tpl");
    assert.equal((await t.exec("echo $GREETING")).stdout, "hello\n");
    await t.destroy();
    await client.templates.delete("sdk-tpl");
    await assert.rejects(client.templates.get("sdk-tpl"), NotFoundError);
  });

  it("throws typed errors: unknown sandbox, bad key, bad input, unreachable server", async () => {
    const nf = await client.get("sb-00000000").catch((e) => e);
    assert.ok(nf instanceof SandboxNotFoundError && nf instanceof ForgevmError, String(nf));
    assert.equal(nf.sandboxId, "sb-00000000");
    assert.equal(nf.statusCode, 404);
    const bad = await new Client({ baseUrl: URL_, apiKey: "wrong" }).list().catch((e) => e);
    assert.ok(bad instanceof AuthenticationError, String(bad));
    assert.equal(bad.code, "UNAUTHORIZED");
    const none = await new Client(URL_).health().catch((e) => e);
    assert.ok(none instanceof AuthenticationError);
    const br = await client.spawn({ memory_mb: 1 }).catch((e) => e);
    assert.ok(br instanceof BadRequestError, String(br));
    assert.match(br.message, /memory_mb/);
    const down = await new Client({ baseUrl: "http://127.0.0.1:9", timeout: 3000 }).list().catch((e) => e);
    assert.ok(down instanceof ConnectionError, String(down));
    assert.match(down.message, /cannot reach the ForgeVM server at http:\/\/127.0.0.1:9/);
    const gone = await client.spawn();
    await gone.destroy();
    await gone.destroy(); // idempotent
    assert.ok((await gone.exec("true").catch((e) => e)) instanceof SandboxNotFoundError);
  });

  it("withSandbox and await using destroy the sandbox even when the body throws", async () => {
    let id = "";
    await assert.rejects(
      client.withSandbox({}, async (s) => {
        id = s.id;
        throw new Error("boom");
      }),
      /boom/,
    );
    await assert.rejects(client.get(id), SandboxNotFoundError);
    let id2 = "";
    await assert.rejects(
      (async () => {
        await using s = await client.spawn();
        id2 = s.id;
        throw new Error("boom2");
      })(),
      /boom2/,
    );
    await assert.rejects(client.get(id2), SandboxNotFoundError);
  });

  it("forks and snapshots a sandbox", async () => {
    await sb.writeFile("/root/state.txt", "forked");
    const [child] = await sb.fork({ count: 1 });
    assert.equal(await child.readFile("/root/state.txt"), "forked");
    assert.equal((await child.exec("hostname")).stdout.trim(), child.id);
    await child.destroy();
    const snap = await sb.snapshot("sdk-snap");
    assert.equal(snap.name, "sdk-snap");
    const [r] = await client.restore("sdk-snap");
    assert.equal(await r.readFile("/root/state.txt"), "forked");
    await r.destroy();
    await client.deleteSnapshot("sdk-snap");
  });
});

describe("TypeScript SDK: network and secrets", () => {
  it("spawns with an allowlist, ports and secrets; reads and changes them live", async () => {
    const n = await client.spawn({ allow: ["@pypi"], ports: ["0:8000"], secrets: { SDK_SECRET: "ts-value" } });
    try {
      assert.equal(n.info.network?.mode, "allowlist");
      const net = await n.network();
      assert.deepEqual(net.allow, ["@pypi"]);
      assert.equal(net.ports[0].host_ip, "127.0.0.1");
      assert.equal(net.ports[0].guest_port, 8000);
      assert.equal(net.proxy, "http://127.0.0.1:3128");
      assert.equal((await n.exec('printf %s "$SDK_SECRET"')).stdout, "ts-value");
      assert.deepEqual((await n.setAllowlist(["@npm"])).allow, ["@npm"]);
      await n.exec("curl -s -m 5 -o /dev/null http://example.invalid/");
      const log = await n.egress(10);
      assert.ok(
        log.some((e) => e.host === "example.invalid" && e.decision === "deny"),
        JSON.stringify(log),
      );
      const p = await n.publishPort("0:9000");
      assert.equal(p.guest_port, 9000);
      await n.unpublishPort(p.host_port);
      assert.deepEqual(
        (await n.network()).ports.map((x) => x.guest_port),
        [8000],
      );
      await assert.rejects(n.publishPort("nope"), BadRequestError);
    } finally {
      await n.destroy();
    }
  });

  it("keeps secrets for egress rules (never answering a value), spawns with rules, and changes a sandbox's egress live", async () => {
    const made = await client.secrets.create({ name: "TS_RULE_KEY", value: "ts-rule-value", description: "for a rule" });
    assert.deepEqual([made.name, made.version], ["ts_rule_key", 1]);
    assert.equal((await client.secrets.update("ts_rule_key", { value: "ts-rule-value-2" })).version, 2);
    assert.ok((await client.secrets.list()).some((s) => s.name === "ts_rule_key"));
    assert.doesNotMatch(JSON.stringify([await client.secrets.list(), await client.secrets.get("ts_rule_key")]), /ts-rule-value/);
    const rules = { "api.example.com": { headers: { Authorization: "Bearer {{ts_rule_key}}" } } };
    const r = await client.spawn({ allow: ["api.example.com"], egress_rules: rules });
    try {
      assert.deepEqual((await r.network()).egress_rules, rules);
      assert.equal((await r.setEgressRules({})).egress_rules, undefined);
      assert.deepEqual((await r.updateNetwork({ deny: ["10.0.0.0/8"] })).deny, ["10.0.0.0/8"]);
      assert.equal((await r.updateNetwork({ mode: "none" })).mode, "none");
      await assert.rejects(r.updateNetwork({ mode: "allowlist", deny: ["example.com"] }), BadRequestError);
    } finally {
      await r.destroy();
    }
    // A rule may name a secret that does not exist yet (the proxy refuses its requests until it does); one off the allowlist is a 400.
    await assert.rejects(client.spawn({ allow: ["api.example.com"], egress_rules: { "other.example.com": { headers: { A: "x" } } } }), BadRequestError);
    const later = await client.spawn({ allow: ["api.example.com"], egress_rules: { "api.example.com": { headers: { A: "{{no_such_secret}}" } } } });
    await later.destroy();
    await client.secrets.remove("ts_rule_key");
    await assert.rejects(client.secrets.get("ts_rule_key"), NotFoundError);
  });
});

describe("TypeScript SDK: sandbox", () => {
  it("execs with args, env, workdir, user, stdin and timeout", async () => {
    // args are shell-quoted and appended to the command
    assert.equal((await sb.exec("printf '%s|'", { args: ["a b", "c'd", "$HOME"] })).stdout, "a b|c'd|$HOME|");
    const r = await sb.exec("echo $X; pwd; id -un", { env: { X: "y" }, workdir: "/tmp", user: "nobody" });
    assert.equal(r.exit_code, 0, r.stderr);
    assert.equal(r.stdout, "y\n/tmp\nnobody\n");
    assert.equal((await sb.exec("cat", { stdin: "in put" })).stdout, "in put");
    const t = await sb.exec("sleep 5", { timeout: "1s" });
    assert.equal(t.exit_code, 124);
    assert.equal(t.timed_out, true);
    assert.equal((await sb.exec("exit 3")).exit_code, 3);
    assert.match((await sb.exec("true")).duration, /^[0-9.]+(ms|s)$/);
  });

  it("execStream yields output before the command ends, then the exit code", async () => {
    const t0 = Date.now();
    const stream = sb.execStream("echo first; sleep 1.5; echo second >&2; exit 4");
    const got: { stream: string; data: string; at: number }[] = [];
    for await (const c of stream) got.push({ ...c, at: Date.now() - t0 });
    const end = Date.now() - t0;
    assert.deepEqual(
      got.map((c) => [c.stream, c.data]),
      [
        ["stdout", "first\n"],
        ["stderr", "second\n"],
      ],
    );
    assert.ok(end - got[0].at >= 1200, `the first chunk came ${got[0].at} ms in, the end at ${end} ms`);
    assert.equal(stream.exitCode, 4);
    assert.equal(await stream.done, 4);
    const all = await sb.execStream("echo a; echo b >&2").collect();
    assert.deepEqual(all, { stdout: "a\n", stderr: "b\n", exitCode: 0 });
    assert.ok(stream.pid && stream.pid > 1, "the stream names its process");
  });

  it("lists the processes a sandbox tracks, follows one again by pid (leaving it running), and signals it", async () => {
    const svc = await client.spawn({ main: { command: ["sh", "-c", "i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.3; done"] } });
    try {
      let main: { pid: number; tag?: string } | undefined;
      await waitFor(async () => !!(main = (await svc.trackedProcesses()).find((p) => p.tag === "main")), 20_000, "the main process listed");
      const first = svc.followProcess(main!.pid);
      for await (const c of first) if (/tick \d+/.test(c.data)) break;
      // Leaving the loop left it running: a second follower gets more of it.
      const second = svc.followProcess(main!.pid);
      const seen: string[] = [];
      for await (const c of second) {
        seen.push(c.data);
        if (seen.length === 1) assert.equal(await svc.killProcess(main!.pid, "SIGKILL"), 9);
      }
      assert.equal(second.exitCode, 137);
      assert.match(seen.join(""), /tick \d+/);
      await assert.rejects(svc.followProcess(999_999).collect(), (e: Error & { code?: string }) => e.code === "NOT_FOUND");
    } finally {
      await svc.destroy();
    }
  });

  it("round-trips text, every byte value, and a 20 MiB file", async () => {
    await sb.writeFile("/tmp/sdk/t.txt", "héllo ✓\n", "0600");
    assert.equal(await sb.readFile("/tmp/sdk/t.txt"), "héllo ✓\n");
    assert.equal((await sb.statFile("/tmp/sdk/t.txt")).mode, "600");
    const all = new Uint8Array(256 * 4).map((_, i) => i % 256);
    await sb.writeFile("/tmp/sdk/bytes.bin", all);
    assert.deepEqual(await sb.readFile("/tmp/sdk/bytes.bin", { binary: true }), all);
    const big = new Uint8Array(randomBytes(20 * 1024 * 1024));
    await sb.writeFile("/tmp/sdk/big.bin", big);
    const back = await sb.readFileBytes("/tmp/sdk/big.bin");
    assert.equal(back.length, big.length);
    assert.equal(createHash("sha256").update(back).digest("hex"), createHash("sha256").update(big).digest("hex"));
    assert.equal((await sb.exec("sha256sum /tmp/sdk/big.bin | cut -c1-64")).stdout.trim(), createHash("sha256").update(big).digest("hex"));
  });

  it("lists, stats, globs, moves, chmods and deletes files", async () => {
    await sb.writeFile("/tmp/fs/a.py", "print(1)");
    await sb.writeFile("/tmp/fs/b.py", "print(2)");
    const names = (await sb.listFiles("/tmp/fs")).map((f) => f.name).sort();
    assert.deepEqual(names, ["a.py", "b.py"]);
    assert.deepEqual((await sb.globFiles("/tmp/fs/*.py")).sort(), ["/tmp/fs/a.py", "/tmp/fs/b.py"]);
    await sb.moveFile("/tmp/fs/a.py", "/tmp/fs/c.py");
    await sb.chmodFile("/tmp/fs/c.py", 0o700);
    assert.equal((await sb.statFile("/tmp/fs/c.py")).mode, "700", "a numeric mode");
    await sb.chmodFile("/tmp/fs/c.py", "755");
    const st = await sb.statFile("/tmp/fs/c.py");
    assert.equal(st.mode, "755");
    assert.equal(st.is_dir, false);
    await sb.deleteFile("/tmp/fs/c.py");
    await assert.rejects(sb.statFile("/tmp/fs/c.py"), NotFoundError);
    await sb.deleteFile("/tmp/fs", true);
    assert.deepEqual(await sb.globFiles("/tmp/fs/*"), []);
  });
});

describe("TypeScript SDK: LLM tools", () => {
  it("defines execute_code, write_file and read_file for OpenAI and Anthropic", () => {
    assert.deepEqual(
      openaiTools().map((t) => t.function.name),
      ["execute_code", "write_file", "read_file"],
    );
    assert.equal(openaiTools()[0].type, "function");
    assert.deepEqual(
      anthropicTools().map((t) => t.name),
      ["execute_code", "write_file", "read_file"],
    );
    assert.deepEqual(anthropicTools()[1].input_schema.required, ["path", "content"]);
  });

  it("runs recorded tool calls of both formats against a sandbox", async () => {
    // Recorded shapes: an OpenAI chat.completions tool call and Anthropic tool_use blocks.
    const openaiCall = {
      id: "call_1",
      type: "function",
      function: { name: "execute_code", arguments: '{"command":"python3 -c \\"import sys; print(sum(range(10))); print(\'oops\', file=sys.stderr)\\""}' },
    };
    const out = await handleToolCall(sb, openaiCall);
    assert.equal(out, "exit_code: 0\nstdout:\n45\n\nstderr:\noops\n");
    const write = { type: "tool_use", id: "toolu_1", name: "write_file", input: { path: "/tmp/llm/hello.sh", content: "echo from llm" } };
    assert.match(await handleToolCall(sb, write), /wrote 13 characters/);
    const runIt = { type: "tool_use", id: "toolu_2", name: "execute_code", input: { command: "sh /tmp/llm/hello.sh; exit 2" } };
    assert.equal(await handleToolCall(sb, runIt), "exit_code: 2\nstdout:\nfrom llm\n");
    assert.equal(await handleToolCall(sb, { type: "tool_use", id: "toolu_3", name: "read_file", input: { path: "/tmp/llm/hello.sh" } }), "echo from llm");
    // Bad calls come back as text for the model, never as exceptions.
    assert.match(await handleToolCall(sb, { function: { name: "execute_code", arguments: "{not json" } }), /^error: .*JSON/);
    assert.match(await handleToolCall(sb, { name: "rm_rf", input: {} }), /^error: unknown tool rm_rf/);
    assert.match(await handleToolCall(sb, { name: "read_file", input: { path: "/nope" } }), /^error: /);
    assert.match(await handleToolCall(sb, { name: "execute_code", input: { code: "print(1)" } }), /^error: execute_code needs a string `command`/);
  });
});

/** sha256 of the product document's "Use with TypeScript" snippet (trimmed), as test/fixtures/seed-typescript.mjs holds it. */
const SNIPPET_SHA256 = "9aef425a99675fbe8f07dfbcc9c0295ff72dab849ea59b53f406af77a5cbee36";

describe("TypeScript SDK: as users get it", () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "fvm-sdk-"));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  /** Runs a script as a user would: ESM, in `cwd`, against the server (its key in FORGEVM_API_KEY). */
  async function runScript(cwd: string, name: string, code: string) {
    await writeFile(join(cwd, name), code);
    return run(process.execPath, [join(cwd, name)], { cwd, timeout: 120_000, env: childEnv({ FORGEVM_API_KEY: KEY }) });
  }

  it("the product document's TypeScript snippet runs as written (default image for alpine:latest)", async () => {
    // test/fixtures/seed-typescript.mjs is the "Use with TypeScript" section, copied verbatim: its
    // digest was taken from the product document, so an edit to the fixture fails here on any
    // machine; where the document sits beside the repository, it is compared as well.
    const fixture = await readFile(join(repo, "test", "fixtures", "seed-typescript.mjs"), "utf8");
    assert.equal(createHash("sha256").update(fixture.trim()).digest("hex"), SNIPPET_SHA256, "the fixture is the product document's snippet, unchanged");
    const seed = await readFile(join(repo, "..", "shared", "seeds", "000_5e0eec8a6eae65fa.txt"), "utf8").catch(() => null);
    if (seed) assert.ok(seed.includes(fixture.trim()), "the product document still says what the fixture holds");
    // The only changes: the image and the test server's address (its key comes from FORGEVM_API_KEY).
    const snippet = fixture.replace('spawn({ image: "alpine:latest" })', "spawn({})").replace(DOCS_URL, URL_);
    assert.notEqual(snippet, fixture);
    const here = join(repo, ".forgevm-test");
    await mkdir(here, { recursive: true });
    const r = await runScript(here, "seed-snippet.mjs", snippet);
    assert.match(r.stdout, /^hello world\n/);
  });

  it("npm pack of the SDK installs offline into an empty project that runs the README example", async () => {
    const sdk = join(repo, "sdk", "typescript");
    const { stdout } = await run("npm", ["pack", "--pack-destination", dir, "--json"], { cwd: sdk });
    const tarball = join(dir, JSON.parse(stdout)[0].filename);
    const proj = join(dir, "app");
    await mkdir(proj);
    await writeFile(join(proj, "package.json"), JSON.stringify({ name: "app", private: true, type: "module" }));
    await run("npm", ["install", "--offline", "--no-audit", "--no-fund", tarball], { cwd: proj });
    const readme = await readFile(join(sdk, "README.md"), "utf8");
    const example = /```js\n([\s\S]*?)```/.exec(readme)![1].replaceAll(DOCS_URL, URL_);
    const r = await runScript(proj, "example.mjs", example);
    assert.equal(r.stdout, "42\n4\ntick 1\ntick 2\ntick 3\nexit code 0\n");
    // The install line the README starts with works as written, from a checkout.
    const line = /```sh\n(npm install [^\n]+)\n```/.exec(readme)![1].replace("/path/to/forgevm", repo.replace(/\/$/, ""));
    const byLine = join(dir, "by-line");
    await mkdir(byLine);
    await writeFile(join(byLine, "package.json"), JSON.stringify({ name: "by-line", private: true, type: "module" }));
    const [npm, ...args] = line.split(" ");
    await run(npm, [...args, "--offline", "--no-audit", "--no-fund"], { cwd: byLine });
    assert.equal((await runScript(byLine, "example.mjs", example)).stdout, "42\n4\ntick 1\ntick 2\ntick 3\nexit code 0\n");
    // The CommonJS build works as well.
    const cjs = await run(process.execPath, ["-e", 'const f = require("forgevm"); console.log(typeof f.Client, typeof f.handleToolCall)'], { cwd: proj });
    assert.equal(cjs.stdout, "function function\n");
  });
});
