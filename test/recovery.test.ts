// Crash recovery: SIGKILL the server while sandboxes run and an exec is in flight, restart it,
// and check that nothing stays running that is not, no QEMU is orphaned, and expiry still works.
// VMs outlive a crashed server (QEMU runs detached) and the next server re-attaches to them.
import assert from "node:assert/strict";
import type { ChildProcess } from "node:child_process";
import { readdir, readFile, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { after, before, it } from "node:test";
import { alive, freePort, removeAtExit, startServerProcess, testDataDir, waitFor } from "./helpers.js";

let base: string;
let dataDir: string;
let configFile: string;
let server: ChildProcess | null = null;

// A server as a user runs it, on a data directory and a port of its own, named by its config file.
before(async () => {
  dataDir = await testDataDir();
  const port = await freePort();
  base = `http://127.0.0.1:${port}/api/v1`;
  configFile = join(dataDir, "forgevm.yaml");
  await writeFile(configFile, `data_dir: ${dataDir}\nserver:\n  port: ${port}\n`);
});

/** QEMU processes whose command line names this sandbox's VM directory. */
async function qemuPidsOf(id: string): Promise<number[]> {
  const out: number[] = [];
  for (const p of await readdir("/proc")) {
    if (!/^\d+$/.test(p)) continue;
    const cmd = await readFile(`/proc/${p}/cmdline`, "utf8").catch(() => "");
    if (/^(\S*\/)?qemu-system/.test(cmd) && cmd.includes(`/vms/${id}/`)) out.push(Number(p));
  }
  return out;
}

after(async () => {
  if (server && server.exitCode === null) {
    server.kill("SIGTERM");
    await new Promise((r) => server!.once("exit", r));
  }
  removeAtExit(dataDir);
});

it("after a SIGKILL and restart, running sandboxes are re-attached and usable, expiry still works", async () => {
  server = await startServerProcess(configFile, base);
  const ids: string[] = [];
  for (let i = 0; i < 2; i++) {
    const r = await fetch(`${base}/sandboxes`, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ ttl: "10m" }) });
    assert.equal(r.status, 201);
    ids.push(((await r.json()) as { id: string }).id);
  }
  const inflight = fetch(`${base}/sandboxes/${ids[0]}/exec`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ command: "sleep 60" }),
  }).catch((e) => e);
  await new Promise((r) => setTimeout(r, 300));
  const qemuBefore = (await Promise.all(ids.map(qemuPidsOf))).flat();
  assert.equal(qemuBefore.length, 2, "both VMs run");

  server.kill("SIGKILL");
  await new Promise((r) => server!.once("exit", r));
  assert.ok((await inflight) instanceof Error, "the in-flight exec failed with the server");
  // QEMU runs detached: it outlives the server until the restart deals with it.
  assert.ok(qemuBefore.every(alive));

  server = await startServerProcess(configFile, base);
  // Both sandboxes are back, on the same QEMU processes, and usable.
  const list = (await (await fetch(`${base}/sandboxes`)).json()) as { id: string; state: string }[];
  for (const id of ids) assert.equal(list.find((s) => s.id === id)?.state, "running", `${id} is listed as running`);
  assert.deepEqual((await Promise.all(ids.map(qemuPidsOf))).flat().sort(), [...qemuBefore].sort());
  for (const id of ids) {
    const r = await fetch(`${base}/sandboxes/${id}/exec`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ command: "echo back; grep -l '^sleep' /proc/[0-9]*/cmdline 2>/dev/null | wc -l" }),
    });
    assert.equal(r.status, 200);
    // The exec in flight when the server died was killed with the connection that owned it.
    assert.equal(((await r.json()) as { stdout: string }).stdout, "back\n0\n");
  }
  const f = await fetch(`${base}/sandboxes/${ids[1]}/files?path=/etc/hostname`);
  assert.equal(await f.text(), `${ids[1]}\n`);

  // Expiry still happens, for a re-attached sandbox and for a new one.
  const ext = await fetch(`${base}/sandboxes/${ids[0]}/extend`, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ ttl: "1s" }) });
  assert.equal(ext.status, 200);
  const r = await fetch(`${base}/sandboxes`, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ ttl: "5s" }) });
  const { id } = (await r.json()) as { id: string };
  for (const gone of [ids[0], id]) {
    await waitFor(async () => (await fetch(`${base}/sandboxes/${gone}`)).status === 404, 30_000, `expiry of ${gone}`);
    await waitFor(async () => (await qemuPidsOf(gone)).length === 0, 10_000, `the QEMU of ${gone} to stop`);
    await waitFor(
      () =>
        stat(join(dataDir, "vms", gone)).then(
          () => false,
          () => true,
        ),
      5000,
      `the VM directory of ${gone} to go`,
    );
    // Nor its host cgroup, re-attached or not (they were left behind empty).
    if (process.getuid?.() === 0)
      await waitFor(
        () =>
          stat(`/sys/fs/cgroup/forgevm/${gone}`).then(
            () => false,
            () => true,
          ),
        5000,
        `the host cgroup of ${gone} to go`,
      );
  }
  assert.equal(alive(qemuBefore[0]) && alive(qemuBefore[1]), false);

  // A graceful stop destroys what is left: no QEMU survives it.
  server.kill("SIGTERM");
  const code = await new Promise((r) => server!.once("exit", r));
  assert.equal(code, 0);
  assert.deepEqual(await qemuPidsOf(ids[1]), []);
});

it("a graceful stop finishes the exec in flight, ends event streams, and leaves no VM", async () => {
  server = await startServerProcess(configFile, base);
  const r = await fetch(`${base}/sandboxes`, { method: "POST", headers: { "Content-Type": "application/json" }, body: "{}" });
  const { id } = (await r.json()) as { id: string };
  const events = await fetch(`${base}/events`);
  const eventsDone = events.arrayBuffer().then(
    () => "ended",
    (e) => `failed: ${e.message}`,
  );
  const exec = fetch(`${base}/sandboxes/${id}/exec`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ command: "sleep 2; echo fin" }),
  }).then((x) => x.json());
  await new Promise((res) => setTimeout(res, 500));
  const pids = await qemuPidsOf(id);
  assert.equal(pids.length, 1);
  server.kill("SIGTERM");
  assert.deepEqual(((await exec) as { stdout: string }).stdout, "fin\n");
  assert.equal(await eventsDone, "ended");
  const code = await new Promise((res) => server!.once("exit", res));
  assert.equal(code, 0);
  await waitFor(() => !alive(pids[0]), 5000, "QEMU to stop");
  await assert.rejects(stat(join(dataDir, "vms", id)), { code: "ENOENT" });
});

it("after a SIGKILL and restart, a main process with a restart policy runs again, one without does not", async () => {
  server = await startServerProcess(configFile, base);
  const make = async (restart: string) => {
    const r = await fetch(`${base}/sandboxes`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ main: { command: ["sh", "-c", "echo started; exec sleep 300"], restart } }),
    });
    assert.equal(r.status, 201);
    return ((await r.json()) as { id: string }).id;
  };
  const always = await make("always");
  const never = await make("no");
  const lines = async (id: string) => ((await (await fetch(`${base}/sandboxes/${id}/main/logs`)).json()) as { lines: { line: string }[] }).lines.map((l) => l.line);
  for (const id of [always, never]) await waitFor(async () => (await lines(id)).length === 1, 20_000, `the main process of ${id}`);

  server.kill("SIGKILL");
  await new Promise((r) => server!.once("exit", r));
  server = await startServerProcess(configFile, base);
  // The old main processes ended with the server that ran them; "always" brings its one back.
  await waitFor(async () => (await lines(always)).join() === "started,started", 20_000, "the always-policy main process to run again");
  const info = async (id: string) => (await (await fetch(`${base}/sandboxes/${id}`)).json()) as { state: string; main: { running: boolean } };
  assert.deepEqual([(await info(always)).state, (await info(always)).main.running], ["running", true]);
  assert.equal((await info(never)).state, "running");
  assert.deepEqual(await lines(never), ["started"]);
  server.kill("SIGTERM");
  assert.equal(await new Promise((r) => server!.once("exit", r)), 0);
});

it("a sandbox paused when idle stays paused through a SIGKILL of the server, and the next exec after the restart resumes it with its files and processes", async () => {
  server = await startServerProcess(configFile, base);
  const api = async (method: string, path: string, body?: unknown) => {
    const r = await fetch(`${base}${path}`, { method, headers: body ? { "Content-Type": "application/json" } : {}, body: body ? JSON.stringify(body) : undefined });
    return { status: r.status, body: (await r.json()) as any };
  };
  const r = await api("POST", "/sandboxes", { idle: { after: "1s", action: "pause" } });
  assert.equal(r.status, 201, JSON.stringify(r.body));
  const id = r.body.id;
  const bg = await api("POST", `/sandboxes/${id}/exec`, {
    command: "echo kept > /root/kept; nohup sh -c 'echo $$ > /root/bg.pid; while true; do sleep 1; done' >/dev/null 2>&1 & sleep 0.3; cat /root/bg.pid",
  });
  const pid = bg.body.stdout.trim();
  assert.match(pid, /^\d+$/);
  await waitFor(async () => (await api("GET", `/sandboxes/${id}`)).body.state === "paused", 30_000, "the sandbox to pause when idle");
  assert.deepEqual(await qemuPidsOf(id), [], "a paused sandbox has no QEMU");

  server.kill("SIGKILL");
  await new Promise((res) => server!.once("exit", res));
  server = await startServerProcess(configFile, base);
  const after = await api("GET", `/sandboxes/${id}`);
  assert.equal(after.body.state, "paused", "what the server acknowledged (the pause) survived it");
  assert.equal(after.body.paused_reason, "idle");
  const ex = await api("POST", `/sandboxes/${id}/exec`, { command: `cat /root/kept; kill -0 ${pid} && echo alive` });
  assert.equal(ex.status, 200, JSON.stringify(ex.body));
  assert.equal(ex.body.stdout, "kept\nalive\n");
  assert.equal((await api("GET", `/sandboxes/${id}`)).body.state, "running");
  assert.equal((await api("DELETE", `/sandboxes/${id}`)).status, 200);
  server.kill("SIGTERM");
  assert.equal(await new Promise((res) => server!.once("exit", res)), 0);
});
