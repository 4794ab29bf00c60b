// Benchmark of standby: in one server, one sandbox paused and resumed --runs times, against the
// baseline of a spawn restored from the base snapshot (the fastest start without a warm pool):
//   pause (POST /pause until it answers: device state and RAM saved, the VM gone),
//   resume → first exec (POST /resume, then exec `true`), and wake → exec (an exec sent to the
//   paused sandbox, timed to its answer), each p50/p95; the host memory a paused sandbox holds
//   (its VMM's RSS: none, the process is gone) against the running one's PSS, and the disk its
//   pause took; the same cycles for a forkable sandbox (its RAM file handed over, not copied); and an exec in
//   flight carried across a pause (its output arrives after the resume).
// Prints one JSON document; the ratios to the restore baseline are what carries across machines.
// Usage: node dist/bench/standby.js [--runs 10]
import { readFile } from "node:fs/promises";
import { parseArgs } from "node:util";
import { startServer } from "../src/compose/serve.js";
import { benchConfig } from "./data-dir.js";
import { pct, machine } from "./stats.js";

const { values } = parseArgs({ options: { runs: { type: "string", default: "10" } } });
const RUNS = Number(values.runs);

const round = (x: number) => Math.round(x * 10) / 10;
const summary = (xs: number[]) => ({ n: xs.length, p50: pct(xs, 50), p95: pct(xs, 95), max: pct(xs, 100) });

async function pssMib(pid: number): Promise<number> {
  const text = await readFile(`/proc/${pid}/smaps_rollup`, "utf8");
  return round(Number(/^Pss:\s+(\d+)/m.exec(text)?.[1] ?? 0) / 1024);
}

async function main() {
  const started = Date.now();
  const server = await startServer(await benchConfig(), "bench");
  const base = `${server.url}/api/v1`;
  const api = async (method: string, path: string, body?: unknown): Promise<any> => {
    const r = await fetch(base + path, { method, headers: body ? { "Content-Type": "application/json" } : {}, body: body ? JSON.stringify(body) : undefined });
    const j = await r.json();
    if (r.status >= 300) throw new Error(`${method} ${path}: ${r.status} ${JSON.stringify(j)}`);
    return j;
  };
  const exec = async (id: string, command = "true") => {
    const r = await api("POST", `/sandboxes/${id}/exec`, { command });
    if (r.exit_code !== 0) throw new Error(`exec failed: ${JSON.stringify(r)}`);
    return r;
  };
  const accel = (await server.forge.providers.health()).accel;

  // Baseline: spawn restored from the base snapshot (made by the first spawn, not timed) → first exec.
  await api("DELETE", `/sandboxes/${(await api("POST", "/sandboxes", {})).id}`);
  const restoreMs: number[] = [];
  for (let i = 0; i < RUNS; i++) {
    const t0 = performance.now();
    const sb = await api("POST", "/sandboxes", {});
    await exec(sb.id);
    restoreMs.push(performance.now() - t0);
    await api("DELETE", `/sandboxes/${sb.id}`);
  }

  // Pause and resume of one sandbox whose RAM goes through the migration stream, and of one that
  // is forkable (its RAM file handed over and taken back: no RAM copied either way).
  const cycles = async (forkable: boolean) => {
    const sb = (await api("POST", "/sandboxes", { ttl: "1h", forkable })).id;
    await exec(sb, "nohup sh -c 'while true; do sleep 1; done' >/dev/null 2>&1 &");
    const runningPss = await pssMib(server.forge.sandboxes.get(sb).vm_pid!);
    const pauseMs: number[] = [];
    const resumeMs: number[] = [];
    const wakeMs: number[] = [];
    let pauseBytes = 0;
    for (let i = 0; i < RUNS; i++) {
      let t0 = performance.now();
      await api("POST", `/sandboxes/${sb}/pause`);
      pauseMs.push(performance.now() - t0);
      if (server.forge.sandboxes.get(sb).vm_pid !== null) throw new Error("a paused sandbox still has a VMM");
      pauseBytes = server.forge.snapshots.list(["ready"]).find((x) => x.id === server.forge.sandboxes.get(sb).snapshot_id)?.size_bytes ?? 0;
      t0 = performance.now();
      if (i % 2 === 0) {
        await api("POST", `/sandboxes/${sb}/resume`, {});
        await exec(sb);
        resumeMs.push(performance.now() - t0);
      } else {
        await exec(sb);
        wakeMs.push(performance.now() - t0);
      }
    }
    return { sb, runningPss, pauseMs, resumeMs, wakeMs, pauseBytes };
  };
  const ram = await cycles(true);
  await api("DELETE", `/sandboxes/${ram.sb}`);
  const { sb: id, runningPss, pauseMs, resumeMs, wakeMs, pauseBytes } = await cycles(false);

  // An exec in flight across a pause: it was started before, and answers after the resume.
  const t0 = performance.now();
  const inFlight = api("POST", `/sandboxes/${id}/exec`, { command: "sleep 2; echo carried" });
  await new Promise((r) => setTimeout(r, 500));
  await api("POST", `/sandboxes/${id}/pause`);
  await api("POST", `/sandboxes/${id}/resume`, {});
  const carried = await inFlight;
  const carriedMs = performance.now() - t0;
  await api("DELETE", `/sandboxes/${id}`);
  await server.close();

  const restore = summary(restoreMs);
  const ratio = (x: number) => round(restore.p50 / x);
  const resume = summary(resumeMs);
  const wake = summary(wakeMs);
  console.log(
    JSON.stringify(
      {
        benchmark: "standby",
        date: new Date().toISOString(),
        machine: machine(accel),
        baseline_restore_to_exec_ms: restore,
        pause_ms: summary(pauseMs),
        resume_to_exec_ms: { ...resume, speedup_p50_vs_restore: ratio(resume.p50) },
        wake_by_exec_ms: { ...wake, speedup_p50_vs_restore: ratio(wake.p50) },
        memory_mib: { running_pss: runningPss, paused_vmm_rss: 0 },
        pause_disk_mib: round(pauseBytes / 2 ** 20),
        forkable: {
          mechanism: "RAM file handed over by the pause and taken back by the resume",
          pause_ms: summary(ram.pauseMs),
          resume_to_exec_ms: { ...summary(ram.resumeMs), speedup_p50_vs_restore: ratio(summary(ram.resumeMs).p50) },
          wake_by_exec_ms: summary(ram.wakeMs),
          running_pss_mib: ram.runningPss,
          pause_disk_mib: round(ram.pauseBytes / 2 ** 20),
        },
        exec_across_pause: { stdout: carried.stdout, ms: round(carriedMs) },
        seconds: Math.round((Date.now() - started) / 1000),
      },
      null,
      2,
    ),
  );
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error(e);
    process.exit(1);
  },
);
