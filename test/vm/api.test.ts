// The REST API against a real server with real VMs: the ForgeVM API's curl quick start, every route's
import type { WebSocket } from "ws";
// happy path and its bad inputs.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, before, describe, it } from "node:test";
import type { RunningServer } from "../../src/compose/serve.js";
import { run } from "../../src/util/process.js";
import { apiRequest, childEnv, runCli, startTestServer, waitFor } from "../helpers.js";

let server: RunningServer;
let base: string;
let id: string; // a sandbox shared by the tests that do not end it

const api = (method: string, path: string, body?: unknown, headers: Record<string, string> = {}) => apiRequest(base, method, path, body, headers);

function assertError(r: { status: number; body: any }, status: number, code: string, message?: RegExp) {
  assert.equal(r.status, status, JSON.stringify(r.body));
  assert.equal(r.body.code, code);
  assert.equal(typeof r.body.message, "string");
  if (message) assert.match(r.body.message, message);
}

before(async () => {
  server = await startTestServer();
  base = server.url;
  const r = await api("POST", "/sandboxes", { ttl: "10m", metadata: { purpose: "api-test" } });
  assert.equal(r.status, 201, JSON.stringify(r.body));
  id = r.body.id;
});

after(async () => {
  await server?.close();
});

describe("the ForgeVM API's own quick start", () => {
  it("runs with curl and jq as written (default image instead of alpine:latest, the test server's address)", async () => {
    // The ForgeVM API's documented commands, with its localhost address replaced by the test server's.
    const host = new URL(base).host;
    const script = `
set -e
SANDBOX=$(curl -s -X POST ${host}/api/v1/sandboxes \\
  -H "Content-Type: application/json" \\
  -d '{"image":"forgevm/debian:bookworm"}' | jq -r .id)

curl -s -X POST ${host}/api/v1/sandboxes/$SANDBOX/exec \\
  -H "Content-Type: application/json" \\
  -d '{"command":"echo hello from ForgeVM"}'
# {"exit_code":0,"stdout":"hello from ForgeVM\\n"}

curl -s -X DELETE ${host}/api/v1/sandboxes/$SANDBOX
`;
    const { stdout } = await run("bash", ["-c", script]);
    const [execLine, deleteLine] = stdout.replace("}{", "}\n{").trim().split("\n");
    const exec = JSON.parse(execLine);
    assert.equal(exec.exit_code, 0, `curl printed: ${stdout}`);
    assert.equal(exec.stdout, "hello from ForgeVM\n");
    assert.deepEqual(JSON.parse(deleteLine), { status: "destroyed" });
  });
});

describe("sandboxes", () => {
  it("gets and lists with the contract's shape", async () => {
    const r = await api("GET", `/sandboxes/${id}`);
    assert.equal(r.status, 200);
    assert.match(r.body.id, /^sb-[0-9a-f]{8}$/);
    assert.equal(r.body.state, "running");
    assert.equal(r.body.provider, "qemu");
    assert.equal(r.body.image, "forgevm/debian:bookworm");
    assert.equal(r.body.memory_mb, 512);
    assert.equal(r.body.vcpus, 1);
    assert.deepEqual(r.body.metadata, { purpose: "api-test" });
    assert.ok(Date.parse(r.body.expires_at) > Date.now() + 9 * 60_000);
    const list = await api("GET", "/sandboxes");
    assert.ok(list.body.some((s: any) => s.id === id));
    assert.ok(r.headers.get("x-request-id"));
  });

  it("reports the memory and vCPUs the VM really has", async () => {
    const m = await api("POST", `/sandboxes/${id}/exec`, { command: "nproc; awk '/MemTotal/{print $2}' /proc/meminfo" });
    const [cpus, kb] = m.body.stdout.trim().split("\n").map(Number);
    assert.equal(cpus, 1);
    assert.ok(kb > 400_000 && kb <= 512 * 1024, `MemTotal ${kb} kB`);
  });

  it("extends the expiry", async () => {
    const r = await api("POST", `/sandboxes/${id}/extend`, { ttl: "2h" });
    assert.equal(r.status, 200);
    assert.ok(Date.parse(r.body.expires_at) > Date.now() + 119 * 60_000);
  });

  it("rejects bad spawn requests with 4xx naming the field", async () => {
    assertError(await api("POST", "/sandboxes", "{not json", { "Content-Type": "application/json" }), 400, "BAD_REQUEST", /not valid JSON/);
    assertError(await api("POST", "/sandboxes", { memory_mb: "512" }), 400, "BAD_REQUEST", /memory_mb/);
    assertError(await api("POST", "/sandboxes", { vcpus: 0 }), 400, "BAD_REQUEST", /vcpus/);
    assertError(await api("POST", "/sandboxes", { ttl: "0s" }), 400, "BAD_REQUEST", /ttl/);
    assertError(await api("POST", "/sandboxes", { ttl: "-5m" }), 400, "BAD_REQUEST", /ttl/);
    assertError(await api("POST", "/sandboxes", { ttl: "ten minutes" }), 400, "BAD_REQUEST", /ttl/);
    assertError(await api("POST", "/sandboxes", { image: "forgevm/nope" }), 400, "BAD_REQUEST", /image/);
    assertError(await api("POST", "/sandboxes", { image: "Not A Reference!" }), 400, "BAD_REQUEST", /image/);
    // Not local, so it is pulled first: from a registry that cannot be reached, a plain 503.
    assertError(await api("POST", "/sandboxes", { image: "127.0.0.1:1/library/alpine:latest" }), 503, "UNAVAILABLE", /cannot reach registry 127.0.0.1:1/);
    assertError(await api("POST", "/sandboxes", { provider: "no-such-provider" }), 400, "BAD_REQUEST", /provider/);
    assertError(await api("POST", "/sandboxes", { metadata: { a: 1 } }), 400, "BAD_REQUEST", /metadata/);
  });

  it("answers unknown ids with 404 and no internals", async () => {
    for (const [m, p, b] of [
      ["GET", "/sandboxes/sb-00000000"],
      ["DELETE", "/sandboxes/sb-00000000"],
      ["POST", "/sandboxes/sb-00000000/exec", { command: "true" }],
      ["POST", "/sandboxes/sb-00000000/extend", { ttl: "1m" }],
      ["GET", "/sandboxes/sb-00000000/files?path=/etc/hostname"],
      ["GET", "/sandboxes/sb-00000000/logs"],
    ] as const) {
      assertError(await api(m, p, b), 404, "NOT_FOUND");
    }
    assertError(await api("POST", `/sandboxes/${id}/extend`, { ttl: "soon" }), 400, "BAD_REQUEST", /ttl/);
    assertError(await api("POST", `/sandboxes/${id}/extend`, {}), 400, "BAD_REQUEST", /ttl is required/);
  });

  it("answers unknown routes with 404 and wrong methods with 405, as JSON", async () => {
    assertError(await api("GET", "/nope"), 404, "NOT_FOUND");
    assertError(await api("PATCH", `/sandboxes/${id}`), 405, "METHOD_NOT_ALLOWED");
  });

  it("returns console logs as lines", async () => {
    // A line the guest writes to its serial console, so the answer cannot be right by being empty.
    const mark = `console-mark-${Date.now()}`;
    assert.equal((await api("POST", `/sandboxes/${id}/exec`, { command: `echo ${mark} > /dev/console`, user: "root" })).body.exit_code, 0);
    let r = await api("GET", `/sandboxes/${id}/logs?lines=5`);
    for (let i = 0; i < 50 && !r.body.includes?.(mark); i++) {
      await new Promise((done) => setTimeout(done, 100));
      r = await api("GET", `/sandboxes/${id}/logs?lines=5`);
    }
    assert.equal(r.status, 200);
    assert.ok(Array.isArray(r.body) && r.body.length >= 1 && r.body.length <= 5, `at most 5 lines: ${JSON.stringify(r.body)}`);
    assert.equal(r.body.at(-1), mark, "the last line is the one just written");
    assertError(await api("GET", `/sandboxes/${id}/logs?lines=many`), 400, "BAD_REQUEST", /lines/);
  });
});

describe("exec", () => {
  it("returns exit code, output and a Go-style duration; non-zero exit is still 200", async () => {
    const r = await api("POST", `/sandboxes/${id}/exec`, { command: "echo $GREETING from $(pwd); echo oops >&2; exit 4", env: { GREETING: "hi" }, workdir: "/tmp" });
    assert.equal(r.status, 200);
    assert.equal(r.body.exit_code, 4);
    assert.equal(r.body.stdout, "hi from /tmp\n");
    assert.equal(r.body.stderr, "oops\n");
    assert.match(r.body.duration, /^[0-9.]+(ms|s)$/);
    assert.equal(r.body.timed_out, false);
  });

  it("shell-quotes args, feeds stdin, runs as a user, times out with 124", async () => {
    assert.equal((await api("POST", `/sandboxes/${id}/exec`, { command: "printf '%s|'", args: ["a b", "$HOME", "it's"] })).body.stdout, "a b|$HOME|it's|");
    assert.equal((await api("POST", `/sandboxes/${id}/exec`, { command: "tr a-z A-Z", stdin: "shout\n" })).body.stdout, "SHOUT\n");
    assert.equal((await api("POST", `/sandboxes/${id}/exec`, { command: "id -un", user: "nobody" })).body.stdout, "nobody\n");
    const t = await api("POST", `/sandboxes/${id}/exec`, { command: "sleep 30", timeout: "500ms" });
    assert.equal(t.body.exit_code, 124);
    assert.equal(t.body.timed_out, true);
  });

  it("streams NDJSON chunks as they are produced, ending with the exit code", async () => {
    const res = await fetch(`${base}/api/v1/sandboxes/${id}/exec`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ command: "echo first; sleep 1.5; echo second", stream: true }),
    });
    assert.equal(res.headers.get("content-type"), "application/x-ndjson");
    const reader = res.body!.getReader();
    const t0 = Date.now();
    const first = new TextDecoder().decode((await reader.read()).value);
    const firstAt = Date.now() - t0;
    let rest = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      rest += new TextDecoder().decode(value);
    }
    const lines = (first + rest)
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l));
    assert.deepEqual(lines[0], { stream: "stdout", data: "first\n" });
    assert.deepEqual(lines[1], { stream: "stdout", data: "second\n" });
    assert.equal(lines[2].stream, "exit");
    assert.equal(lines[2].exit_code, 0);
    // The first chunk arrived while the command was still sleeping.
    assert.ok(firstAt < Date.now() - t0, "first chunk came before the end");
    assert.equal(first.trim().split("\n").length, 1, "the first read held only the first chunk");
  });

  it("rejects bad exec requests", async () => {
    assertError(await api("POST", `/sandboxes/${id}/exec`, {}), 400, "BAD_REQUEST", /command is required/);
    assertError(await api("POST", `/sandboxes/${id}/exec`, { command: "" }), 400, "BAD_REQUEST", /command/);
    assertError(await api("POST", `/sandboxes/${id}/exec`, { command: 42 }), 400, "BAD_REQUEST", /command/);
    assertError(await api("POST", `/sandboxes/${id}/exec`, { command: "true", timeout: "0s" }), 400, "BAD_REQUEST", /timeout/);
    assertError(await api("POST", `/sandboxes/${id}/exec`, { command: "true", args: "x" }), 400, "BAD_REQUEST", /args/);
    assertError(await api("POST", `/sandboxes/${id}/exec`, { command: "true", env: { A: 1 } }), 400, "BAD_REQUEST", /env/);
    assertError(await api("POST", `/sandboxes/${id}/exec`, { command: "true", user: "no-such-user" }), 400, "BAD_REQUEST", /unknown user/);
  });
});

describe("files", () => {
  it("writes text, base64 and raw bodies and reads them back byte for byte", async () => {
    assert.deepEqual((await api("POST", `/sandboxes/${id}/files`, { path: "/work/t/hello.txt", content: "héllo\n" })).body, { status: "written" });
    const bin = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
    assert.equal((await api("POST", `/sandboxes/${id}/files`, { path: "/work/t/bin", content: bin.toString("base64"), encoding: "base64", mode: "0600" })).status, 200);
    const big = randomBytes(3 * 1024 * 1024);
    const raw = await fetch(`${base}/api/v1/sandboxes/${id}/files?path=/work/t/big&mode=0640`, {
      method: "POST",
      headers: { "Content-Type": "application/octet-stream" },
      body: big,
    });
    assert.equal(raw.status, 200);
    for (const [path, want] of [
      ["/work/t/hello.txt", Buffer.from("héllo\n")],
      ["/work/t/bin", bin],
      ["/work/t/big", big],
    ] as const) {
      const res = await fetch(`${base}/api/v1/sandboxes/${id}/files?path=${path}`);
      assert.equal(res.status, 200);
      assert.equal(res.headers.get("content-type"), "application/octet-stream");
      assert.ok(Buffer.from(await res.arrayBuffer()).equals(want), path);
    }
    const st = await api("GET", `/sandboxes/${id}/files/stat?path=/work/t/bin`);
    assert.deepEqual({ ...st.body, mod_time: "x" }, { path: "/work/t/bin", name: "bin", size: 256, mode: "600", is_dir: false, mod_time: "x" });
    assert.equal((await api("GET", `/sandboxes/${id}/files/stat?path=/work/t/big`)).body.mode, "640");
  });

  it("lists, globs, moves, chmods and deletes", async () => {
    const list = await api("GET", `/sandboxes/${id}/files/list?path=/work/t`);
    assert.deepEqual(
      list.body.map((f: any) => f.name),
      ["big", "bin", "hello.txt"],
    );
    assert.equal(list.body[0].path, "/work/t/big");
    assert.deepEqual((await api("GET", `/sandboxes/${id}/files/glob?pattern=/work/t/b*`)).body, ["/work/t/big", "/work/t/bin"]);
    assert.deepEqual((await api("GET", `/sandboxes/${id}/files/glob?pattern=/work/none*`)).body, []);
    assert.deepEqual((await api("POST", `/sandboxes/${id}/files/move`, { old_path: "/work/t/bin", new_path: "/work/t/bin2" })).body, { status: "moved" });
    assert.deepEqual((await api("POST", `/sandboxes/${id}/files/chmod`, { path: "/work/t/bin2", mode: "755" })).body, { status: "chmod applied" });
    assert.equal((await api("GET", `/sandboxes/${id}/files/stat?path=/work/t/bin2`)).body.mode, "755");
    assertError(await api("DELETE", `/sandboxes/${id}/files?path=/work/t`), 409, "CONFLICT");
    assert.deepEqual((await api("DELETE", `/sandboxes/${id}/files?path=/work/t&recursive=true`)).body, { status: "deleted" });
    assertError(await api("GET", `/sandboxes/${id}/files/stat?path=/work/t`), 404, "NOT_FOUND");
    const root = await api("GET", `/sandboxes/${id}/files/list`);
    assert.ok(root.body.some((f: any) => f.name === "etc" && f.is_dir));
  });

  it("rejects empty, relative and missing paths and bad modes", async () => {
    assertError(await api("POST", `/sandboxes/${id}/files`, { path: "", content: "x" }), 400, "BAD_REQUEST", /path/);
    assertError(await api("POST", `/sandboxes/${id}/files`, { path: "rel/x", content: "x" }), 400, "BAD_REQUEST", /absolute/);
    assertError(await api("POST", `/sandboxes/${id}/files`, { content: "x" }), 400, "BAD_REQUEST", /path is required/);
    assertError(await api("POST", `/sandboxes/${id}/files`, { path: "/x" }), 400, "BAD_REQUEST", /content is required/);
    assertError(await api("POST", `/sandboxes/${id}/files`, { path: "/x", content: "x", mode: "rwx" }), 400, "BAD_REQUEST", /mode/);
    assertError(await api("POST", `/sandboxes/${id}/files`, { path: "/x", content: "@@@", encoding: "base64" }), 400, "BAD_REQUEST", /base64/);
    assertError(await api("GET", `/sandboxes/${id}/files?path=`), 400, "BAD_REQUEST", /path/);
    assertError(await api("GET", `/sandboxes/${id}/files`), 400, "BAD_REQUEST", /path/);
    assertError(await api("GET", `/sandboxes/${id}/files?path=/no/such/file`), 404, "NOT_FOUND", /\/no\/such\/file/);
    assertError(await api("GET", `/sandboxes/${id}/files?path=/etc`), 400, "BAD_REQUEST", /directory/);
    assertError(await api("DELETE", `/sandboxes/${id}/files?path=/`), 400, "BAD_REQUEST");
    assertError(await api("POST", `/sandboxes/${id}/files/move`, { old_path: "/a" }), 400, "BAD_REQUEST", /new_path/);
    assertError(await api("POST", `/sandboxes/${id}/files/chmod`, { path: "/etc/hostname", mode: "999" }), 400, "BAD_REQUEST", /mode/);
    assertError(await api("GET", `/sandboxes/${id}/files/glob?pattern=`), 400, "BAD_REQUEST", /pattern/);
  });
});

describe("server", () => {
  it("serves health, metrics, providers, pool status and the OpenAPI document", async () => {
    assert.equal((await api("GET", "/health")).body.status, "ok");
    assert.ok((await api("GET", "/metrics")).body.active_sandboxes >= 1);
    const pool = (await api("GET", "/pool/status")).body;
    assert.deepEqual({ ...pool, prestarted: undefined }, { enabled: false, warm: [], prestarted: undefined });
    // One VMM per base kept started ahead by default; how many are ready depends on the spawns so far.
    assert.equal(pool.prestarted.per_base, 1);
    assert.ok(Number.isInteger(pool.prestarted.ready) && Number.isInteger(pool.prestarted.bases), JSON.stringify(pool));
    const providers = await api("GET", "/providers");
    assert.deepEqual(providers.body, [{ name: "qemu", healthy: true, default: true, isolation: "vm" }]);
    assert.equal((await api("GET", "/providers/qemu")).body.config.accel, (await server.forge.providers.health()).accel);
    assertError(await api("GET", "/providers/nope"), 404, "NOT_FOUND");
    const prom = await fetch(`${base}/metrics`);
    assert.match(prom.headers.get("content-type") ?? "", /^text\/plain/);
    assert.match(await prom.text(), /^forgevm_sandboxes_active [1-9]/m);
    const doc = await api("GET", "/openapi.json");
    assert.equal(doc.body.openapi, "3.0.3");
    assert.ok(doc.body.paths["/api/v1/sandboxes/{id}/exec"].post);
  });

  it("runs a real provider probe, also several at once", async () => {
    assert.deepEqual((await api("POST", "/providers/test")).body, { qemu: true });
    const at_once = await Promise.all([1, 2, 3].map(() => api("POST", "/providers/test")));
    assert.deepEqual(
      at_once.map((r) => r.body),
      [{ qemu: true }, { qemu: true }, { qemu: true }],
    );
  });

  it("expires a sandbox when its TTL passes and records the event", async () => {
    const r = await api("POST", "/sandboxes", { ttl: "5s" });
    assert.equal(r.status, 201);
    await waitFor(async () => (await api("GET", `/sandboxes/${r.body.id}`)).status === 404, 30_000, "expiry");
    const events = () =>
      server.forge.events
        .replay(0, 100000)
        .filter((e) => e.sandbox_id === r.body.id)
        .map((e) => e.type);
    await waitFor(() => events().includes("sandbox.expired"), 10_000, "the expiry event");
    assert.deepEqual(events(), ["sandbox.created", "sandbox.running", "sandbox.expired"]);
    assert.ok(!server.forge.sandboxes.list().some((s) => s.id === r.body.id));
  });

  it("prunes expired sandboxes on DELETE /sandboxes", async () => {
    const r = await api("DELETE", "/sandboxes");
    assert.equal(r.status, 200);
    assert.equal(typeof r.body.pruned, "number");
  });
});

/** Reads SSE events from the server until `n` data events arrived. */
async function readEvents(url: string, n: number, headers: Record<string, string> = {}, onOpen?: () => Promise<void>): Promise<{ id: string; data: any }[]> {
  const ctl = new AbortController();
  const res = await fetch(url, { headers, signal: ctl.signal });
  assert.equal(res.status, 200);
  assert.equal(res.headers.get("content-type"), "text/event-stream");
  const reader = res.body!.getReader();
  const got: { id: string; data: any }[] = [];
  let buf = "";
  const opened = onOpen?.();
  while (got.length < n) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += new TextDecoder().decode(value);
    let i: number;
    while ((i = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, i);
      buf = buf.slice(i + 2);
      const id = /^id: (.*)$/m.exec(block)?.[1];
      const data = /^data: (.*)$/m.exec(block)?.[1];
      if (id && data) got.push({ id, data: JSON.parse(data) });
    }
  }
  ctl.abort();
  await opened;
  return got;
}

describe("events", () => {
  it("streams events as SSE with ids, and replays after Last-Event-ID", async () => {
    const live = await readEvents(`${base}/api/v1/events`, 1, {}, async () => {
      await api("POST", `/sandboxes/${id}/files`, { path: "/tmp/evt.txt", content: "x" });
    });
    assert.equal(live[0].data.type, "file.written");
    assert.equal(live[0].data.sandbox_id, id);
    assert.equal(live[0].data.path, "/tmp/evt.txt");
    assert.equal(live[0].data.id, live[0].id);
    // Two more events, then a reconnect from the first id sees exactly those.
    await api("POST", `/sandboxes/${id}/exec`, { command: "true" });
    const replay = await readEvents(`${base}/api/v1/events`, 2, { "Last-Event-ID": live[0].id });
    assert.deepEqual(
      replay.map((e) => e.data.type),
      ["exec.started", "exec.finished"],
    );
    assert.ok(Number(replay[0].id) > Number(live[0].id));
    // Without an id, `tail` replays the newest events first (the console's dashboard).
    const tail = await readEvents(`${base}/api/v1/events?tail=2`, 2, {});
    assert.deepEqual(
      tail.map((e) => e.id),
      replay.map((e) => e.id),
    );
    assertError(await api("GET", "/events", undefined, { "Last-Event-ID": "abc" }), 400, "BAD_REQUEST", /last-event-id/);
  });
});

describe("templates", () => {
  it("creates, lists, updates and deletes; duplicates conflict", async () => {
    const t = {
      name: "py-tools",
      image: "forgevm/debian:bookworm",
      memory_mb: 256,
      vcpus: 1,
      ttl: "15m",
      env: { GREETING: "hi" },
      setup: ["echo ready > /etc/forgevm-setup", "mkdir -p /work/app"],
      description: "d1",
    };
    const c = await api("POST", "/templates", t);
    assert.equal(c.status, 201, JSON.stringify(c.body));
    assert.equal(c.body.cpu_cores, 1);
    assert.equal(c.body.ttl_seconds, 900);
    assert.deepEqual(c.body.allowed_hosts, []);
    assertError(await api("POST", "/templates", t), 409, "CONFLICT");
    assert.ok((await api("GET", "/templates")).body.some((x: any) => x.name === "py-tools"));
    const u = await api("PUT", "/templates/py-tools", { ...t, name: undefined, description: "d2" });
    assert.equal(u.status, 200, JSON.stringify(u.body));
    assert.equal((await api("GET", "/templates/py-tools")).body.description, "d2");
    assertError(await api("PUT", "/templates/py-tools", { name: "other" }), 400, "BAD_REQUEST", /differs/);
    assertError(await api("PUT", "/templates/nope", { description: "x" }), 404, "NOT_FOUND");
  });

  it("spawns with every field in effect: image, memory, ttl, env, setup run once", async () => {
    const r = await api("POST", "/templates/py-tools/spawn", {});
    assert.equal(r.status, 201, JSON.stringify(r.body));
    assert.equal(r.body.memory_mb, 256);
    const ttl = Date.parse(r.body.expires_at) - Date.now();
    assert.ok(ttl > 14 * 60_000 && ttl <= 15 * 60_000, `ttl ${ttl}`);
    const e = await api("POST", `/sandboxes/${r.body.id}/exec`, {
      command: "cat /etc/forgevm-setup; echo $GREETING; test -d /work/app && echo dir; awk '/MemTotal/{print $2}' /proc/meminfo",
    });
    const [ready, greeting, dir, kb] = e.body.stdout.trim().split("\n");
    assert.deepEqual([ready, greeting, dir], ["ready", "hi", "dir"]);
    assert.ok(Number(kb) <= 256 * 1024 && Number(kb) > 150_000);
    // The exec's own env wins over the template's.
    assert.equal((await api("POST", `/sandboxes/${r.body.id}/exec`, { command: "echo $GREETING", env: { GREETING: "override" } })).body.stdout, "override\n");
    assert.equal((await api("DELETE", `/sandboxes/${r.body.id}`)).status, 200);
  });

  it("fails a spawn whose setup command fails, leaving nothing running", async () => {
    assert.equal((await api("POST", "/templates", { name: "broken", setup: ["echo boom >&2; exit 3"] })).status, 201);
    const before = server.forge.sandboxes.list().length;
    assertError(await api("POST", "/sandboxes", { template: "broken" }), 400, "BAD_REQUEST", /setup command 1 .* exit code 3: boom/);
    assert.equal(server.forge.sandboxes.list().length, before);
    assert.equal((await api("DELETE", "/templates/broken")).status, 200);
  });

  it("rejects bad templates and unknown names", async () => {
    assertError(await api("POST", "/templates", { name: "bad name" }), 400, "BAD_REQUEST", /name/);
    assertError(await api("POST", "/templates", {}), 400, "BAD_REQUEST", /name is required/);
    assertError(await api("POST", "/templates", { name: "x1", memory_mb: 1 }), 400, "BAD_REQUEST", /memory_mb/);
    assertError(await api("POST", "/templates", { name: "x1", ttl: "forever" }), 400, "BAD_REQUEST", /ttl/);
    assertError(
      await api("POST", "/templates", { name: "x1", allowed_hosts: ["@nosuchpreset"] }),
      400,
      "BAD_REQUEST",
      /allowed_hosts: allow entry "@nosuchpreset": unknown preset/,
    );
    assertError(await api("POST", "/templates/nope/spawn", {}), 404, "NOT_FOUND");
    assertError(await api("POST", "/sandboxes", { template: "nope" }), 404, "NOT_FOUND");
    assertError(await api("DELETE", "/templates/nope"), 404, "NOT_FOUND");
    assertError(await api("GET", "/templates/nope"), 404, "NOT_FOUND");
    assert.equal((await api("DELETE", "/templates/py-tools")).status, 200);
  });
});

describe("snapshots and forks", () => {
  it("forks a sandbox into running copies and reports the parent's pause", async () => {
    await api("POST", `/sandboxes/${id}/exec`, { command: "echo forked-state > /root/fork.txt" });
    const r = await api("POST", `/sandboxes/${id}/fork`, { count: 2, ttl: "5m" });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    assert.equal(r.body.sandboxes.length, 2);
    assert.ok(r.body.pause_ms > 0 && r.body.duration_ms >= r.body.pause_ms);
    for (const c of r.body.sandboxes) {
      assert.equal(c.state, "running");
      assert.equal(c.memory_mb, 512);
      const ex = await api("POST", `/sandboxes/${c.id}/exec`, { command: "cat /root/fork.txt; hostname" });
      assert.equal(ex.body.stdout, `forked-state\n${c.id}\n`);
      assert.equal((await api("DELETE", `/sandboxes/${c.id}`)).status, 200);
    }
  });

  it("takes a named snapshot, lists, inspects, restores and deletes it", async () => {
    const s = await api("POST", `/sandboxes/${id}/snapshot`, { name: "api-snap" });
    assert.equal(s.status, 201, JSON.stringify(s.body));
    assert.equal(s.body.name, "api-snap");
    assert.equal(s.body.source_id, id);
    assert.equal(s.body.kind, "sandbox");
    assert.ok((await api("GET", "/snapshots")).body.some((x: any) => x.id === s.body.id));
    assert.equal((await api("GET", "/snapshots/api-snap")).body.id, s.body.id);
    assertError(await api("POST", `/sandboxes/${id}/snapshot`, { name: "api-snap" }), 409, "CONFLICT");
    const r = await api("POST", "/snapshots/api-snap/spawn", {});
    assert.equal(r.status, 201, JSON.stringify(r.body));
    const child = r.body.sandboxes[0].id;
    assert.equal((await api("POST", `/sandboxes/${child}/exec`, { command: "cat /root/fork.txt" })).body.stdout, "forked-state\n");
    assert.equal((await api("DELETE", "/snapshots/api-snap")).status, 200);
    assertError(await api("GET", "/snapshots/api-snap"), 404, "NOT_FOUND");
    assert.equal((await api("DELETE", `/sandboxes/${child}`)).status, 200);
  });

  it("rejects bad fork and snapshot requests naming the field", async () => {
    assertError(await api("POST", `/sandboxes/${id}/fork`, { count: 0 }), 400, "BAD_REQUEST", /count/);
    assertError(await api("POST", `/sandboxes/${id}/fork`, { count: "many" }), 400, "BAD_REQUEST", /count/);
    assertError(await api("POST", `/sandboxes/${id}/fork`, { ttl: "soon" }), 400, "BAD_REQUEST", /ttl/);
    assertError(await api("POST", "/sandboxes/sb-00000000/fork", {}), 404, "NOT_FOUND");
    assertError(await api("POST", `/sandboxes/${id}/snapshot`, { name: "no spaces" }), 400, "BAD_REQUEST", /name/);
    assertError(await api("POST", "/sandboxes/sb-00000000/snapshot", {}), 404, "NOT_FOUND");
    assertError(await api("GET", "/snapshots/snap-00000000"), 404, "NOT_FOUND");
    assertError(await api("DELETE", "/snapshots/snap-00000000"), 404, "NOT_FOUND");
    assertError(await api("POST", "/snapshots/snap-00000000/spawn", {}), 404, "NOT_FOUND");
  });
});

describe("exec over WebSocket", () => {
  async function wsExec(first: unknown, script: (ws: WebSocket, got: { text: string; msgs: any[] }) => Promise<void> = async () => {}) {
    const { WebSocket } = await import("ws");
    const ws = new WebSocket(`${base.replace("http", "ws")}/api/v1/sandboxes/${id}/exec/ws`);
    const got = { text: "", msgs: [] as any[] };
    const closed = new Promise<number>((r) => ws.on("close", (code: number) => r(code)));
    ws.on("message", (m: Buffer) => {
      const msg = JSON.parse(m.toString());
      got.msgs.push(msg);
      if (msg.stream) got.text += msg.data;
    });
    await new Promise((r) => ws.on("open", r));
    ws.send(JSON.stringify(first));
    await script(ws as any, got);
    return { code: await closed, ...got };
  }

  it("streams output, takes stdin and ends with the exit code", async () => {
    const r = await wsExec({ command: "cat; echo done >&2; exit 5" }, async (ws) => {
      ws.send(JSON.stringify({ stdin: "abc\n" }));
      ws.send(JSON.stringify({ stdin_eof: true }));
    });
    assert.equal(r.code, 1000);
    assert.ok(r.msgs.some((m) => m.stream === "stdout" && m.data === "abc\n"));
    assert.ok(r.msgs.some((m) => m.stream === "stderr" && m.data === "done\n"));
    assert.deepEqual({ ...r.msgs.at(-1), duration: "-" }, { type: "done", exit_code: 5, timed_out: false, duration: "-" });
    assert.match(r.msgs.at(-1).duration, /^[0-9.]+(ms|s)$/);
  });

  it("runs under a TTY and follows resizes", async () => {
    const r = await wsExec({ command: "stty size; read x; stty size", tty: true, rows: 30, cols: 100 }, async (ws, got) => {
      await waitFor(() => got.text.includes("30 100"), 15_000, "first size");
      ws.send(JSON.stringify({ resize: [40, 120] }));
      await new Promise((res) => setTimeout(res, 200));
      ws.send(JSON.stringify({ stdin: "\n" }));
    });
    assert.equal(r.code, 1000);
    assert.match(r.text, /40 120/);
    assert.equal(r.msgs.at(-1).exit_code, 0);
  });

  it("refuses a bad first message with an error and closes", async () => {
    const r = await wsExec({ args: ["x"] });
    assert.equal(r.code, 1008);
    assert.equal(r.msgs[0].type, "error");
    assert.equal(r.msgs[0].code, "BAD_REQUEST");
    assert.match(r.msgs[0].message, /command/);
    const t = await wsExec({ command: "true", timeout: "nope" });
    assert.match(t.msgs[0].message, /timeout/);
  });
});

describe("the forgevm CLI against the server", () => {
  // Asynchronous: this process also serves the API the CLI talks to.
  const forgevm = (...args: string[]) => runCli(args, childEnv({ FORGEVM_URL: base }));

  it("spawns, lists, execs with the exit code passed through, shows logs, kills", async () => {
    const sp = await forgevm("spawn", "--ttl", "5m", "--memory", "256", "--json");
    assert.equal(sp.status, 0, sp.stderr);
    const sb = JSON.parse(sp.stdout);
    assert.equal(sb.memory_mb, 256);
    const ls = await forgevm("list", "--json");
    assert.ok(JSON.parse(ls.stdout).some((s: any) => s.id === sb.id));
    assert.match((await forgevm("list")).stdout, new RegExp(`^${sb.id} +- +running `, "m"));
    const ex = await forgevm("exec", sb.id, "--", "sh", "-c", "echo out; echo err >&2; exit 7");
    assert.equal(ex.status, 7);
    assert.equal(ex.stdout, "out\n");
    assert.equal(ex.stderr, "err\n");
    assert.equal((await forgevm("exec", sb.id, "-e", "A=b c", "--", "echo $A")).stdout, "b c\n");
    const logs = await forgevm("logs", sb.id, "-n", "3", "--json");
    assert.equal(logs.status, 0, logs.stderr);
    assert.ok(JSON.parse(logs.stdout).length <= 3);
    const fk = await forgevm("fork", sb.id, "-n", "1", "--json");
    assert.equal(fk.status, 0, fk.stderr);
    const [child] = JSON.parse(fk.stdout).sandboxes;
    assert.equal((await forgevm("exec", child.id, "--", "hostname")).stdout, `${child.id}\n`);
    assert.equal((await forgevm("kill", child.id)).status, 0);
    const snap = await forgevm("snapshot", sb.id, "cli-snap");
    assert.match(snap.stdout, /^snap-[0-9a-f]{8}\n$/, snap.stderr);
    assert.ok(JSON.parse((await forgevm("snapshots", "--json")).stdout).some((x: any) => x.name === "cli-snap"));
    assert.equal(JSON.parse((await forgevm("snapshots", "cli-snap")).stdout).source_id, sb.id);
    assert.equal((await forgevm("snapshot-rm", "cli-snap")).stdout, "deleted cli-snap\n");
    const k = await forgevm("kill", sb.id);
    assert.equal(k.stdout, `destroyed ${sb.id}\n`);
    // The console log is kept after the VM is gone.
    const kept = await forgevm("logs", sb.id, "--json");
    assert.ok(
      JSON.parse(kept.stdout).some((l: string) => /Power down|forgevm|\[/.test(l)),
      kept.stdout,
    );
  });

  it("passes piped standard input on to the command, bytes intact", async () => {
    const r = await runCli(["exec", id, "--", "wc", "-c"], childEnv({ FORGEVM_URL: base }), "abc");
    assert.equal(r.status, 0, r.stderr);
    assert.equal(r.stdout.trim(), "3");
    const bytes = Buffer.from([0, 1, 2, 255, 254, 10, 13]);
    const sum = await runCli(["exec", id, "--", "od", "-An", "-tx1"], childEnv({ FORGEVM_URL: base }), bytes);
    assert.equal(sum.stdout.trim().replace(/\s+/g, " "), "00 01 02 ff fe 0a 0d");
    const json = await runCli(["exec", "--json", id, "--", "cat"], childEnv({ FORGEVM_URL: base }), "piped");
    assert.equal(JSON.parse(json.stdout).stdout, "piped");
  });

  it("runs a throwaway command through the server, and makes and spawns templates showing a first spawn's progress", async () => {
    const run = await forgevm("run", "--json", "-m", "256", "--", "sh", "-c", "echo hi; exit 3");
    assert.equal(run.status, 3, run.stderr);
    assert.equal(JSON.parse(run.stdout).stdout, "hi\n");
    assert.ok(!server.forge.sandboxes.list().some((s) => s.memory_mb === 256 && s.state === "running"), "run destroyed its sandbox");
    const made = await forgevm("template", "create", "cli-tpl", "-m", "256", "--ttl", "10m", "-e", "WHO=cli", "--setup", "echo set > /etc/cli-setup", "--json");
    assert.equal(made.status, 0, made.stderr);
    assert.equal(JSON.parse(made.stdout).ttl_seconds, 600);
    assert.match((await forgevm("template", "ls")).stdout, /^cli-tpl /m);
    const sp = await forgevm("template", "spawn", "cli-tpl");
    assert.equal(sp.status, 0, sp.stderr);
    assert.match(sp.stderr, /first start of template cli-tpl: booting it for its base snapshot/);
    assert.match(sp.stderr, /base snapshot ready/);
    const child = sp.stdout.trim();
    assert.equal((await forgevm("exec", child, "--", "sh", "-c", "cat /etc/cli-setup; echo $WHO")).stdout, "set\ncli\n");
    const ext = await forgevm("extend", child, "2h", "--json");
    assert.ok(Date.parse(JSON.parse(ext.stdout).expires_at) > Date.now() + 110 * 60_000);
    assert.equal((await forgevm("kill", child)).status, 0);
    assert.equal((await forgevm("template", "rm", "cli-tpl")).status, 0);
  });

  it("says what went wrong and what to do", async () => {
    const nf = await forgevm("exec", "sb-00000000", "--", "true");
    assert.equal(nf.status, 1);
    assert.match(nf.stderr, /sandbox sb-00000000 not found/);
    const down = await runCli(["--server", "http://127.0.0.1:9", "list"], childEnv());
    assert.equal(down.status, 1);
    assert.match(down.stderr, /cannot reach the ForgeVM server at http:\/\/127.0.0.1:9.*forgevm serve/);
    const bad = await forgevm("spawn", "--memory", "lots");
    assert.notEqual(bad.status, 0);
    assert.match(bad.stderr, /--memory must be an integer/);
  });
});
