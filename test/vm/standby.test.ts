// Standby on idle, against real VMs: a sandbox with an idle policy pauses once nothing is in
// flight, holds no VM while paused, and any call for it resumes it first and is then served (a
// REST exec, a file read, a WebSocket exec, an inbound TCP connection on a published port whose
// first bytes reach the guest). Work in flight (a long exec, a followed log, an attached
// process) keeps it up. Many pause cycles, and pauses that cannot be recorded, are in
// pause-cycles.test.ts, which measures no time and so runs beside other files.
import assert from "node:assert/strict";
import { mkdtemp } from "node:fs/promises";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import WebSocket from "ws";
import type { RunningServer } from "../../src/compose/serve.js";
import { alive, apiRequest, assertNoVmLeft, freePort, removeAtExit, startTestServer, waitFor } from "../helpers.js";
import { writeBusyboxImage } from "../oci-writer.js";

const IMAGE = "local/standby-httpd:v1";
let server: RunningServer;
let base: string;
const api = (method: string, path: string, body?: unknown) => apiRequest(base, method, path, body);
const state = async (id: string) => (await api("GET", `/sandboxes/${id}`)).body;
const events = (id: string, type: string) => server.forge.events.replay(0, 1_000_000).filter((e) => e.sandbox_id === id && e.type === type);

before(async () => {
  server = await startTestServer();
  base = server.url;
  const dir = await mkdtemp(join(tmpdir(), "fvt-standby-"));
  removeAtExit(dir);
  const layout = await writeBusyboxImage(dir, ["sh", "httpd", "cat", "echo", "sleep", "seq", "kill"], [{ path: "www/index.html", data: "served after a wake\n" }], {
    Env: ["PATH=/bin"],
    Cmd: ["httpd", "-f", "-p", "80", "-h", "/www"],
  });
  await server.forge.images.import(layout, { name: IMAGE });
});

after(async () => {
  await server?.close();
  if (server) await assertNoVmLeft(server.forge);
});

/** Waits until the sandbox is paused, and checks it holds no VM then. */
async function untilPaused(id: string, ms = 30_000): Promise<Record<string, any>> {
  const before = events(id, "sandbox.paused").length;
  await waitFor(async () => (await state(id)).state === "paused" && events(id, "sandbox.paused").length > before, ms, `sandbox ${id} to pause`);
  const row = server.forge.sandboxes.get(id);
  assert.equal(row.vm_pid, null, "a paused sandbox has no VMM process");
  return state(id);
}

// Each test has a sandbox of its own and reads only its own state and events: they run at once,
// so that their idle timers overlap.
describe("standby on idle", { concurrency: true }, () => {
  it("pauses an idle sandbox, and a REST exec, a file read and a WebSocket exec each wake it and are served", async () => {
    const r = await api("POST", "/sandboxes", { idle: { after: "2s", action: "pause" } });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    assert.deepEqual(r.body.idle, { after: "2s", action: "pause" });
    const id = r.body.id;
    const pid = server.forge.sandboxes.get(id).vm_pid!;
    assert.equal((await api("POST", `/sandboxes/${id}/exec`, { command: "echo kept > /root/kept.txt" })).body.exit_code, 0);
    // Reading its state (untilPaused polls it), listing sandboxes, its metrics and health checks
    // are no activity: polled all along, it pauses all the same.
    const polling = setInterval(() => {
      for (const path of ["/sandboxes", "/health", `/sandboxes/${id}/metrics`, "/stats"]) void api("GET", path).catch(() => {});
    }, 150);
    const paused = await untilPaused(id).finally(() => clearInterval(polling));
    assert.equal(paused.paused_reason, "idle");
    assert.equal(alive(pid), false, "the VMM is gone while paused");
    assert.equal(events(id, "sandbox.paused").at(-1)?.data?.reason, "idle");

    const ex = await api("POST", `/sandboxes/${id}/exec`, { command: "cat /root/kept.txt" });
    assert.equal(ex.status, 200, JSON.stringify(ex.body));
    assert.equal(ex.body.stdout, "kept\n");
    assert.equal(events(id, "sandbox.resumed").at(-1)?.data?.by, "rest");
    assert.equal((await state(id)).state, "running");

    await untilPaused(id);
    const file = await fetch(`${base}/api/v1/sandboxes/${id}/files?path=/root/kept.txt`);
    assert.equal(file.status, 200);
    assert.equal(await file.text(), "kept\n");

    await untilPaused(id);
    const ws = new WebSocket(`${base.replace("http", "ws")}/api/v1/sandboxes/${id}/exec/ws`);
    const out: string[] = [];
    const done = new Promise<any>((resolve, reject) => {
      ws.on("message", (m) => {
        const msg = JSON.parse(String(m));
        if (msg.stream === "stdout") out.push(msg.data);
        if (msg.type === "done" || msg.type === "error") resolve(msg);
      });
      ws.on("error", reject);
      ws.on("close", () => resolve({ type: "closed" }));
    });
    ws.on("open", () => {
      ws.send(JSON.stringify({ command: "cat" }));
      ws.send(JSON.stringify({ stdin: "typed while it woke\n" }));
      ws.send(JSON.stringify({ stdin_eof: true }));
    });
    const end = await done;
    assert.equal(end.exit_code, 0, JSON.stringify(end));
    assert.equal(out.join(""), "typed while it woke\n");
    assert.equal(events(id, "sandbox.resumed").at(-1)?.data?.by, "websocket");
    await api("DELETE", `/sandboxes/${id}`);
  });

  it("an inbound connection on a published port wakes it, and the connection's first bytes reach the guest", async () => {
    const port = await freePort();
    const r = await api("POST", "/sandboxes", { image: IMAGE, main: { restart: "always" }, ports: [`${port}:80`], idle: { after: "2s", action: "pause" } });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    const id = r.body.id;
    await waitFor(async () => (await fetch(`http://127.0.0.1:${port}/`).catch(() => null))?.status === 200, 30_000, "httpd to serve");
    await untilPaused(id);
    // A raw connection: the request is written at once, while the sandbox still sleeps.
    const reply = await new Promise<string>((resolve, reject) => {
      const sock = connect(port, "127.0.0.1", () => sock.write("GET /index.html HTTP/1.0\r\nHost: x\r\n\r\n"));
      const chunks: Buffer[] = [];
      sock.on("data", (c) => chunks.push(c));
      sock.on("end", () => resolve(Buffer.concat(chunks).toString()));
      sock.on("error", reject);
    });
    assert.match(reply, /^HTTP\/1\.[01] 200/);
    assert.match(reply, /served after a wake/);
    assert.equal(events(id, "sandbox.resumed").at(-1)?.data?.by, "port");
    // The main process was carried over, not started again.
    assert.equal((await state(id)).main?.restarts ?? 0, 0);
    await api("DELETE", `/sandboxes/${id}`);
  });

  it("a long exec and a followed log keep it up; it pauses once they end", async () => {
    const r = await api("POST", "/sandboxes", {
      idle: { after: "1s", action: "pause" },
      main: { command: ["sh", "-c", "while true; do echo tick; sleep 1; done"], restart: "no" },
    });
    const id = r.body.id;
    const exec = api("POST", `/sandboxes/${id}/exec`, { command: "sleep 4; echo done" });
    await new Promise((res) => setTimeout(res, 3000));
    assert.equal((await state(id)).state, "running", "a running exec keeps it up");
    assert.equal((await exec).body.stdout, "done\n");
    // Following the main process's log is a client waiting on the sandbox.
    const ctl = new AbortController();
    const follow = fetch(`${base}/api/v1/sandboxes/${id}/main/logs?follow=true`, { signal: ctl.signal });
    const res = await follow;
    const reader = res.body!.getReader();
    await reader.read();
    await new Promise((res) => setTimeout(res, 3000));
    assert.equal((await state(id)).state, "running", "a followed log keeps it up");
    ctl.abort();
    await reader.cancel().catch(() => {});
    await untilPaused(id);
    await api("DELETE", `/sandboxes/${id}`);
  });

  it("bad input: an invalid idle is a 400 naming the field; resume of a destroyed sandbox is a 404; secrets keep their refusal", async () => {
    for (const idle of [{ after: "soon" }, { after: "10ms" }, { after: "5s", action: "sleep" }, "5s"]) {
      const r = await api("POST", "/sandboxes", { idle });
      assert.equal(r.status, 400, JSON.stringify(r.body));
      assert.match(JSON.stringify(r.body), /idle/);
    }
    const s = await api("POST", "/sandboxes", {});
    await api("DELETE", `/sandboxes/${s.body.id}`);
    assert.equal((await api("POST", `/sandboxes/${s.body.id}/resume`)).status, 404);
    const secret = await api("POST", "/sandboxes", { secrets: { TOKEN: "t0ps3cret" } });
    const p = await api("POST", `/sandboxes/${secret.body.id}/pause`);
    assert.equal(p.status, 409, JSON.stringify(p.body));
    assert.match(JSON.stringify(p.body), /secrets/);
    assert.equal((await api("POST", "/sandboxes", { secrets: { T: "x" }, idle: { after: "5s" } })).status, 400);
    await api("DELETE", `/sandboxes/${secret.body.id}`);
  });
});
