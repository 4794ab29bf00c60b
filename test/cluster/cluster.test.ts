// A cluster on one machine with real processes: Debian's PostgreSQL in a temporary directory,
// three nodes (their own data directories and ports) and two fronts. Through a front: sandboxes
// spread over the nodes by capacity; exec, files, streams, a WebSocket and the E2B SDK reach the
// right node; every node's events come as one stream; templates reach every node; a request for
// one node's own things goes to the node it names; a snapshot restores on its node; an MCP
// session works through any front; the cluster's API keys work on every front until revoked; a
// SIGKILLed node's sandboxes are lost within the timeout and spawns go elsewhere; a SIGKILLed
// front leaves the other serving; the node comes back and reconciles; the database restarts and
// the fronts and nodes reconnect.
import assert from "node:assert/strict";
import type { ChildProcess } from "node:child_process";
import { spawn } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, describe, it } from "node:test";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { Sandbox } from "e2b";
import WebSocket from "ws";
import { stringify } from "yaml";
import { e2bEnv } from "../e2b-env.js";
import { apiRequest, childEnv, removeAtExit, startServerProcess, stopProcess, stopServers, testConfig, waitFor } from "../helpers.js";
import { freePort, startPostgres, type TestPostgres } from "../postgres.js";
import { tsInterfaces } from "../ts-interfaces.js";

const KEY = "e2b_00c1a57e4";
const H = { "X-API-Key": KEY };
// Long enough that a node busy booting VMs on two loaded cores still heart-beats in time.
const TIMEOUT_MS = 6000;

interface Member {
  id: string;
  url: string;
  config: string;
  proc: ChildProcess | null;
}

let db: TestPostgres;
const nodes: Member[] = [];
const fronts: Member[] = [];

async function member(role: "node" | "front", id: string): Promise<Member> {
  const port = await freePort();
  const cfg = await testConfig((c) => {
    c.server.port = port;
    c.auth.api_key = KEY;
    c.cluster = { role, database: db.url, advertise: "", node_id: id, heartbeat: "500ms", node_timeout: `${TIMEOUT_MS}ms` };
    c.metrics.enabled = false;
  });
  removeAtExit(cfg.data_dir);
  const config = join(cfg.data_dir, "..", `${id}.yaml`);
  writeFileSync(config, stringify(cfg));
  const m: Member = { id, url: `http://127.0.0.1:${port}`, config, proc: null };
  await start(m);
  return m;
}

async function start(m: Member): Promise<void> {
  m.proc = await startServerProcess(m.config, `${m.url}/api/v1`, KEY);
}

/** SIGKILL, as a crash: resolves once the process is gone. */
async function kill(m: Member): Promise<void> {
  const p = m.proc;
  m.proc = null;
  if (!p || p.exitCode !== null || p.signalCode !== null) return;
  const gone = new Promise((r) => p.once("exit", r));
  p.kill("SIGKILL");
  await gone;
}

const api = (m: Member, method: string, path: string, body?: unknown) => apiRequest(m.url, method, path, body, H);

/** The events a member's /events stream sends (after `query`) until `enough` holds of them or 15 s pass. */
async function readEvents(m: Member, query: string, enough: (es: Record<string, string>[]) => boolean): Promise<Record<string, string>[]> {
  const ctl = new AbortController();
  const res = await fetch(`${m.url}/api/v1/events${query}`, { headers: H, signal: ctl.signal });
  assert.equal(res.status, 200);
  const reader = res.body!.getReader();
  const events: Record<string, string>[] = [];
  let text = "";
  const end = Date.now() + 15_000;
  // One read at a time: a read that loses the race to the clock is still the one to wait for.
  let pending = reader.read();
  try {
    while (!enough(events) && Date.now() < end) {
      const next = await Promise.race([pending, new Promise<null>((r) => setTimeout(() => r(null), 1000))]);
      if (!next) continue;
      if (next.done) break;
      pending = reader.read();
      text += new TextDecoder().decode(next.value);
      const frames = text.split("\n\n");
      text = frames.pop() ?? "";
      for (const f of frames) {
        const data = /^data: (.*)$/m.exec(f)?.[1];
        if (data) events.push(JSON.parse(data));
      }
    }
  } finally {
    // The read still waiting ends with the abort: that is not a failure.
    pending.catch(() => {});
    ctl.abort();
  }
  return events;
}

before(async () => {
  db = await startPostgres();
  for (const id of ["n1", "n2", "n3"]) nodes.push(await member("node", id));
  for (const id of ["f1", "f2"]) fronts.push(await member("front", id));
  await waitFor(async () => (await api(fronts[0], "GET", "/cluster/nodes")).body.length === 3, 10_000, "three nodes registered");
});

after(async () => {
  await Promise.all([...fronts, ...nodes].map((m) => (m.proc ? stopProcess(m.proc) : undefined)));
  await stopServers();
  db?.stop();
});

describe("cluster", () => {
  const ids: string[] = [];
  /** Where the first test's sandboxes were placed. */
  const placedOn = new Map<string, string>();
  /** The sandboxes of the node that is killed. */
  let lost: string[] = [];

  it("lists its nodes, and spreads sandboxes over them by capacity", async () => {
    const listed = (await api(fronts[0], "GET", "/cluster/nodes")).body as { id: string; state: string; url: string }[];
    // The SDK's copy of a node's shape is the front's.
    const sdkTypes = tsInterfaces(fileURLToPath(new URL("../../../sdk/typescript/src/types.ts", import.meta.url)));
    assert.deepEqual(Object.keys(listed[0]).sort(), sdkTypes.get("ClusterNode"));
    assert.deepEqual(
      listed.map((n) => [n.id, n.state, n.url]),
      nodes.map((n) => [n.id, "up", n.url]),
    );
    // Twelve at once: a placement takes its memory from the node's free figure before the next heartbeat.
    const made = await Promise.all(Array.from({ length: 12 }, () => api(fronts[0], "POST", "/sandboxes", { memory_mb: 256, ttl: "10m" })));
    for (const r of made) assert.equal(r.status, 201, JSON.stringify(r.body));
    const per = new Map<string, number>();
    for (const r of made) {
      ids.push(r.body.id);
      placedOn.set(r.body.id, r.body.node);
      per.set(r.body.node, (per.get(r.body.node) ?? 0) + 1);
    }
    assert.deepEqual([...per.keys()].sort(), ["n1", "n2", "n3"]);
    // Even, give or take one: a node's heartbeat may count a spawn it is making while the front
    // still holds its reservation, and so look fuller for a moment.
    for (const [node, n] of per) assert.ok(n >= 3 && n <= 5, `node ${node} got ${n} of 12`);
    const all = (await api(fronts[1], "GET", "/sandboxes")).body as { id: string; node: string }[];
    assert.deepEqual(all.map((s) => s.id).sort(), [...ids].sort());
  });

  it("reaches the right node with exec, files, streams and a WebSocket, through either front", async () => {
    const id = ids[0];
    const r = await api(fronts[1], "POST", `/sandboxes/${id}/exec`, { command: "hostname" });
    assert.equal(r.body.stdout, `${id}\n`);
    await fetch(`${fronts[0].url}/api/v1/sandboxes/${id}/files?path=/tmp/x.bin`, {
      method: "POST",
      headers: { ...H, "Content-Type": "application/octet-stream" },
      body: Buffer.alloc(300_000, 7),
    });
    const back = Buffer.from(await (await fetch(`${fronts[1].url}/api/v1/sandboxes/${id}/files?path=/tmp/x.bin`, { headers: H })).arrayBuffer());
    assert.ok(back.equals(Buffer.alloc(300_000, 7)));
    const stream = await fetch(`${fronts[0].url}/api/v1/sandboxes/${id}/exec`, {
      method: "POST",
      headers: { ...H, "Content-Type": "application/json" },
      body: JSON.stringify({ command: "for i in 1 2 3; do echo $i; sleep 0.3; done", stream: true }),
    });
    const lines = (await stream.text())
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l));
    assert.equal(
      lines
        .filter((l) => l.stream === "stdout")
        .map((l) => l.data)
        .join(""),
      "1\n2\n3\n",
    );
    const ws = new WebSocket(`${fronts[1].url.replace("http", "ws")}/api/v1/sandboxes/${id}/exec/ws`, { headers: H });
    const out: string[] = [];
    const done = new Promise<number>((resolve, reject) => {
      ws.on("message", (m) => {
        const msg = JSON.parse(m.toString());
        if (msg.stream === "stdout") out.push(msg.data);
        if (msg.type === "done") resolve(msg.exit_code);
      });
      ws.on("error", reject);
    });
    ws.on("open", () => {
      ws.send(JSON.stringify({ command: "cat; exit 4" }));
      ws.send(JSON.stringify({ stdin: "over the front\n" }));
      ws.send(JSON.stringify({ stdin_eof: true }));
    });
    assert.equal(await done, 4);
    assert.equal(out.join(""), "over the front\n");
  });

  it("serves the E2B SDK: create is placed on a node, commands go to it", async () => {
    e2bEnv(fronts[0].url, KEY);
    const sbx = await Sandbox.create({ timeoutMs: 300_000 });
    try {
      const r = await sbx.commands.run("hostname");
      assert.equal(r.stdout, `${sbx.sandboxId}\n`);
      const at = (await api(fronts[1], "GET", `/sandboxes/${sbx.sandboxId}`)).body.node;
      assert.ok(["n1", "n2", "n3"].includes(at), at);
    } finally {
      await sbx.kill();
    }
  });

  it("serves every node's events as one stream, in order, each naming its node", async () => {
    // A replay from the start: the first test's twelve creations, from all three nodes.
    const replayed = await readEvents(fronts[1], "?last_event_id=0", (es) => es.filter((e) => e.type === "sandbox.created").length >= 12);
    const created = replayed.filter((e) => e.type === "sandbox.created");
    assert.deepEqual([...new Set(created.map((e) => e.node))].sort(), ["n1", "n2", "n3"]);
    for (const id of ids)
      assert.ok(
        created.some((e) => e.sandbox_id === id),
        `no sandbox.created for ${id}`,
      );
    const seqs = replayed.map((e) => Number(e.id));
    assert.deepEqual(
      seqs,
      [...seqs].sort((a, b) => a - b),
      "in the cluster's order",
    );
    // Live: an exec on a sandbox of one node arrives through the other front, with a resumable id.
    const last = seqs[seqs.length - 1];
    const live = readEvents(fronts[0], "", (es) => es.some((e) => e.type === "exec.finished" && e.sandbox_id === ids[2]));
    await new Promise((r) => setTimeout(r, 500));
    await api(fronts[1], "POST", `/sandboxes/${ids[2]}/exec`, { command: "true" });
    const got = (await live).find((e) => e.type === "exec.finished" && e.sandbox_id === ids[2]);
    assert.ok(got && Number(got.id) > last);
    assert.equal(got.node, (await api(fronts[0], "GET", `/sandboxes/${ids[2]}`)).body.node);
    const bad = await api(fronts[0], "GET", "/events?last_event_id=soon");
    assert.equal(bad.status, 400);
    assert.match(bad.body.message, /last_event_id/);
  });

  it("keeps templates for every node: made through one front, spawned through the other on any node", async () => {
    // 256 MiB, not the default size, and one the shared bases have: the spawns restore.
    const made = await api(fronts[0], "POST", "/templates", { name: "everywhere", memory_mb: 256, env: { WHERE: "cluster" } });
    assert.equal(made.status, 201, JSON.stringify(made.body));
    assert.equal((await api(fronts[0], "POST", "/templates", { name: "everywhere" })).status, 409);
    const bad = await api(fronts[0], "POST", "/templates", { name: "broken", memory_mb: "lots" });
    assert.equal(bad.status, 400);
    assert.equal((await api(fronts[1], "GET", "/templates/broken")).status, 404);
    assert.equal((await api(fronts[1], "GET", "/templates/everywhere")).body.memory_mb, 256);
    // Every node mirrors it within a heartbeat.
    await waitFor(async () => (await Promise.all(nodes.map((n) => api(n, "GET", "/templates/everywhere")))).every((r) => r.status === 200), 10_000, "every node to have it");
    const spawned = await Promise.all([
      api(fronts[1], "POST", "/templates/everywhere/spawn", {}),
      ...Array.from({ length: 2 }, () => api(fronts[1], "POST", "/sandboxes", { template: "everywhere" })),
    ]);
    try {
      for (const r of spawned) {
        assert.equal(r.status, 201, JSON.stringify(r.body));
        assert.equal(r.body.memory_mb, 256);
        assert.equal((await api(fronts[0], "POST", `/sandboxes/${r.body.id}/exec`, { command: "echo $WHERE" })).body.stdout, "cluster\n");
      }
      assert.ok(new Set(spawned.map((r) => r.body.node)).size >= 2, "placed by the template's memory, over the nodes");
    } finally {
      for (const r of spawned) if (r.body?.id) await api(fronts[0], "DELETE", `/sandboxes/${r.body.id}`);
    }
    assert.equal((await api(fronts[1], "DELETE", "/templates/everywhere")).status, 200);
    await waitFor(async () => (await Promise.all(nodes.map((n) => api(n, "GET", "/templates/everywhere")))).every((r) => r.status === 404), 10_000, "every node to drop it");
    assert.equal((await api(fronts[0], "POST", "/templates/everywhere/spawn", {})).status, 404);
  });

  it("sends what belongs to one node to the node named in the X-ForgeVM-Node header", async () => {
    const direct = await api(nodes[1], "GET", "/images");
    const via = await apiRequest(fronts[0].url, "GET", "/images", undefined, { ...H, "X-ForgeVM-Node": nodes[1].id });
    assert.equal(via.status, 200);
    assert.deepEqual(via.body, direct.body);
    const unknown = await apiRequest(fronts[0].url, "GET", "/images", undefined, { ...H, "X-ForgeVM-Node": "n9" });
    assert.equal(unknown.status, 404);
    assert.match(unknown.body.message, /no node "n9"/);
    const unnamed = await api(fronts[0], "GET", "/images");
    assert.equal(unnamed.status, 404);
    assert.match(unnamed.body.message, /X-ForgeVM-Node/i);
  });

  it("restores a snapshot on the node that holds it, and lists every node's snapshots", async () => {
    const source = (await api(fronts[0], "GET", `/sandboxes/${ids[3]}`)).body as { node: string };
    await api(fronts[0], "POST", `/sandboxes/${ids[3]}/files`, { path: "/root/kept.txt", content: "from the snapshot\n" });
    const snap = await api(fronts[1], "POST", `/sandboxes/${ids[3]}/snapshot`, { name: "cluster-snap" });
    assert.equal(snap.status, 201, JSON.stringify(snap.body));
    try {
      const listed = (await api(fronts[0], "GET", "/snapshots")).body as { id: string; node: string }[];
      assert.deepEqual(
        listed.filter((s) => s.id === snap.body.id).map((s) => s.node),
        [source.node],
      );
      assert.equal((await api(fronts[0], "GET", `/snapshots/${snap.body.id}`)).body.name, "cluster-snap");
      const restored = await api(fronts[0], "POST", "/snapshots/cluster-snap/spawn", {});
      assert.equal(restored.status, 201, JSON.stringify(restored.body));
      const copy = restored.body.sandboxes[0] as { id: string; node: string };
      try {
        assert.equal(copy.node, source.node);
        assert.equal((await api(fronts[1], "POST", `/sandboxes/${copy.id}/exec`, { command: "cat /root/kept.txt" })).body.stdout, "from the snapshot\n");
      } finally {
        await api(fronts[1], "DELETE", `/sandboxes/${copy.id}`);
      }
      assert.equal((await api(fronts[0], "GET", "/snapshots/no-such-snap")).status, 404);
    } finally {
      assert.equal((await api(fronts[1], "DELETE", `/snapshots/${snap.body.id}`)).status, 200);
    }
  });

  it("serves an MCP session through any front, on the node it was placed on", async () => {
    const client = new Client({ name: "cluster-test", version: "1.0.0" });
    const transport = new StreamableHTTPClientTransport(new URL("/mcp", fronts[0].url), { requestInit: { headers: { Authorization: `Bearer ${KEY}` } } });
    await client.connect(transport);
    let id = "";
    try {
      const sid = transport.sessionId ?? "";
      assert.match(sid, /^n[123]~/, "the session id names its node");
      const made = (await client.callTool({ name: "create_sandbox", arguments: {} })) as { structuredContent?: { sandbox_id: string } };
      id = made.structuredContent!.sandbox_id;
      const r = (await client.callTool({ name: "exec", arguments: { sandbox_id: id, command: "echo via mcp" } })) as { structuredContent?: { stdout: string } };
      assert.equal(r.structuredContent?.stdout, "via mcp\n");
      assert.equal((await api(fronts[1], "GET", `/sandboxes/${id}`)).body.node, sid.split("~")[0]);
      // The other front knows the session from its id alone.
      const listed = await fetch(`${fronts[1].url}/mcp`, {
        method: "POST",
        headers: {
          Authorization: `Bearer ${KEY}`,
          "Content-Type": "application/json",
          Accept: "application/json, text/event-stream",
          "Mcp-Session-Id": sid,
          "Mcp-Protocol-Version": transport.protocolVersion ?? "2025-06-18",
        },
        body: JSON.stringify({ jsonrpc: "2.0", id: 99, method: "tools/list", params: {} }),
      });
      assert.equal(listed.status, 200);
      assert.match(await listed.text(), /create_sandbox/);
      const stranger = await fetch(`${fronts[1].url}/mcp`, { headers: { Authorization: `Bearer ${KEY}`, "Mcp-Session-Id": "nowhere" } });
      assert.equal(stranger.status, 404);
      assert.match(((await stranger.json()) as { message: string }).message, /not one a front gave/);
    } finally {
      await transport.terminateSession().catch(() => {});
      await client.close();
    }
    // The session took its sandbox with it.
    await waitFor(async () => (await api(fronts[0], "GET", `/sandboxes/${id}`)).status === 404, 20_000, "the session's sandbox to go");
  });

  it("a create retried with its Idempotency-Key through another front gets the same sandbox", async () => {
    const headers = { "Idempotency-Key": `cluster-${Date.now()}`, "X-API-Key": KEY };
    const first = await apiRequest(fronts[0].url, "POST", "/sandboxes", { memory_mb: 256 }, headers);
    assert.equal(first.status, 201, JSON.stringify(first.body));
    const retry = await apiRequest(fronts[1].url, "POST", "/sandboxes", { memory_mb: 256 }, headers);
    assert.equal(retry.status, 201, JSON.stringify(retry.body));
    assert.equal(retry.body.id, first.body.id);
    assert.equal((await api(fronts[1], "DELETE", `/sandboxes/${first.body.id}`)).status, 200);
  });

  it("takes the cluster's API keys, made and revoked by the operator, on every front", async () => {
    const made = await api(fronts[0], "POST", "/cluster/keys", { name: "ci runner" });
    assert.equal(made.status, 201, JSON.stringify(made.body));
    const mine = made.body.key as string;
    assert.match(mine, /^fvk_[0-9a-f]{48}$/);
    const as = (m: Member, method: string, path: string, body?: unknown) => apiRequest(m.url, method, path, body, { "X-API-Key": mine });
    assert.equal((await as(fronts[1], "POST", `/sandboxes/${ids[0]}/exec`, { command: "echo keyed" })).body.stdout, "keyed\n");
    assert.equal((await as(fronts[1], "GET", "/sandboxes")).status, 200);
    // E2B's team list, relayed to a node: it shows a key the caller presented, or none; never the operator's.
    for (const [who, headers] of [
      ["a cluster key", { "X-API-Key": mine }],
      ["the operator", H],
    ] as const) {
      const teams = await fetch(`${fronts[0].url}/teams`, { headers: { ...headers, "X-ForgeVM-Node": nodes[0].id } });
      assert.equal(teams.status, 200, who);
      const [team] = (await teams.json()) as { apiKey: string }[];
      assert.equal(team.apiKey, who === "the operator" ? KEY : "", `${who} sees ${team.apiKey ? "a key" : "no key"}`);
    }
    // A WebSocket, whose headers are replayed to the node, and a browser's stream with the key in the query.
    const ws = new WebSocket(`${fronts[0].url.replace("http", "ws")}/api/v1/sandboxes/${ids[0]}/exec/ws`, { headers: { "X-API-Key": mine } });
    const code = await new Promise<number>((resolve, reject) => {
      ws.on("message", (m) => {
        const msg = JSON.parse(m.toString());
        if (msg.type === "done") resolve(msg.exit_code);
      });
      ws.on("error", reject);
      ws.on("open", () => ws.send(JSON.stringify({ command: "exit 5" })));
    });
    assert.equal(code, 5);
    const sse = await fetch(`${fronts[1].url}/api/v1/events?tail=1&api_key=${mine}`);
    assert.equal(sse.status, 200);
    await sse.body?.cancel();
    // Keys are the operator's to manage: listed without the key, and not by a key holder.
    assert.equal((await as(fronts[0], "POST", "/cluster/keys", { name: "more" })).status, 403);
    const listed = (await api(fronts[1], "GET", "/cluster/keys")).body as Record<string, unknown>[];
    const sdkTypes = tsInterfaces(fileURLToPath(new URL("../../../sdk/typescript/src/types.ts", import.meta.url)));
    assert.deepEqual(Object.keys(listed[0]).sort(), sdkTypes.get("ApiKeyInfo"));
    assert.deepEqual(Object.keys(made.body).sort(), [...sdkTypes.get("ApiKeyInfo")!, "key"].sort());
    assert.deepEqual(
      listed.map((k) => [k.id, k.name, k.revoked_at]),
      [[made.body.id, "ci runner", null]],
    );
    assert.ok(!JSON.stringify(listed).includes(mine.slice(4)), "the key is not listed");
    assert.equal((await api(fronts[0], "POST", "/cluster/keys", { name: "" })).status, 400);
    assert.equal((await as(fronts[0], "GET", "/sandboxes")).status, 200);
    assert.equal((await apiRequest(fronts[0].url, "GET", "/sandboxes", undefined, { "X-API-Key": "fvk_wrong" })).status, 401);
    // The CLI, pointed at a front with the operator's key.
    const cli = (...args: string[]) =>
      new Promise<{ status: number | null; stdout: string; stderr: string }>((resolve) => {
        const p = spawn(process.execPath, [fileURLToPath(new URL("../../src/cli/main.js", import.meta.url)), ...args], {
          env: childEnv({ FORGEVM_URL: fronts[1].url, FORGEVM_API_KEY: KEY }),
        });
        let stdout = "";
        let stderr = "";
        p.stdout.on("data", (d) => (stdout += d));
        p.stderr.on("data", (d) => (stderr += d));
        p.on("close", (status) => resolve({ status, stdout, stderr }));
      });
    const nodesJson = await cli("cluster", "nodes", "--json");
    assert.equal(nodesJson.status, 0, nodesJson.stderr);
    assert.deepEqual((JSON.parse(nodesJson.stdout) as { id: string }[]).map((n) => n.id).sort(), ["n1", "n2", "n3"]);
    const second = await cli("cluster", "keys", "create", "cli made");
    assert.equal(second.status, 0, second.stderr);
    assert.match(second.stdout.trim(), /^fvk_[0-9a-f]{48}$/);
    const secondId = /key (key-[0-9a-f]+)/.exec(second.stderr)?.[1];
    assert.ok(secondId, second.stderr);
    assert.equal((await cli("cluster", "keys", "rm", secondId)).status, 0);
    assert.match((await cli("cluster", "keys", "ls")).stdout, /cli made/);
    // The Python SDK, the same way.
    const py = await new Promise<{ status: number | null; stdout: string; stderr: string }>((resolve) => {
      const code = [
        "import json, sys",
        "from forgevm import Client",
        "c = Client(sys.argv[1], api_key=sys.argv[2])",
        "k = c.create_cluster_key('from python')",
        "c.revoke_cluster_key(k['id'])",
        "print(json.dumps({'nodes': sorted(n['id'] for n in c.cluster_nodes()), 'key': k['key'][:4], 'revoked': [x['revoked_at'] is not None for x in c.cluster_keys() if x['id'] == k['id']]}))",
      ].join("\n");
      const p = spawn("python3", ["-c", code, fronts[0].url, KEY], { env: { ...childEnv(), PYTHONPATH: fileURLToPath(new URL("../../../sdk/python", import.meta.url)) } });
      let stdout = "";
      let stderr = "";
      p.stdout.on("data", (d) => (stdout += d));
      p.stderr.on("data", (d) => (stderr += d));
      p.on("close", (status) => resolve({ status, stdout, stderr }));
    });
    assert.equal(py.status, 0, py.stderr);
    assert.deepEqual(JSON.parse(py.stdout), { nodes: ["n1", "n2", "n3"], key: "fvk_", revoked: [true] });
    // An event stream opened with the key before it is revoked ends with it.
    const open = await fetch(`${fronts[1].url}/api/v1/events?api_key=${mine}`);
    assert.equal(open.status, 200);
    const ended = (async () => {
      const reader = open.body!.getReader();
      for (;;) if ((await reader.read().catch(() => ({ done: true }))).done) return Date.now();
    })();
    const revokedAt = Date.now();
    assert.equal((await api(fronts[0], "DELETE", `/cluster/keys/${made.body.id}`)).status, 200);
    const endedAfter = await Promise.race([ended.then((t) => t - revokedAt), new Promise<number>((r) => setTimeout(() => r(Number.POSITIVE_INFINITY), 15_000))]);
    assert.ok(endedAfter < 10_000, `the stream ended within the keys' refresh (after ${endedAfter} ms)`);
    await waitFor(
      async () => (await Promise.all(fronts.map((f) => as(f, "GET", "/sandboxes")))).every((r) => r.status === 401),
      10_000,
      "the revoked key to be refused by every front",
    );
  });

  it("a killed node's sandboxes are lost within the timeout, and spawns go elsewhere", async () => {
    const victim = nodes[0];
    const listed = (await api(fronts[0], "GET", "/sandboxes")).body as { id: string; node: string }[];
    const mine = listed.filter((s) => s.node === victim.id).map((s) => s.id);
    lost = mine;
    const t0 = Date.now();
    await kill(victim);
    // Exactly the first test's sandboxes on that node: nothing made since is left.
    assert.deepEqual([...mine].sort(), ids.filter((id) => placedOn.get(id) === victim.id).sort(), JSON.stringify(listed.filter((s) => s.node === victim.id)));
    await waitFor(async () => (await api(fronts[0], "GET", `/sandboxes/${mine[0]}`)).body.state === "lost", TIMEOUT_MS * 4, "the sandbox to be reported lost");
    assert.ok(Date.now() - t0 < TIMEOUT_MS * 3, `lost after ${Date.now() - t0} ms`);
    const after = (await api(fronts[1], "GET", "/sandboxes")).body as { id: string; state: string }[];
    assert.deepEqual(
      after
        .filter((s) => s.state === "lost")
        .map((s) => s.id)
        .sort(),
      [...mine].sort(),
    );
    const exec = await api(fronts[0], "POST", `/sandboxes/${mine[0]}/exec`, { command: "true" });
    assert.equal(exec.status, 503);
    assert.match(exec.body.message, /lost: its node n1 is down/);
    for (let i = 0; i < 3; i++) {
      const r = await api(fronts[0], "POST", "/sandboxes", { memory_mb: 256 });
      assert.equal(r.status, 201);
      assert.notEqual(r.body.node, victim.id);
      await api(fronts[0], "DELETE", `/sandboxes/${r.body.id}`);
    }
  });

  it("a killed front leaves the other serving everything", async () => {
    await kill(fronts[0]);
    try {
      // One on a node that is up (not the killed one's).
      const id = ids.find((i) => !lost.includes(i))!;
      const r = await api(fronts[1], "POST", `/sandboxes/${id}/exec`, { command: "echo still" });
      assert.equal(r.body.stdout, "still\n", JSON.stringify(r.body));
    } finally {
      await start(fronts[0]);
    }
  });

  it("the node comes back and reconciles: its sandboxes run again", async () => {
    const victim = nodes[0];
    await start(victim);
    const mine = lost;
    let seen: unknown = null;
    await waitFor(
      async () => {
        seen = (await api(fronts[1], "GET", `/sandboxes/${mine[0]}`)).body;
        return (seen as { state: string }).state === "running";
      },
      60_000,
      "the sandbox to run again",
    ).catch((e) => {
      throw new Error(`${e.message}: ${JSON.stringify(seen)}`);
    });
    for (const id of mine) {
      const r = await api(fronts[0], "POST", `/sandboxes/${id}/exec`, { command: "echo back" });
      assert.equal(r.body.stdout, "back\n", `${id}: ${JSON.stringify(r.body)}`);
    }
    assert.deepEqual(
      ((await api(fronts[1], "GET", "/sandboxes")).body as { state: string }[]).filter((s) => s.state === "lost"),
      [],
    );
  });

  it("the database restarts, and fronts and nodes reconnect", async () => {
    db.stop();
    const during = await api(fronts[1], "GET", `/sandboxes/${ids[1]}`);
    assert.equal(during.status, 503);
    const said = JSON.stringify(during.body);
    assert.match(said, /catalogue did not answer/);
    // Where the catalogue lives is the operator's business, not the caller's.
    assert.doesNotMatch(said, /127\.0\.0\.1|localhost|:\d{4,5}\b|postgres/i, said);
    db.start();
    await waitFor(async () => (await api(fronts[1], "GET", `/sandboxes/${ids[1]}`)).status === 200, 20_000, "the front to reconnect");
    await waitFor(
      async () => ((await api(fronts[0], "GET", "/cluster/nodes")).body as { state: string }[]).every((n) => n.state === "up"),
      20_000,
      "every node heart-beating again",
    );
    for (const id of ids) assert.equal((await api(fronts[0], "DELETE", `/sandboxes/${id}`)).status, 200);
    assert.deepEqual((await api(fronts[1], "GET", "/sandboxes")).body, []);
  });
});
