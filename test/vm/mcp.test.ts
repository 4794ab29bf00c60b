// The MCP server, driven by the official MCP TypeScript SDK's client over both transports against
// real VMs: streamable HTTP at /mcp on a server with an operator policy and an API key, and
// `forgevm mcp` on stdio (with a core of its own, and relaying to a server).
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { mkdir, mkdtemp, readdir, readFile, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, describe, it } from "node:test";
import { promisify } from "node:util";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { CallToolResultSchema, ReadResourceResultSchema, type CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { Ajv } from "ajv";
import { stringify } from "yaml";
import type { RunningServer } from "../../src/compose/serve.js";
import { defaultConfig, loadConfig } from "../../src/config/config.js";
import { policyFromConfig } from "../../src/interfaces/mcp/policy.js";
import { apiRequest, assertNoVmLeft, childEnv, removeAtExit, startTestServer, testDataDir, waitFor } from "../helpers.js";
import { pushImage, startRegistry, type LocalRegistry } from "../local-registry.js";

const KEY = "mcp-test-key";
const run = promisify(execFile);
const CLI = fileURLToPath(new URL("../../src/cli/main.js", import.meta.url));
/** The tool names are part of the contract (docs/mcp.md). */
const CONTRACT_TOOLS = [
  "create_sandbox",
  "list_sandboxes",
  "destroy_sandbox",
  "exec",
  "run_code",
  "write_file",
  "read_file",
  "list_files",
  "upload",
  "download",
  "fork",
  "snapshot",
  "restore",
  "logs",
  "egress_log",
  "publish_port",
  "set_memory",
  "images",
  "pull_image",
  "templates",
  "computer",
];

let server: RunningServer;
let work: string;
let shared: string;
let registry: LocalRegistry;

before(async () => {
  work = await mkdtemp(join(tmpdir(), "fvt-mcp-"));
  removeAtExit(work);
  shared = join(work, "shared");
  await mkdir(shared);
  await mkdir(join(work, "registry"));
  registry = await startRegistry(join(work, "registry"));
  server = await startTestServer((c) => {
    c.auth.api_key = KEY;
    c.mcp.network = "allowlist";
    c.mcp.allow = ["example.com", "*.pypi.org"];
    c.mcp.max_sandboxes_per_session = 3;
    c.mcp.max_sandboxes = 4;
    c.mcp.max_memory_mb = 1024;
    c.mcp.images = ["forgevm/*", `${registry.host}/*`];
    c.mcp.host_dirs = [shared];
    c.mcp.max_output_bytes = 4096;
  });
});

after(async () => {
  await server?.close();
  registry?.stop();
  if (server) await assertNoVmLeft(server.forge);
});

async function connect(headers: Record<string, string> = { Authorization: `Bearer ${KEY}` }): Promise<{ client: Client; transport: StreamableHTTPClientTransport }> {
  const client = new Client({ name: "forgevm-test", version: "1.0.0" });
  const transport = new StreamableHTTPClientTransport(new URL("/mcp", server.url), { requestInit: { headers } });
  await client.connect(transport);
  return { client, transport };
}

async function call(client: Client, name: string, args: Record<string, unknown>, opts: Parameters<Client["callTool"]>[2] = {}) {
  return (await client.callTool({ name, arguments: args }, undefined, opts)) as CallToolResult & { structuredContent?: any };
}

/** A call that must succeed: its structured result. */
async function ok(client: Client, name: string, args: Record<string, unknown>, opts?: Parameters<Client["callTool"]>[2]): Promise<any> {
  const r = await call(client, name, args, opts);
  assert.ok(!r.isError, `${name} failed: ${JSON.stringify(r.content)}`);
  return r.structuredContent;
}

/** A call that must fail as a tool error: its text. */
async function refused(client: Client, name: string, args: Record<string, unknown>): Promise<string> {
  const r = await call(client, name, args);
  assert.equal(r.isError, true, `${name} should have failed: ${JSON.stringify(r.structuredContent)}`);
  return (r.content[0] as { text: string }).text;
}

describe("streamable HTTP at /mcp", () => {
  let client: Client;
  let transport: StreamableHTTPClientTransport;

  before(async () => {
    ({ client, transport } = await connect());
  });
  after(async () => {
    await transport?.terminateSession().catch(() => {});
    await client?.close();
  });

  it("needs the API key (as a bearer token or X-API-Key)", async () => {
    await assert.rejects(connect({}), /401|API key/);
    await assert.rejects(connect({ Authorization: "Bearer wrong" }), /401|API key/);
    const other = await connect({ "X-API-Key": KEY });
    assert.ok(other.transport.sessionId);
    await other.transport.terminateSession();
    await other.client.close();
  });

  it("initializes with instructions that state the policy, and lists every tool with valid schemas", async () => {
    assert.equal(client.getServerVersion()?.name, "forgevm");
    const instructions = client.getInstructions() ?? "";
    assert.match(instructions, /create_sandbox/);
    assert.match(instructions, /allowlist within \[example\.com, \*\.pypi\.org\]/);
    const { tools } = await client.listTools();
    assert.deepEqual(
      tools.map((t) => t.name),
      CONTRACT_TOOLS,
    );
    const ajv = new Ajv({ strict: false });
    for (const t of tools) {
      assert.ok(t.description && !t.description.includes("\n") && t.description.length < 200, `${t.name}: one-line description`);
      assert.equal(t.inputSchema.type, "object", t.name);
      assert.ok(ajv.compile(t.inputSchema), t.name);
      assert.ok(t.outputSchema && ajv.compile(t.outputSchema), `${t.name}: output schema`);
    }
  });

  it("runs an agent's loop: create, write a script, exec it, run_code twice, read a file, fork, destroy", async () => {
    const sb = await ok(client, "create_sandbox", { env: { GREETING: "hello" } });
    assert.equal(sb.state, "running");
    assert.equal(sb.this_session, true);
    assert.equal(sb.network, "allowlist", "no network asked: the pinned allowlist");
    assert.deepEqual(sb.allow, ["example.com", "*.pypi.org"]);
    const id = sb.sandbox_id;
    await ok(client, "write_file", { sandbox_id: id, path: "/work/hello.sh", content: 'echo "$GREETING from $(pwd)"; echo oops >&2; exit 3\n', mode: "0755" });
    const r = await ok(client, "exec", { sandbox_id: id, command: "/work/hello.sh", workdir: "/work" });
    assert.deepEqual([r.exit_code, r.stdout, r.stderr, r.truncated], [3, "hello from /work\n", "oops\n", false]);
    const argv = await ok(client, "exec", { sandbox_id: id, argv: ["cat"], stdin: "piped in" });
    assert.equal(argv.stdout, "piped in");
    // Its memory by hand: less of it without a restart, the guest seeing less; more than it was given is refused with the figures.
    const mem = await ok(client, "set_memory", { sandbox_id: id });
    const lower = await ok(client, "set_memory", { sandbox_id: id, size_mb: mem.memory_mb - 64 });
    assert.equal(lower.actual_mb, mem.memory_mb - 64);
    assert.ok(lower.guest_total_mb < mem.guest_total_mb, `the guest sees less (${lower.guest_total_mb} < ${mem.guest_total_mb} MiB)`);
    const tooMuch = await call(client, "set_memory", { sandbox_id: id, size_mb: mem.memory_mb + 1 });
    assert.equal(tooMuch.isError, true);
    assert.match(JSON.stringify(tooMuch.content), new RegExp(`more than sandbox ${id} was given \\(${mem.memory_mb} MiB\\)`));
    assert.equal((await ok(client, "set_memory", { sandbox_id: id, size_mb: mem.memory_mb })).actual_mb, mem.memory_mb);

    const first = await ok(client, "run_code", { sandbox_id: id, code: "x = 20\nimport math" });
    const second = await ok(client, "run_code", { sandbox_id: id, code: "print('printed'); math.sqrt(x + 5) * 2" });
    assert.equal(second.context_id, first.context_id, "the same default context");
    assert.equal(second.stdout, "printed\n");
    assert.equal(second.results[0].text, "10.0");
    assert.equal(second.error, null);
    const err = await ok(client, "run_code", { sandbox_id: id, code: "1/0" });
    assert.equal(err.error.name, "ZeroDivisionError");

    const f = await ok(client, "read_file", { sandbox_id: id, path: "/work/hello.sh" });
    assert.equal(f.encoding, "text");
    assert.match(f.content, /GREETING/);
    const bin = await ok(client, "read_file", { sandbox_id: id, path: "/bin/true", max_bytes: 16 });
    assert.deepEqual([bin.encoding, bin.truncated, Buffer.from(bin.content, "base64").subarray(1, 4).toString()], ["base64", true, "ELF"]);
    const ls = await ok(client, "list_files", { sandbox_id: id, path: "/work" });
    assert.deepEqual(
      ls.entries.map((e: { name: string; mode: string }) => [e.name, e.mode]),
      [["hello.sh", "0755"]],
    );

    const progress: number[] = [];
    const forked = await ok(client, "fork", { sandbox_id: id }, { onprogress: (p) => progress.push(p.progress) });
    assert.equal(forked.sandbox_ids.length, 1);
    assert.ok(progress.length >= 1, "fork reports progress");
    const copy = forked.sandbox_ids[0];
    const inCopy = await ok(client, "exec", { sandbox_id: copy, command: "/work/hello.sh" });
    assert.equal(inCopy.stdout, "hello from /root\n", "the fork has the parent's files and environment");
    for (const s of [copy, id]) assert.equal((await ok(client, "destroy_sandbox", { sandbox_id: s })).destroyed, true);
    assert.equal((await ok(client, "list_sandboxes", {})).sandboxes.length, 0);
  });

  it("keeps the head and the tail of long output and says it truncated", async () => {
    const { sandbox_id } = await ok(client, "create_sandbox", {});
    try {
      const r = await ok(client, "exec", { sandbox_id, command: "echo FIRST; seq 1 20000; echo LAST" });
      assert.equal(r.truncated, true);
      assert.ok(r.stdout.startsWith("FIRST\n1\n"), r.stdout.slice(0, 20));
      assert.ok(r.stdout.endsWith("20000\nLAST\n"), r.stdout.slice(-20));
      assert.match(r.stdout, /bytes omitted/);
      assert.ok(r.stdout_bytes > 100_000);
      assert.ok(Buffer.byteLength(r.stdout) < 4096 + 100);
    } finally {
      await ok(client, "destroy_sandbox", { sandbox_id });
    }
  });

  it("cancels a long exec: the call ends and the process is killed", async () => {
    const { sandbox_id } = await ok(client, "create_sandbox", {});
    try {
      const ac = new AbortController();
      const progress: string[] = [];
      const long = call(client, "exec", { sandbox_id, command: "echo $$ > /tmp/pid; sleep 300" }, { signal: ac.signal, onprogress: (p) => progress.push(p.message ?? "") });
      let pid = "";
      await waitFor(
        async () => {
          const r = await call(client, "read_file", { sandbox_id, path: "/tmp/pid" });
          pid = r.isError ? "" : String(r.structuredContent?.content).trim();
          return pid !== "";
        },
        30_000,
        "the long command to start",
      );
      await waitFor(() => progress.length > 0, 10_000, "progress of the running exec");
      assert.match(progress[0], /running for/);
      ac.abort();
      await assert.rejects(long, /abort/i);
      await waitFor(
        async () => (await ok(client, "exec", { sandbox_id, command: `kill -0 ${pid} 2>/dev/null && echo alive || echo gone` })).stdout === "gone\n",
        10_000,
        "the process to die",
      );
      await waitFor(
        async () =>
          (await apiRequest(server.url, "GET", `/mcp/audit?session=${transport.sessionId}&tool=exec`, undefined, { "X-API-Key": KEY })).body.entries.some(
            (e: any) => e.outcome === "cancelled",
          ),
        10_000,
        "the cancelled call in the audit log",
      );
    } finally {
      await ok(client, "destroy_sandbox", { sandbox_id });
    }
  });

  it("resumes a dropped response stream from Last-Event-ID: the call runs on and its result is replayed", async () => {
    const { sandbox_id } = await ok(client, "create_sandbox", {});
    try {
      const headers = {
        "X-API-Key": KEY,
        "Content-Type": "application/json",
        Accept: "application/json, text/event-stream",
        "Mcp-Session-Id": transport.sessionId ?? "",
        "Mcp-Protocol-Version": transport.protocolVersion ?? "",
      };
      const ac = new AbortController();
      const res = await fetch(new URL("/mcp", server.url), {
        method: "POST",
        headers,
        signal: ac.signal,
        body: JSON.stringify({
          jsonrpc: "2.0",
          id: 77,
          method: "tools/call",
          params: { name: "exec", arguments: { sandbox_id, command: "sleep 1; echo finished > /tmp/done; echo out" } },
        }),
      });
      assert.equal(res.status, 200);
      const reader = (res.body as ReadableStream<Uint8Array>).getReader();
      let first = "";
      while (!/\n\n/.test(first)) first += new TextDecoder().decode((await reader.read()).value);
      const primed = /^id: (\S+)/m.exec(first)?.[1];
      assert.ok(primed, `a priming event with an id: ${first}`);
      ac.abort(); // the connection drops before the result
      // Until the server has seen the old connection close, the stream still counts as attached (409).
      let again: Response | null = null;
      await waitFor(
        async () => {
          again = await fetch(new URL("/mcp", server.url), { method: "GET", headers: { ...headers, "Last-Event-ID": primed } });
          if (again.status === 409) await again.body?.cancel();
          return again.status !== 409;
        },
        10_000,
        "the dropped stream to be released",
      );
      again = again as unknown as Response;
      assert.equal(again.status, 200);
      let replay = "";
      const r2 = (again.body as ReadableStream<Uint8Array>).getReader();
      while (!replay.includes('"id":77')) replay += new TextDecoder().decode((await r2.read()).value);
      await r2.cancel();
      const result = JSON.parse(/^data: (.*"id":77.*)$/m.exec(replay)?.[1] ?? "{}");
      assert.equal(result.result.structuredContent.stdout, "out\n");
      assert.equal((await ok(client, "read_file", { sandbox_id, path: "/tmp/done" })).content, "finished\n");
    } finally {
      await ok(client, "destroy_sandbox", { sandbox_id });
    }
  });

  it("refuses what the policy does not allow, naming the rule", async () => {
    assert.match(await refused(client, "create_sandbox", { network: "full" }), /mcp\.network/);
    assert.match(await refused(client, "create_sandbox", { network: "allowlist", allow: ["example.com", "evil.example.net"] }), /mcp\.allow.*evil\.example\.net/);
    assert.match(await refused(client, "create_sandbox", { allow: ["*.example.com"] }), /mcp\.allow/);
    assert.match(await refused(client, "create_sandbox", { memory_mb: 2048 }), /mcp\.max_memory_mb/);
    assert.match(await refused(client, "create_sandbox", { image: "docker.io/library/alpine:latest" }), /mcp\.images/);
    assert.match(await refused(client, "pull_image", { reference: "alpine" }), /mcp\.images/);

    const narrower = await ok(client, "create_sandbox", { allow: ["files.pypi.org"] });
    assert.deepEqual(narrower.allow, ["files.pypi.org"]);
    assert.match(await refused(client, "upload", { sandbox_id: narrower.sandbox_id, host_path: "/etc/passwd", path: "/tmp/x" }), /mcp\.host_dirs/);
    assert.match(await refused(client, "upload", { sandbox_id: narrower.sandbox_id, host_path: "../../../etc/passwd", path: "/tmp/x" }), /mcp\.host_dirs/);
    await symlink("/etc", join(shared, "escape"));
    assert.match(await refused(client, "upload", { sandbox_id: narrower.sandbox_id, host_path: "escape/passwd", path: "/tmp/x" }), /mcp\.host_dirs/);
    assert.match(await refused(client, "download", { sandbox_id: narrower.sandbox_id, path: "/etc/hostname", host_path: "escape/owned" }), /mcp\.host_dirs/);

    // A FIFO planted in the shared directory is refused, not waited on.
    await run("mkfifo", [join(shared, "fifo")]);
    assert.match(await refused(client, "upload", { sandbox_id: narrower.sandbox_id, host_path: "fifo", path: "/tmp/x" }), /not a regular file/);
    assert.match(await refused(client, "download", { sandbox_id: narrower.sandbox_id, path: "/etc/hostname", host_path: "fifo" }), /not a regular file|ENXIO/);

    // Inside the shared directory, both ways.
    await writeFile(join(shared, "in.txt"), "from the host\n");
    assert.equal((await ok(client, "upload", { sandbox_id: narrower.sandbox_id, host_path: "in.txt", path: "/data/in.txt" })).size, 14);
    await ok(client, "exec", { sandbox_id: narrower.sandbox_id, command: "tr a-z A-Z < /data/in.txt > /data/out.txt" });
    await ok(client, "download", { sandbox_id: narrower.sandbox_id, path: "/data/out.txt", host_path: join(shared, "out.txt") });
    assert.equal(await readFile(join(shared, "out.txt"), "utf8"), "FROM THE HOST\n");

    // Per-session limit: 3; this session holds one. Of three at once, two start and one is refused.
    const race = await Promise.all([0, 1, 2].map(() => call(client, "create_sandbox", {})));
    const more = race.filter((r) => !r.isError).map((r) => r.structuredContent);
    assert.equal(more.length, 2, JSON.stringify(race.map((r) => r.content)));
    const lost = race.find((r) => r.isError);
    assert.match(String((lost?.content[0] as { text?: string } | undefined)?.text), /mcp\.max_sandboxes_per_session/);
    assert.match(await refused(client, "create_sandbox", {}), /mcp\.max_sandboxes_per_session/);
    assert.match(await refused(client, "fork", { sandbox_id: narrower.sandbox_id }), /mcp\.max_sandboxes_per_session/);
    for (const s of [narrower, ...more]) await ok(client, "destroy_sandbox", { sandbox_id: s.sandbox_id });
  });

  it("snapshots a sandbox and restores copies of it, but never a person's snapshot", async () => {
    const { sandbox_id } = await ok(client, "create_sandbox", {});
    const theirs = await server.forge.sandboxes.spawn({});
    try {
      await ok(client, "write_file", { sandbox_id, path: "/root/state.txt", content: "saved" });
      const snap = await ok(client, "snapshot", { sandbox_id, name: "mcp-saved" });
      assert.equal(snap.name, "mcp-saved");
      await ok(client, "write_file", { sandbox_id, path: "/root/state.txt", content: "changed later" });
      const restored = await ok(client, "restore", { snapshot: "mcp-saved" });
      assert.equal(restored.sandbox_ids.length, 1);
      const copy = restored.sandbox_ids[0];
      assert.equal((await ok(client, "read_file", { sandbox_id: copy, path: "/root/state.txt" })).content, "saved");
      assert.equal((await ok(client, "list_sandboxes", {})).sandboxes.length, 2, "the copy is this session's");
      await ok(client, "destroy_sandbox", { sandbox_id: copy });
      await server.forge.snapshots.take(theirs.id, "persons-own");
      assert.match(await refused(client, "restore", { snapshot: "persons-own" }), /not taken by an agent/);
    } finally {
      await ok(client, "destroy_sandbox", { sandbox_id });
      await server.forge.sandboxes.destroy(theirs.id);
      for (const s of ["mcp-saved", "persons-own"]) await server.forge.snapshots.remove(s).catch(() => {});
    }
  });

  it("reaches only sandboxes agents made", async () => {
    const own = await server.forge.sandboxes.spawn({});
    try {
      assert.match(await refused(client, "exec", { sandbox_id: own.id, command: "true" }), /not made through MCP/);
      assert.match(await refused(client, "destroy_sandbox", { sandbox_id: own.id }), /not made through MCP/);
      assert.equal(server.forge.sandboxes.get(own.id).state, "running");
    } finally {
      await server.forge.sandboxes.destroy(own.id);
    }
  });

  it("answers bad input with JSON-RPC or tool errors and keeps serving", async () => {
    await assert.rejects(client.callTool({ name: "no_such_tool", arguments: {} }), (e: any) => e.code === -32602 && /unknown tool/.test(e.message));
    // Params the request's own schema refuses are the caller's (-32602), not an internal error.
    for (const params of [{ name: 42 }, { name: "exec", arguments: "not an object" }]) {
      await assert.rejects(client.request({ method: "tools/call", params } as never, CallToolResultSchema), (e: any) => e.code === -32602 && /tools\/call/.test(e.message));
    }
    await assert.rejects(client.request({ method: "resources/read", params: { uri: 7 } } as never, ReadResourceResultSchema), (e: any) => e.code === -32602);
    assert.match(await refused(client, "exec", { sandbox_id: 42, command: "true" }), /sandbox_id.*string/);
    assert.match(await refused(client, "exec", {}), /missing argument "sandbox_id"/);
    assert.match(await refused(client, "create_sandbox", { memory: 512 }), /unknown argument "memory"/);
    assert.match(await refused(client, "exec", { sandbox_id: "x", command: "x".repeat(300_000) }), /command/);
    assert.match(await refused(client, "exec", { sandbox_id: "no-such-sandbox", command: "true" }), /not found/);
    const garbage = await fetch(new URL("/mcp", server.url), {
      method: "POST",
      headers: { "X-API-Key": KEY, "Content-Type": "application/json", Accept: "application/json, text/event-stream", "Mcp-Session-Id": transport.sessionId ?? "" },
      body: "{not json",
    });
    assert.equal(garbage.status, 400);
    const unknownSession = await fetch(new URL("/mcp", server.url), {
      method: "POST",
      headers: { "X-API-Key": KEY, "Content-Type": "application/json", Accept: "application/json, text/event-stream", "Mcp-Session-Id": "nope" },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list" }),
    });
    assert.equal(unknownSession.status, 404);
    assert.deepEqual((await ok(client, "list_sandboxes", {})).sandboxes, []);
  });

  it("offers each sandbox's console and egress logs as resources, and a prompt with the policy", async () => {
    const { sandbox_id } = await ok(client, "create_sandbox", {});
    try {
      const { resources } = await client.listResources();
      const uris = resources.map((r) => r.uri);
      assert.ok(uris.includes(`forgevm://sandboxes/${sandbox_id}/console`), uris.join(" "));
      assert.ok(uris.includes(`forgevm://sandboxes/${sandbox_id}/egress`));
      const consoleLog = await client.readResource({ uri: `forgevm://sandboxes/${sandbox_id}/console` });
      assert.match(String((consoleLog.contents[0] as { text: string }).text), /\S/);
      await ok(client, "exec", { sandbox_id, command: "curl -s -o /dev/null http://blocked.invalid/ || true" });
      const egress = await client.readResource({ uri: `forgevm://sandboxes/${sandbox_id}/egress` });
      assert.match(String((egress.contents[0] as { text: string }).text), /blocked\.invalid.*deny/);
      await assert.rejects(client.readResource({ uri: "forgevm://sandboxes/nope/console" }), /not found/);
      const { prompts } = await client.listPrompts();
      assert.deepEqual(
        prompts.map((p) => p.name),
        ["sandbox_workflow"],
      );
      const p = await client.getPrompt({ name: "sandbox_workflow", arguments: { task: "build the project" } });
      const text = (p.messages[0].content as { text: string }).text;
      assert.match(text, /destroy_sandbox/);
      assert.match(text, /at most 1024 MiB/);
      assert.match(text, /build the project/);
    } finally {
      await ok(client, "destroy_sandbox", { sandbox_id });
    }
  });

  it("reports progress of a pull from a registry", async () => {
    const big = { path: "big.bin", data: randomBytes(3 * 1024 * 1024) };
    await pushImage(registry, work, "mcp/tool:1", { layers: [{ entries: [{ path: "etc/marker", data: "mcp" }] }, { entries: [big], compression: "none" }] });
    const progress: { progress: number; total?: number }[] = [];
    const r = await ok(client, "pull_image", { reference: `${registry.host}/mcp/tool:1` }, { onprogress: (p) => progress.push(p) });
    assert.equal(r.name, `${registry.host}/mcp/tool:1`);
    assert.ok(progress.length >= 2, `progress notifications: ${progress.length}`);
    assert.ok(
      progress.some((p) => p.total && p.progress === p.total),
      JSON.stringify(progress),
    );
    const imgs = await ok(client, "images", {});
    assert.ok(imgs.images.some((i: { name: string }) => i.name === r.name));
    assert.ok(!imgs.images.some((i: { name: string }) => i.name.includes("alpine")));
  });

  it("ends a session's sandboxes with it, except the kept ones", async () => {
    const s2 = await connect();
    const gone = await ok(s2.client, "create_sandbox", {});
    const kept = await ok(s2.client, "create_sandbox", { keep: true });
    await s2.transport.terminateSession();
    await s2.client.close();
    await waitFor(() => server.forge.sandboxes.get(gone.sandbox_id).state === "destroyed", 20_000, "the session's sandbox to go");
    assert.equal(server.forge.sandboxes.get(kept.sandbox_id).state, "running");
    // A later session finds and can use the kept one.
    const listed = (await ok(client, "list_sandboxes", {})).sandboxes;
    assert.deepEqual(
      listed.map((s: { sandbox_id: string; keep: boolean; this_session: boolean }) => [s.sandbox_id, s.keep, s.this_session]),
      [[kept.sandbox_id, true, false]],
    );
    await ok(client, "destroy_sandbox", { sandbox_id: kept.sandbox_id });
  });

  it("writes every call to the audit log with secrets redacted, readable through the API and the CLI", async () => {
    await refused(client, "create_sandbox", { network: "full" });
    const { sandbox_id } = await ok(client, "create_sandbox", { env: { GITHUB_TOKEN: "ghp_secret123", PLAIN: "visible" }, secrets: { DEPLOY_TOKEN: "dtok-never-stored" } });
    // A secret reaches the commands as spawns' secrets do, and is not kept where env is (the database).
    const seen = await ok(client, "exec", { sandbox_id, command: '[ "$DEPLOY_TOKEN" = "$(cat /run/secrets/DEPLOY_TOKEN)" ] && printf %s "$DEPLOY_TOKEN" | sha256sum' });
    assert.equal(seen.stdout.split(" ")[0], createHash("sha256").update("dtok-never-stored").digest("hex"));
    const db = await readFile(join(server.forge.paths.dataDir, "forgevm.db")).catch(() => Buffer.alloc(0));
    const wal = await readFile(join(server.forge.paths.dataDir, "forgevm.db-wal")).catch(() => Buffer.alloc(0));
    assert.ok(!Buffer.concat([db, wal]).includes("dtok-never-stored"), "the secret is not in the database");
    await ok(client, "write_file", { sandbox_id, path: "/tmp/s", content: "password=hunter2" });
    await ok(client, "exec", { sandbox_id, command: "curl -H 'Authorization: Bearer sk-live-123' http://x.invalid || true" });
    await ok(client, "destroy_sandbox", { sandbox_id });
    const r = await apiRequest(server.url, "GET", `/mcp/audit?session=${transport.sessionId}&limit=10000`, undefined, { "X-API-Key": KEY });
    assert.equal(r.status, 200);
    const entries = r.body.entries as any[];
    const all = JSON.stringify(entries);
    for (const secret of ["ghp_secret123", "hunter2", "sk-live-123", "dtok-never-stored"]) assert.ok(!all.includes(secret), `${secret} is in the audit log`);
    const create = entries.findLast((e) => e.tool === "create_sandbox" && e.sandbox_id === sandbox_id);
    assert.deepEqual(create.arguments.env, { GITHUB_TOKEN: "[redacted]", PLAIN: "visible" });
    assert.equal(create.outcome, "ok");
    assert.equal(entries.findLast((e) => e.tool === "write_file").arguments.content, "<16 bytes>");
    assert.ok(entries.some((e) => e.outcome === "refused" && /mcp\.network/.test(e.error)));
    assert.ok(entries.every((e) => e.session === transport.sessionId && e.interface === "mcp" && e.time && Number.isInteger(e.duration_ms)));
    const unauth = await apiRequest(server.url, "GET", "/mcp/audit");
    assert.equal(unauth.status, 401);

    // Asynchronously: the server answering the CLI runs in this process.
    const { stdout: out } = await run("node", [CLI, "--server", server.url, "--api-key", KEY, "mcp", "audit", "--session", transport.sessionId ?? "", "--json"], {
      env: childEnv(),
    });
    assert.deepEqual(
      (JSON.parse(out) as any[]).map((e) => e.seq),
      entries.slice(-100).map((e) => e.seq),
    );
  });
});

describe("forgevm mcp on stdio", () => {
  let dataDir: string;
  let cfgFile: string;

  before(async () => {
    dataDir = await testDataDir();
    removeAtExit(dataDir);
    cfgFile = join(work, "stdio.yaml");
    await writeFile(cfgFile, stringify({ data_dir: dataDir, mcp: { max_sandboxes_per_session: 2 } }));
  });

  function stdio(args: string[]) {
    return new StdioClientTransport({ command: "node", args: [CLI, "--config", cfgFile, ...args], env: childEnv() as Record<string, string>, stderr: "pipe" });
  }

  it("runs its own core when no server runs, under the config's policy and its flags", async () => {
    const transport = stdio(["mcp", "--max-memory", "256"]);
    const client = new Client({ name: "forgevm-test", version: "1.0.0" });
    await client.connect(transport);
    const { tools } = await client.listTools();
    assert.deepEqual(
      tools.map((t) => t.name),
      CONTRACT_TOOLS,
    );
    assert.match(await refused(client, "create_sandbox", { memory_mb: 512 }), /mcp\.max_memory_mb/);
    const { sandbox_id } = await ok(client, "create_sandbox", { memory_mb: 256 });
    assert.equal((await ok(client, "exec", { sandbox_id, command: "echo hi" })).stdout, "hi\n");
    assert.equal((await ok(client, "run_code", { sandbox_id, code: "6*7" })).results[0].text, "42");
    const pid = transport.pid as number;
    await client.close();
    // Closing stdin ends the session: its sandbox goes and the process exits.
    await waitFor(
      () => {
        try {
          process.kill(pid, 0);
          return false;
        } catch {
          return true;
        }
      },
      30_000,
      "forgevm mcp to exit",
    );
    assert.deepEqual(await readdir(join(dataDir, "vms")).catch(() => []), []);
    // The audit log stays in the data directory, readable by the CLI with no server.
    const audit = JSON.parse((await run("node", [CLI, "--config", cfgFile, "mcp", "audit", "--json"], { env: childEnv() })).stdout) as any[];
    assert.deepEqual(
      audit.map((e) => [e.tool, e.outcome]),
      [
        ["create_sandbox", "refused"],
        ["create_sandbox", "ok"],
        ["exec", "ok"],
        ["run_code", "ok"],
      ],
    );
  });

  it("relays to a server's /mcp with --server, whose policy and session end apply", async () => {
    const transport = stdio(["--server", server.url, "--api-key", KEY, "mcp"]);
    const client = new Client({ name: "forgevm-test", version: "1.0.0" });
    await client.connect(transport);
    assert.match(client.getInstructions() ?? "", /example\.com/, "the server's policy");
    const { sandbox_id } = await ok(client, "create_sandbox", {});
    assert.equal(server.forge.sandboxes.get(sandbox_id).state, "running");
    assert.equal((await ok(client, "exec", { sandbox_id, command: "echo relayed" })).stdout, "relayed\n");
    assert.match(await refused(client, "create_sandbox", { network: "full" }), /mcp\.network/);
    await client.close();
    await waitFor(() => server.forge.sandboxes.get(sandbox_id).state === "destroyed", 20_000, "the relayed session's sandbox to go");
  });

  it("refuses policy flags when a server decides, and prints client configs", async () => {
    await assert.rejects(
      run("node", [CLI, "--server", server.url, "mcp", "--max-memory", "256"], { env: childEnv() }),
      (e: any) => e.code === 1 && /policy flags.*mcp section/.test(e.stderr),
    );
    // The block says where it goes: a client starts the command from its own directory and environment.
    const stdioCfg = JSON.parse((await run("node", [CLI, "--config", cfgFile, "mcp", "--print-config"], { env: childEnv() })).stdout);
    assert.deepEqual(stdioCfg.mcpServers.forgevm.args, ["--config", cfgFile, "mcp"]);
    assert.match(stdioCfg.mcpServers.forgevm.command, /bin\/forgevm$/);
    const relayCfg = JSON.parse((await run("node", [CLI, "--server", server.url, "--api-key", KEY, "mcp", "--print-config"], { env: childEnv() })).stdout);
    assert.deepEqual(relayCfg.mcpServers.forgevm.args, ["--server", server.url, "mcp"]);
    assert.deepEqual(relayCfg.mcpServers.forgevm.env, { FORGEVM_API_KEY: KEY });
    const dirCfg = JSON.parse((await run("node", [CLI, "--data-dir", work, "mcp", "--print-config"], { env: childEnv() })).stdout);
    assert.deepEqual(dirCfg.mcpServers.forgevm.args, ["--data-dir", work, "mcp"]);
    // The MCP guide's blocks say the same, and its policy example is a valid config.
    const guide = await readFile(fileURLToPath(new URL("../../../docs/mcp.md", import.meta.url)), "utf8");
    const section = guide.slice(guide.indexOf("## Register it with a client"), guide.indexOf("## Transports"));
    const blocks = [...section.matchAll(/```json\n([\s\S]*?)```/g)].map((m) => JSON.parse(m[1]).mcpServers.forgevm);
    assert.deepEqual(blocks[0], { type: "stdio", command: "forgevm", args: ["mcp"] });
    assert.deepEqual(Object.keys(blocks[1]), ["type", "url", "headers"]);
    // The server's built-in address, as --print-config http prints it on defaults.
    const d = defaultConfig({});
    assert.equal(blocks[1].url, new URL("/mcp", `http://${d.server.host}:${d.server.port}`).toString());
    const yaml = /```yaml\n([\s\S]*?)```/.exec(section)?.[1] ?? "";
    const example = join(work, "readme-mcp.yaml");
    await writeFile(example, yaml);
    const loaded = loadConfig({ file: example, env: {} });
    assert.deepEqual([loaded.mcp.network, loaded.mcp.max_sandboxes_per_session], ["allowlist", 5]);
    assert.ok(policyFromConfig(loaded.mcp).maxTtlMs > 0);
    const httpCfg = JSON.parse((await run("node", [CLI, "--server", server.url, "--api-key", KEY, "mcp", "--print-config", "http"], { env: childEnv() })).stdout);
    assert.deepEqual(httpCfg.mcpServers.forgevm, { type: "http", url: `${server.url}/mcp`, headers: { Authorization: `Bearer ${KEY}` } });
  });
});
