// Workloads with Docker's verbs, against real VMs: an image's own command as the main process
// (a busybox httpd serving a page through a published port), stop and start with the disk kept,
// restart policies, the main process's log (followed as it is written), names, and the state
// machine's 409s.
import assert from "node:assert/strict";
import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { after, before, describe, it } from "node:test";
import type { RunningServer } from "../src/api/serve.js";
import { apiRequest, assertNoVmLeft, childEnv, freePort, removeAtExit, startTestServer, waitFor } from "./helpers.js";
import { writeBusyboxImage } from "./oci-writer.js";

const IMAGE = "local/httpd:v1";
const CLI = fileURLToPath(new URL("../src/cli/main.js", import.meta.url));
const run = promisify(execFile);
let server: RunningServer;
let base: string;

const api = (method: string, path: string, body?: unknown) => apiRequest(base, method, path, body);

before(async () => {
  server = await startTestServer();
  base = server.url;
  const dir = await mkdtemp(join(tmpdir(), "fvt-workloads-"));
  removeAtExit(dir);
  const layout = await writeBusyboxImage(
    dir,
    ["sh", "httpd", "cat", "echo", "sleep", "ls", "kill", "id", "mkdir", "wc"],
    [{ path: "www/index.html", data: "hello from the image's own command\n" }],
    {
      Env: ["PATH=/bin", "GREETING=from-image-env"],
      WorkingDir: "/www",
      Cmd: ["httpd", "-f", "-v", "-p", "80", "-h", "/www"],
    },
  );
  await server.forge.importImage(layout, { name: IMAGE });
});

after(async () => {
  await server?.close();
  if (server) await assertNoVmLeft(server.forge);
});

describe("an image's own command as the main process", () => {
  it("serves a page from the image's CMD through a published port, stops and starts with its disk kept", async () => {
    const port = await freePort();
    const r = await api("POST", "/sandboxes", { image: IMAGE, name: "web", main: { restart: "unless-stopped" }, ports: [`${port}:80`] });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    assert.equal(r.body.name, "web");
    assert.deepEqual(r.body.main.command, ["httpd", "-f", "-v", "-p", "80", "-h", "/www"]);
    const id = r.body.id;
    const page = async () =>
      await fetch(`http://127.0.0.1:${port}/`)
        .then((x) => x.text())
        .catch(() => "");
    await waitFor(async () => (await page()) === "hello from the image's own command\n", 30_000, "the page");

    // The name works wherever the id does; the main process runs in WORKDIR with the image's env.
    const ex = await api("POST", "/sandboxes/web/exec", { command: "echo $GREETING; echo kept > /www/note.txt" });
    assert.equal(ex.body.stdout, "from-image-env\n");
    assert.equal((await api("GET", "/sandboxes/web")).body.main.running, true);

    const stopped = await api("POST", "/sandboxes/web/stop", { timeout: "5s" });
    assert.equal(stopped.status, 200, JSON.stringify(stopped.body));
    assert.equal(stopped.body.state, "stopped");
    assert.equal(stopped.body.main.running, false);
    assert.equal(await page(), "", "nothing serves while stopped");
    // Wrong states are 409s that say the state.
    for (const [m, p, b] of [
      ["POST", "/sandboxes/web/exec", { command: "true" }],
      ["POST", "/sandboxes/web/stop", {}],
      ["POST", "/sandboxes/web/kill", {}],
      ["POST", "/sandboxes/web/fork", {}],
      ["GET", "/sandboxes/web/files?path=/www/note.txt", undefined],
    ] as const) {
      const x = await api(m, p, b);
      assert.equal(x.status, 409, `${m} ${p}: ${JSON.stringify(x.body)}`);
      assert.match(x.body.message, /is stopped/);
    }
    const started = await api("POST", "/sandboxes/web/start", {});
    assert.equal(started.status, 200, JSON.stringify(started.body));
    assert.equal(started.body.state, "running");
    assert.equal((await api("POST", "/sandboxes/web/start", {})).status, 409);
    await waitFor(async () => (await page()).startsWith("hello"), 30_000, "the page after start");
    assert.equal(await fetch(`http://127.0.0.1:${port}/note.txt`).then((x) => x.text()), "kept\n", "the disk was kept");

    // httpd -v logs each response to stderr: the log has them, timestamped.
    const logs = await api("GET", "/sandboxes/web/main/logs?tail=50");
    assert.ok(
      logs.body.lines.some((l: { line: string; stream: string; ts: string }) => l.stream === "stderr" && /response:200/.test(l.line) && !Number.isNaN(Date.parse(l.ts))),
      JSON.stringify(logs.body),
    );

    // SIGTERM through kill: unless-stopped brings it back (it was not a person's stop).
    assert.equal((await api("POST", "/sandboxes/web/kill", { signal: "TERM" })).body.signal, 15);
    await waitFor(async () => (await api("GET", "/sandboxes/web")).body.main.restarts === 1, 15_000, "a restart after the kill");
    await waitFor(async () => (await page()).startsWith("hello"), 30_000, "the page after the policy's restart");
    assert.equal((await api("DELETE", `/sandboxes/${id}`)).status, 200);
    assert.equal((await api("GET", "/sandboxes/web")).status, 404, "the name is free once the sandbox is gone");
  });

  it("restarts a failing main process under on-failure and gives up after max; follows its log as it is written", async () => {
    const r = await api("POST", "/sandboxes", {
      image: IMAGE,
      main: { command: ["sh", "-c", "echo run at $(cat /tmp/n 2>/dev/null || echo 0); echo x >> /tmp/n; sleep 0.2; exit 1"], restart: "on-failure:2" },
    });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    const id = r.body.id;
    try {
      await waitFor(
        async () => {
          const m = (await api("GET", `/sandboxes/${id}`)).body.main;
          return m.restarts === 2 && m.running === false && m.exit_code === 1;
        },
        30_000,
        "two restarts, then giving up",
      );
      await new Promise((res) => setTimeout(res, 1500));
      assert.equal((await api("GET", `/sandboxes/${id}`)).body.main.restarts, 2, "no third restart");
      const n = await api("POST", `/sandboxes/${id}/exec`, { command: "wc -l < /tmp/n" });
      assert.equal(n.body.stdout.trim(), "3", "three runs in all");
      const lines = (await api("GET", `/sandboxes/${id}/main/logs`)).body.lines.map((l: { line: string }) => l.line);
      assert.equal(lines.filter((l: string) => l.startsWith("run at")).length, 3, lines.join("|"));
      assert.equal((await api("POST", `/sandboxes/${id}/kill`, {})).status, 409, "nothing to signal");
    } finally {
      await api("DELETE", `/sandboxes/${id}`);
    }

    // A main process that writes slowly: follow gets each line as it comes.
    const slow = await api("POST", "/sandboxes", { image: IMAGE, main: { command: ["sh", "-c", "for i in 1 2 3; do echo tick $i; sleep 1; done; sleep 300"] } });
    try {
      const res = await fetch(`${base}/api/v1/sandboxes/${slow.body.id}/main/logs?follow=true`);
      const reader = (res.body as ReadableStream<Uint8Array>).getReader();
      const seen: { line: string; at: number }[] = [];
      let buf = "";
      while (seen.length < 3) {
        buf += new TextDecoder().decode((await reader.read()).value);
        for (;;) {
          const nl = buf.indexOf("\n");
          if (nl < 0) break;
          seen.push({ line: JSON.parse(buf.slice(0, nl)).line, at: Date.now() });
          buf = buf.slice(nl + 1);
        }
      }
      await reader.cancel();
      assert.deepEqual(
        seen.map((s) => s.line),
        ["tick 1", "tick 2", "tick 3"],
      );
      assert.ok(seen[2].at - seen[0].at >= 1500, "lines arrived as they were written, not at the end");
    } finally {
      await api("DELETE", `/sandboxes/${slow.body.id}`);
    }
  });

  it("stops a sandbox left idle, and not one in use", async () => {
    const [idle, busy] = await Promise.all([api("POST", "/sandboxes", { idle_stop: "3s" }), api("POST", "/sandboxes", { idle_stop: "3s" })]);
    assert.equal(idle.body.idle_stop, "3s", JSON.stringify(idle.body));
    try {
      // The busy one gets a command every second; the idle one nothing.
      const until = Date.now() + 9000;
      while (Date.now() < until) {
        assert.equal((await api("POST", `/sandboxes/${busy.body.id}/exec`, { command: "true" })).status, 200);
        await new Promise((r) => setTimeout(r, 1000));
      }
      await waitFor(async () => (await api("GET", `/sandboxes/${idle.body.id}`)).body.state === "stopped", 20_000, "the idle sandbox to stop");
      assert.equal((await api("GET", `/sandboxes/${busy.body.id}`)).body.state, "running");
      assert.equal((await api("POST", `/sandboxes/${idle.body.id}/start`, {})).body.state, "running");
      assert.equal((await api("POST", "/sandboxes", { idle_stop: "10ms" })).status, 400);
    } finally {
      await Promise.all([api("DELETE", `/sandboxes/${idle.body.id}`), api("DELETE", `/sandboxes/${busy.body.id}`)]);
    }
  });

  it("refuses bad names, taken names, bad policies and images without a command", async () => {
    assert.equal((await api("POST", "/sandboxes", { name: "-bad" })).status, 400);
    assert.equal((await api("POST", "/sandboxes", { name: "sb-12345678" })).status, 400);
    assert.equal((await api("POST", "/sandboxes", { main: { restart: "sometimes" } })).status, 400);
    const noCmd = await api("POST", "/sandboxes", { main: {} });
    assert.equal(noCmd.status, 400, "the default image has no CMD");
    assert.match(noCmd.body.message, /main\.command/);
    const a = await api("POST", "/sandboxes", { name: "taken" });
    try {
      const b = await api("POST", "/sandboxes", { name: "taken" });
      assert.equal(b.status, 409);
      assert.match(b.body.message, /taken by sandbox/);
    } finally {
      await api("DELETE", `/sandboxes/${a.body.id}`);
    }
  });
});

describe("the command line's verbs", () => {
  const cli = (...args: string[]) => run("node", [CLI, "--server", base, ...args], { env: childEnv() });

  it("run -d, ps, logs, kill -s, stop, start, rm", async () => {
    const id = (await cli("run", "-d", "-i", IMAGE, "--name", "cli-web", "--restart", "always", "--", "sh", "-c", "echo up $$; exec sleep 300")).stdout.trim();
    assert.match(id, /^sb-[0-9a-f]{8}$/);
    try {
      await waitFor(async () => (await cli("logs", "cli-web")).stdout.startsWith("up "), 20_000, "the main process's first line");
      const ps = (await cli("ps")).stdout;
      assert.match(ps, new RegExp(`${id}\\tcli-web\\trunning\\t[^\\t]*httpd:v1\\tup \\(always\\)`));
      const stamped = (await cli("logs", "-t", "cli-web")).stdout;
      assert.match(stamped, /^\d{4}-\d\d-\d\dT\S+Z up \d+\n$/);
      // A signal is not a person's stop: "always" brings it back.
      await cli("kill", "-s", "TERM", "cli-web");
      await waitFor(async () => (await cli("logs", "cli-web")).stdout.split("\n").filter(Boolean).length === 2, 20_000, "the restart's line");
      await assert.rejects(cli("rm", "cli-web"), (e: any) => /is running: stop it first, or use rm -f/.test(e.stderr));
      await cli("stop", "-t", "2s", "cli-web");
      assert.match((await cli("ps", "--state", "stopped")).stdout, new RegExp(`${id}\\tcli-web\\tstopped`));
      assert.doesNotMatch((await cli("ps")).stdout, /cli-web/);
      await cli("start", "cli-web");
      await waitFor(async () => (await cli("logs", "cli-web")).stdout.split("\n").filter(Boolean).length === 3, 20_000, "the start's line");
      await cli("stop", "cli-web");
      assert.equal((await cli("rm", "cli-web")).stdout.trim(), "cli-web");
      assert.equal((await apiRequest(base, "GET", `/sandboxes/${id}`)).status, 404);
    } finally {
      await apiRequest(base, "DELETE", `/sandboxes/${id}`);
    }
    await assert.rejects(cli("run", "--restart", "always", "--", "true"), (e: any) => /--restart needs -d/.test(e.stderr));
  });
});
