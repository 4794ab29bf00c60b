// Pauses that lose nothing, against real VMs: fifty pause/resume cycles by every way in (the CLI,
// the SDK, REST, a call that wakes it) keep every acknowledged file, a writer process with its pid
// and its output, and a code context's variables; a pause whose snapshot cannot be recorded
// leaves the sandbox running in the same VM, and it pauses later; a pause stores only the pages
// that differ from the RAM file the sandbox was restored from; resumes take VMMs started ahead. Nothing here measures time, so
// the file runs beside others (standby.test.ts has the idle timers).
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { after, before, describe, it } from "node:test";
import { basename } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { Client } from "forgevm";
import type { RunningServer } from "../../src/compose/serve.js";
import { apiRequest, assertNoVmLeft, childEnv, startTestServer, waitFor } from "../helpers.js";

const CLI = fileURLToPath(new URL("../../src/cli/main.js", import.meta.url));
const cli = async (...args: string[]) => (await promisify(execFile)("node", [CLI, "--server", base, ...args], { env: childEnv() })).stdout;

let server: RunningServer;
let base: string;
const api = (method: string, path: string, body?: unknown) => apiRequest(base, method, path, body);
const state = async (id: string) => (await api("GET", `/sandboxes/${id}`)).body;

before(async () => {
  server = await startTestServer();
  base = server.url;
});

after(async () => {
  await server?.close();
  if (server) await assertNoVmLeft(server.forge);
});

describe("pauses that lose nothing", () => {
  it("50 pause/resume cycles (CLI, SDK, REST, a wake) keep every acknowledged file, the writer process with its pid, and a code context's variables", async () => {
    const writer = "echo $$ > /root/w.pid; i=0; while true; do i=$((i+1)); echo $i >> /root/w.log; sleep 0.05; done";
    const spawned = JSON.parse(await cli("spawn", "--idle-pause", "1h", "--json"));
    assert.deepEqual(spawned.idle, { after: "1h0m0s", action: "pause" });
    await api("DELETE", `/sandboxes/${spawned.id}`);
    const r = await api("POST", "/sandboxes", { main: { command: ["sh", "-c", writer], restart: "no" } });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    const sb = r.body.id;
    await waitFor(async () => (await api("POST", `/sandboxes/${sb}/exec`, { command: "test -s /root/w.pid" })).body.exit_code === 0, 20_000, "the writer to start");
    const pid = (await api("POST", `/sandboxes/${sb}/exec`, { command: "cat /root/w.pid" })).body.stdout.trim();
    const code = await api("POST", `/sandboxes/${sb}/code`, { code: "x = 41", language: "python" });
    assert.equal(code.status, 200, JSON.stringify(code.body));
    const ctx = code.body.context;
    const client = new Client({ baseUrl: base });
    const t0 = Date.now();
    let fromBlank = 0;
    for (let i = 0; i < 50; i++) {
      const put = await api("POST", `/sandboxes/${sb}/files`, { path: `/root/c-${i}`, content: `cycle ${i}\n` });
      assert.equal(put.status, 200, `the write of cycle ${i} is acknowledged: ${JSON.stringify(put.body)}`);
      // Each way in: the CLI, the SDK, REST, and (every fourth) a call that wakes it.
      if (i === 0) assert.match(await cli("pause", sb), new RegExp(sb));
      else if (i % 4 === 1) assert.equal((await client.pause(sb)).state, "paused");
      else assert.equal((await api("POST", `/sandboxes/${sb}/pause`)).body.state, "paused");
      if (i === 0) {
        assert.match(await cli("ps", "--state", "paused"), new RegExp(`${sb} .*paused`));
        assert.match(await cli("resume", sb), new RegExp(sb));
      } else if (i % 4 === 1) assert.equal((await client.resume(sb)).state, "running");
      else if (i % 4 === 2) assert.equal((await api("POST", `/sandboxes/${sb}/resume`, {})).body.state, "running");
      else assert.equal((await api("POST", `/sandboxes/${sb}/exec`, { command: "true" })).body.exit_code, 0);
      // A resume takes a VMM started ahead for it when one is ready (blank-vmms.ts), named by its own id.
      if (basename(server.forge.sandboxes.get(sb).vm_dir ?? "").startsWith("blank-")) fromBlank++;
    }
    const cycleMs = (Date.now() - t0) / 50;
    // The first resume of its shape finds none; the refill has about a cycle to start the next.
    assert.ok(fromBlank >= 25, `${fromBlank} of 50 resumes took a VMM started ahead`);
    const check = await api("POST", `/sandboxes/${sb}/exec`, {
      command: `for i in $(seq 0 49); do [ "$(cat /root/c-$i)" = "cycle $i" ] || echo "lost c-$i"; done; kill -0 ${pid} && echo alive; cat /root/w.pid; awk 'NR != $1 { print "gap at line " NR; exit }' /root/w.log; wc -l < /root/w.log`,
    });
    const lines = check.body.stdout.trim().split("\n");
    assert.deepEqual(lines.slice(0, 2), ["alive", pid], check.body.stdout);
    assert.ok(Number(lines[2]) > 50, `the writer went on writing (${lines[2]} lines), no gap, nothing lost: ${check.body.stdout}`);
    assert.equal(lines.length, 3, check.body.stdout);
    const again = await api("POST", `/sandboxes/${sb}/code`, { code: "x + 1", context: ctx });
    assert.equal(again.body.results?.[0]?.text, "42", JSON.stringify(again.body));
    const main = (await state(sb)).main;
    assert.equal(main.running, true);
    assert.equal(main.restarts, 0);
    // The server counts the pauses and how long each resume took.
    const metrics = await (await fetch(`${base}/metrics`)).text();
    assert.match(metrics, /forgevm_pauses_total\{reason="request"\} (\d+)/);
    assert.ok(Number(/forgevm_pauses_total\{reason="request"\} (\d+)/.exec(metrics)![1]) >= 50);
    assert.match(metrics, /forgevm_resume_duration_seconds_count\{by="request"\} \d+/);
    assert.match(metrics, /forgevm_resume_duration_seconds_count\{by="rest"\} \d+/);
    console.log(JSON.stringify({ cycles: 50, ms_per_cycle: Math.round(cycleMs), resumes_into_vmms_started_ahead: fromBlank }));
    await api("DELETE", `/sandboxes/${sb}`);
  });

  it("a pause stores only what differs from the RAM it was restored from: an idle sandbox at most 10 MiB, 20 MiB written in memory kept across two pauses", async () => {
    const sb = (await api("POST", "/sandboxes", {})).body.id;
    const exec = async (command: string) => (await api("POST", `/sandboxes/${sb}/exec`, { command })).body;
    const pausedMiB = async () => {
      assert.equal((await api("POST", `/sandboxes/${sb}/pause`)).status, 200);
      const snap = server.forge.snapshots.list().find((r) => r.id === server.forge.sandboxes.get(sb).snapshot_id)!;
      assert.equal(snap.format, "mapped", "its RAM is the file it was restored from, linked");
      return snap.size_bytes / 1048576;
    };
    const idle = await pausedMiB();
    assert.ok(idle <= 10, `an idle sandbox's pause stores ${idle.toFixed(1)} MiB`);
    assert.equal((await api("POST", `/sandboxes/${sb}/resume`, {})).status, 200);
    // Random bytes in RAM (tmpfs): pages no file holds, which the pause must store.
    assert.equal((await exec("head -c 20M /dev/urandom > /dev/shm/r && sha256sum /dev/shm/r > /root/r.sum")).exit_code, 0);
    const busy = await pausedMiB();
    assert.ok(busy >= 20 && busy <= 20 + idle + 10, `after writing 20 MiB to memory the pause stores ${busy.toFixed(1)} MiB`);
    assert.equal((await api("POST", `/sandboxes/${sb}/resume`, {})).status, 200);
    // Paused again from the resumed VM (which maps the same file): still a delta, still whole.
    const again = await pausedMiB();
    assert.ok(again <= busy + 5, `the second pause stores ${again.toFixed(1)} MiB`);
    assert.equal((await api("POST", `/sandboxes/${sb}/resume`, {})).status, 200);
    const check = await exec("sha256sum -c /root/r.sum");
    assert.equal(check.exit_code, 0, check.stdout + check.stderr);
    console.log(JSON.stringify({ pause_mib: { idle: Math.round(idle * 10) / 10, after_20_mib_written: Math.round(busy * 10) / 10, again: Math.round(again * 10) / 10 } }));
    await api("DELETE", `/sandboxes/${sb}`);
  });

  for (const forkable of [false, true])
    it(`a pause whose snapshot cannot be recorded leaves the sandbox running, in the same VM, its process going on, and it pauses later${forkable ? " (forkable: its RAM file given back)" : ""}`, async () => {
      const sb = (await api("POST", "/sandboxes", { forkable })).body;
      const run = async (command: string) => (await api("POST", `/sandboxes/${sb.id}/exec`, { command })).body.stdout.trim();
      await run("nohup sh -c 'i=0; while true; do i=$((i+1)); echo $i > /root/n; sleep 0.2; done' >/dev/null 2>&1 &");
      const pid = server.forge.sandboxes.get(sb.id).vm_pid;
      // The store refusing the finished snapshot (a full disk under the database). The disk had
      // switched onto an overlay backed by the snapshot's link, which must stay; a forkable VM's
      // RAM file had been handed over too, and the VM stopped for good unless it is given back.
      const snaps = (server.forge.snapshots as unknown as { d: { snaps: { finish: (...a: unknown[]) => Promise<unknown> } } }).d.snaps;
      const finish = snaps.finish;
      snaps.finish = async () => {
        throw new Error("injected: the store refused the snapshot");
      };
      try {
        const r = await api("POST", `/sandboxes/${sb.id}/pause`);
        assert.ok(r.status >= 500, JSON.stringify(r.body));
      } finally {
        snaps.finish = finish;
      }
      assert.equal((await state(sb.id)).state, "running");
      assert.equal(server.forge.sandboxes.get(sb.id).vm_pid, pid, "the same VMM runs on");
      assert.equal(server.forge.snapshots.list(["ready", "creating"]).filter((x) => x.source_id === sb.id).length, 0, "the abandoned snapshot is gone");
      const n = Number(await run("cat /root/n"));
      await waitFor(async () => Number(await run("cat /root/n")) > n + 2, 10_000, "the counter to go on");
      // And a pause that can be recorded works afterwards.
      const again = await api("POST", `/sandboxes/${sb.id}/pause`);
      assert.equal(again.status, 200, JSON.stringify(again.body));
      const back = await api("POST", `/sandboxes/${sb.id}/resume`);
      assert.equal(back.status, 200, JSON.stringify(back.body));
      // The counter's file is rewritten each second: a read may meet it empty, so wait for a number past n.
      await waitFor(async () => Number(await run("cat /root/n")) > n, 10_000, "the counter after the resume");
      await api("DELETE", `/sandboxes/${sb.id}`);
    });
});
