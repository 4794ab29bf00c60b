// Servers that stop, crash and are upgraded: sandboxes outlive their server. A SIGKILL or a
// graceful stop (server.on_stop keep, the default) leaves every VM running with its processes;
// the next server, this build or a newer one, takes each back: processes adopted with their pids
// and output, the main process taken over rather than started twice, ports answering, files
// intact, expiry still working. With server.on_stop: destroy a stop destroys, saying why.
import assert from "node:assert/strict";
import type { ChildProcess } from "node:child_process";
import { cp, mkdtemp, readdir, readFile, stat, symlink, writeFile } from "node:fs/promises";
import { connect } from "node:net";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, it } from "node:test";
import { alive, exitOf, freePort, removeAtExit, startServerProcess, stopProcess, testDataDir, waitFor } from "../helpers.js";

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
  if (server) await stopProcess(server);
  // A stop leaves VMs running: any a failed test left behind are ended (this file's servers started them).
  for (const p of await readdir("/proc")) {
    const cmd = /^\d+$/.test(p) ? await readFile(`/proc/${p}/cmdline`, "utf8").catch(() => "") : "";
    if (/^(\S*\/)?qemu-system/.test(cmd) && cmd.includes(`${dataDir}/`)) process.kill(Number(p), "SIGKILL");
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
    body: JSON.stringify({ command: "echo $$ > /root/inflight.pid; exec sleep 60" }),
  }).catch((e) => e);
  await waitFor(async () => (await fetch(`${base}/sandboxes/${ids[0]}/files?path=/root/inflight.pid`)).ok, 10_000, "the exec in flight to start");
  const qemuBefore = (await Promise.all(ids.map(qemuPidsOf))).flat();
  assert.equal(qemuBefore.length, 2, "both VMs run");

  server.kill("SIGKILL");
  await exitOf(server!);
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
      body: JSON.stringify({ command: "echo back; test -f /root/inflight.pid && kill -0 $(cat /root/inflight.pid) && echo alive" }),
    });
    assert.equal(r.status, 200);
    // The exec in flight when the server died runs on: its client got an error, not its process.
    assert.equal(((await r.json()) as { stdout: string }).stdout, id === ids[0] ? "back\nalive\n" : "back\n");
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

  assert.equal((await fetch(`${base}/sandboxes/${ids[1]}`, { method: "DELETE" })).status, 200);
  server.kill("SIGTERM");
  const code = await exitOf(server!);
  assert.equal(code, 0);
  assert.deepEqual(await qemuPidsOf(ids[1]), []);
});

it("with server.on_stop: destroy, a graceful stop finishes the exec in flight, ends event streams, destroys the sandbox saying why, and leaves no VM", async () => {
  const destroying = join(dataDir, "destroying.yaml");
  await writeFile(destroying, `${await readFile(configFile, "utf8")}  on_stop: destroy\n`);
  let said = "";
  server = await startServerProcess(destroying, base, undefined, { stdout: (t) => (said += t) });
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
  assert.equal(await exitOf(server!), 0, `the server said:\n${said}`);
  await waitFor(() => !alive(pids[0]), 5000, "QEMU to stop");
  await assert.rejects(stat(join(dataDir, "vms", id)), { code: "ENOENT" });
  // Its record says why it ended, and who ended it.
  server = await startServerProcess(configFile, base);
  const all = (await (await fetch(`${base}/sandboxes?all=true`)).json()) as { id: string; state: string; end_reason?: string; ended_by?: string; destroyed_at?: string }[];
  const row = all.find((x) => x.id === id);
  assert.deepEqual([row?.state, row?.end_reason, row?.ended_by, typeof row?.destroyed_at], ["destroyed", "server stop", "server", "string"]);
  server.kill("SIGTERM");
  assert.equal(await exitOf(server!), 0);
});

it("after a SIGKILL and restart, a main process is taken over where it runs, whatever its restart policy: same pid, no restart, its log goes on", async () => {
  server = await startServerProcess(configFile, base);
  const make = async (restart: string) => {
    const r = await fetch(`${base}/sandboxes`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ main: { command: ["sh", "-c", "echo started $$; exec sleep 300"], restart } }),
    });
    assert.equal(r.status, 201);
    return ((await r.json()) as { id: string }).id;
  };
  const always = await make("always");
  const never = await make("no");
  const lines = async (id: string) => ((await (await fetch(`${base}/sandboxes/${id}/main/logs`)).json()) as { lines: { line: string }[] }).lines.map((l) => l.line);
  for (const id of [always, never]) await waitFor(async () => (await lines(id)).length === 1, 20_000, `the main process of ${id}`);
  const before = new Map<string, string[]>();
  for (const id of [always, never]) before.set(id, await lines(id));

  server.kill("SIGKILL");
  await exitOf(server!);
  server = await startServerProcess(configFile, base);
  const info = async (id: string) => (await (await fetch(`${base}/sandboxes/${id}`)).json()) as { state: string; main: { running: boolean; restarts: number } };
  for (const id of [always, never]) {
    const pid = (before.get(id)?.[0] ?? "").split(" ")[1];
    const { state, main } = await info(id);
    assert.deepEqual([state, main.running, main.restarts], ["running", true, 0], `${id}: its main process runs on, not started again`);
    assert.deepEqual(await lines(id), before.get(id), `${id}: one start in its log`);
    const r = await fetch(`${base}/sandboxes/${id}/exec`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ command: `kill -0 ${pid} && echo alive` }),
    });
    assert.equal(((await r.json()) as { stdout: string }).stdout, "alive\n");
  }
  // Taken over, it is the server's again: its exit is recorded and its policy applies.
  assert.equal((await fetch(`${base}/sandboxes/${always}/kill`, { method: "POST", headers: { "Content-Type": "application/json" }, body: "{}" })).status, 200);
  await waitFor(async () => (await info(always)).main.restarts === 1 && (await lines(always)).length === 2, 20_000, "the always-policy main process to restart");
  for (const id of [always, never]) assert.equal((await fetch(`${base}/sandboxes/${id}`, { method: "DELETE" })).status, 200);
  server.kill("SIGTERM");
  assert.equal(await exitOf(server!), 0);
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
  await exitOf(server!);
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
  assert.equal(await exitOf(server!), 0);
});

/** A build of this checkout that says it is newer: its own copy of the compiled code, and a version of its own. */
async function newerBuild(version: string): Promise<string> {
  const here = fileURLToPath(new URL("../../../", import.meta.url));
  const root = await mkdtemp(join(dataDir, "newer-build-"));
  await cp(join(here, "dist", "src"), join(root, "dist", "src"), { recursive: true });
  await cp(join(here, "dist", "web"), join(root, "dist", "web"), { recursive: true }).catch(() => {});
  for (const shared of ["node_modules", "agent", "jail", "bin", "sdk"]) await symlink(join(here, shared), join(root, shared));
  const pkg = JSON.parse(await readFile(join(here, "package.json"), "utf8")) as { version: string };
  await writeFile(join(root, "package.json"), JSON.stringify({ ...pkg, version }));
  return join(root, "dist", "src", "cli", "main.js");
}

it("a SIGTERM leaves six kinds of sandbox running (mid-exec, followed, paused, forkable, serving a port, a service), and a newer build takes each back: same pids, files, port", async () => {
  server = await startServerProcess(configFile, base);
  const api = async (method: string, path: string, body?: unknown) => {
    const r = await fetch(`${base}${path}`, { method, headers: body ? { "Content-Type": "application/json" } : {}, body: body ? JSON.stringify(body) : undefined });
    const text = await r.text();
    return { status: r.status, body: text ? (JSON.parse(text) as any) : null };
  };
  const sh = async (id: string, command: string) => {
    const r = await api("POST", `/sandboxes/${id}/exec`, { command });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    return r.body.stdout as string;
  };
  const hostPort = await freePort();
  const ticking = ["sh", "-c", "i=0; while :; do echo tick $i; i=$((i+1)); sleep 0.3; done"];
  const specs = {
    execing: {},
    followed: { main: { command: ticking } },
    paused: {},
    forkable: { forkable: true },
    serving: { ports: [`${hostPort}:8000`] },
    service: { main: { command: ["sh", "-c", "echo up; exec sleep 600"], restart: "always" } },
  };
  const ids: Record<string, string> = {};
  for (const [k, spec] of Object.entries(specs)) {
    const r = await api("POST", "/sandboxes", { ttl: "15m", ...spec });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    ids[k] = r.body.id;
  }
  const pids: Record<string, string> = {};
  for (const [k, id] of Object.entries(ids)) {
    // An acknowledged write, in every one.
    assert.equal((await api("POST", `/sandboxes/${id}/files`, { path: "/root/ack.txt", content: `acknowledged by ${k}\n` })).status, 200);
    if (k === "paused" || k === "forkable") pids[k] = (await sh(id, "nohup sh -c 'exec sleep 600' >/dev/null 2>&1 & echo $!")).trim();
  }
  pids.serving = (await sh(ids.serving, "cd /root && nohup python3 -m http.server 8000 >/dev/null 2>&1 & echo $!")).trim();
  await waitFor(async () => (await fetch(`http://127.0.0.1:${hostPort}/ack.txt`).catch(() => null))?.ok === true, 20_000, "the published port");
  const main = async (id: string, what: string) => {
    const procs = (await api("GET", `/sandboxes/${id}/top`)).body as { pid: number; command: string }[];
    return String(procs.find((p) => p.command.includes(what))?.pid ?? "");
  };
  await waitFor(async () => (pids.followed = await main(ids.followed, "tick")) !== "", 10_000, "the followed main process");
  await waitFor(async () => (pids.service = await main(ids.service, "sleep 600")) !== "", 10_000, "the service's main process");
  // A command in flight, and a client following a main process's log.
  const execResponse = fetch(`${base}/sandboxes/${ids.execing}/exec`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ command: "echo $$ > /root/exec.pid; i=0; while true; do echo tick $i; i=$((i+1)); sleep 1; done", stream: true }),
  });
  const execPid = execResponse.then((r) => r.headers.get("x-forgevm-pid"));
  const execOut = execResponse.then((r) => r.text());
  await waitFor(async () => (await api("GET", `/sandboxes/${ids.execing}/files/stat?path=/root/exec.pid`)).status === 200, 10_000, "the command in flight");
  pids.execing = (await sh(ids.execing, "cat /root/exec.pid")).trim();
  const followed = fetch(`${base}/sandboxes/${ids.followed}/main/logs?follow=true`).then((r) => r.text());
  // A Daytona session with a working directory and a variable, busy with a command as the server stops.
  const toolbox = async (id: string, path: string, body?: unknown) => {
    const r = await fetch(`${base.replace(/\/api\/v1$/, "")}/daytona/toolbox/${id}${path}`, {
      method: body === undefined ? "GET" : "POST",
      headers: { authorization: "Bearer any-key", "content-type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: r.status, body: (r.status === 204 || r.status === 201 ? null : await r.json()) as any };
  };
  assert.equal((await toolbox(ids.forkable, "/process/session", { sessionId: "kept" })).status, 201);
  assert.equal((await toolbox(ids.forkable, "/process/session/kept/exec", { command: "cd /tmp && export GREETING=still-here" })).body.exitCode, 0);
  assert.equal((await toolbox(ids.forkable, "/process/session/kept/exec", { command: "sleep 12; echo from-before", runAsync: true })).status, 202);
  assert.equal((await api("POST", `/sandboxes/${ids.paused}/pause`)).status, 200);
  // A connection to the published port open as the server stops.
  const open = connect(hostPort, "127.0.0.1");
  await new Promise<void>((r) => open.once("connect", () => r()));
  const openEnded = new Promise<void>((r) => open.once("close", () => r()));
  open.on("error", () => {});
  const qemuBefore = Object.fromEntries(await Promise.all(Object.entries(ids).map(async ([k, id]) => [k, await qemuPidsOf(id)] as const)));

  server.kill("SIGTERM");
  assert.equal(await exitOf(server!), 0);
  // Every stream that was open got a clear end, saying what happened and what to do.
  assert.match(await execOut, /"code":"UNAVAILABLE".*the server is stopping: the sandbox and its processes run on/);
  assert.match((await followed).trim().split("\n").at(-1) ?? "", /forgevm: the server is stopping/);
  await openEnded;
  // Nothing was destroyed: every VM that ran still runs, the same process.
  for (const [k, id] of Object.entries(ids)) {
    if (k === "paused") assert.deepEqual(await qemuPidsOf(id), []);
    else assert.deepEqual(await qemuPidsOf(id), qemuBefore[k], `${k}: its VMM runs on`);
  }

  let printed = "";
  server = await startServerProcess(configFile, base, undefined, { main: await newerBuild("0.999.0-newer"), stdout: (t) => (printed += t) });
  assert.equal((await api("GET", "/health")).body.version, "0.999.0-newer");
  await waitFor(() => /took back 5 running sandboxes \(\d+ processes running in them\)/.test(printed), 10_000, `the start's report (${printed})`);
  for (const [k, id] of Object.entries(ids)) {
    const row = (await api("GET", `/sandboxes/${id}`)).body;
    assert.equal(row.state, k === "paused" ? "paused" : "running", `${k} is there`);
  }
  assert.equal((await api("POST", `/sandboxes/${ids.paused}/resume`)).status, 200);
  for (const [k, id] of Object.entries(ids)) {
    assert.equal(await sh(id, "cat /root/ack.txt"), `acknowledged by ${k}\n`, `${k}: its acknowledged file`);
    if (pids[k]) assert.equal(await sh(id, `kill -0 ${pids[k]} && echo alive`), "alive\n", `${k}: process ${pids[k]} runs on`);
  }
  assert.equal(await (await fetch(`http://127.0.0.1:${hostPort}/ack.txt`)).text(), "acknowledged by serving\n");
  // The exec whose stream the stop ended: its pid came with the stream, and it is followed again by it.
  assert.equal(await execPid, pids.execing, "the stream named its process");
  const listed = (await api("GET", `/sandboxes/${ids.execing}/processes`)).body as { pid: number; adopted: boolean }[];
  assert.ok(
    listed.some((p) => String(p.pid) === pids.execing && p.adopted),
    JSON.stringify(listed),
  );
  const again = await fetch(`${base}/sandboxes/${ids.execing}/processes/${pids.execing}/output`);
  assert.equal(again.status, 200);
  const reader = again.body!.getReader();
  let got = "";
  while (!/"stream":"stdout","data":"[^"]*tick \d+/.test(got)) got += new TextDecoder().decode((await reader.read()).value);
  assert.equal((await api("POST", `/sandboxes/${ids.execing}/processes/${pids.execing}/kill`, { signal: "SIGKILL" })).status, 200);
  for (let r = await reader.read(); !r.done; r = await reader.read()) got += new TextDecoder().decode(r.value);
  assert.match(got.trim().split("\n").at(-1) ?? "", /"stream":"exit".*"exit_code":137/);
  // The main processes were taken over, not started again, and the log has no gap.
  const service = (await api("GET", `/sandboxes/${ids.service}`)).body.main;
  assert.deepEqual([service.running, service.restarts], [true, 0]);
  const ticks = ((await api("GET", `/sandboxes/${ids.followed}/main/logs`)).body.lines as { line: string }[]).map((l) => Number(l.line.split(" ")[1]));
  assert.deepEqual(
    ticks,
    ticks.map((_, i) => i),
    "every tick, in order, across the restart",
  );
  // The session is back under its id, its shell's state kept; a new command waits for the one
  // the shell was running and gets only its own output.
  const inSession = await toolbox(ids.forkable, "/process/session/kept/exec", { command: "echo $GREETING $(pwd)" });
  assert.deepEqual([inSession.body.exitCode, inSession.body.stdout], [0, "still-here /tmp\n"], JSON.stringify(inSession.body));
  // A forkable sandbox forks after the restart, its child with the same files and processes.
  const fork = await api("POST", `/sandboxes/${ids.forkable}/fork`, { count: 1 });
  assert.equal(fork.status, 201, JSON.stringify(fork.body));
  const child = fork.body.sandboxes[0].id as string;
  assert.equal(await sh(child, `cat /root/ack.txt; kill -0 ${pids.forkable} && echo alive`), "acknowledged by forkable\nalive\n");
  // Its copy has the session too.
  assert.equal((await toolbox(child, "/process/session/kept/exec", { command: "echo $GREETING" })).body.stdout, "still-here\n");

  for (const id of [...Object.values(ids), child]) assert.equal((await api("DELETE", `/sandboxes/${id}`)).status, 200);
  server.kill("SIGTERM");
  assert.equal(await exitOf(server!), 0);
  for (const id of [...Object.values(ids), child]) assert.deepEqual(await qemuPidsOf(id), [], `${id}: no VMM left`);
});
