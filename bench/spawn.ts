// Benchmark of time to a first command, through the REST API, in one run on one machine:
//   cold boot, restore from the base snapshot, the same into a prestarted VMM, warm-pool claim
//   (against one exec on a running sandbox) — each as POST /sandboxes followed
//   by an exec of `true`, timed to the exec's answer (p50/p95/p99 over --runs spawns, one at a
//   time), and the same for a burst of --burst concurrent spawns with the success count; fork of
//   one sandbox into 1 and into 10 children with the parent's pause and the children's memory,
//   for a parent streaming its RAM and a forkable one (RAM file copied); and the host memory (PSS and
//   RSS of the QEMU processes) of 10 idle restored sandboxes against 10 cold-booted ones, and of
//   10 that did some work before and after idle memory reclaim.
// Prints one JSON document. Cold boot is the baseline: the ratios are what carries across machines.
// Usage: node dist/bench/spawn.js [--runs 20] [--burst 20]
import { readdir, readFile } from "node:fs/promises";
import { parseArgs } from "node:util";
import type { Config } from "../src/config/config.js";
import { benchConfig } from "./data-dir.js";
import { startServer } from "../src/compose/serve.js";
import { machine } from "./stats.js";

const { values } = parseArgs({ options: { runs: { type: "string", default: "20" }, burst: { type: "string", default: "20" }, idle: { type: "string", default: "10" } } });
const RUNS = Number(values.runs);
const BURST = Number(values.burst);
const IDLE = Number(values.idle);

const round = (x: number) => Math.round(x * 10) / 10;
function pct(xs: number[], p: number): number {
  if (!xs.length) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return round(s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)]);
}
const summary = (xs: number[]) => ({ n: xs.length, p50: pct(xs, 50), p95: pct(xs, 95), p99: pct(xs, 99), max: pct(xs, 100) });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

type Server = Awaited<ReturnType<typeof startServer>>;

async function open(change: (c: Config) => void = () => {}): Promise<{ server: Server; api: (method: string, path: string, body?: unknown) => Promise<any> }> {
  // Reclaim only when the benchmark asks (idleReclaim), so that no measurement is taken half-reclaimed.
  const cfg = await benchConfig((c) => {
    c.memory.reclaim_after = "0";
    change(c);
  });
  const server = await startServer(cfg, "bench");
  const base = `${server.url}/api/v1`;
  const api = async (method: string, path: string, body?: unknown) => {
    const r = await fetch(base + path, { method, headers: body ? { "Content-Type": "application/json" } : {}, body: body ? JSON.stringify(body) : undefined });
    const j = await r.json();
    if (r.status >= 300) throw new Error(`${method} ${path}: ${r.status} ${JSON.stringify(j)}`);
    return j;
  };
  return { server, api };
}

/** POST /sandboxes, then exec `true`: milliseconds to the exec's answer, and the sandbox id. */
async function spawnToExec(api: Awaited<ReturnType<typeof open>>["api"]): Promise<{ ms: number; id: string }> {
  const t0 = performance.now();
  const sb = await api("POST", "/sandboxes", { ttl: "1h" });
  const r = await api("POST", `/sandboxes/${sb.id}/exec`, { command: "true" });
  if (r.exit_code !== 0) throw new Error("exec failed");
  return { ms: performance.now() - t0, id: sb.id };
}

async function sequential(api: Awaited<ReturnType<typeof open>>["api"], before?: () => Promise<void>) {
  const ms: number[] = [];
  for (let i = 0; i < RUNS; i++) {
    await before?.();
    const r = await spawnToExec(api);
    ms.push(r.ms);
    await api("DELETE", `/sandboxes/${r.id}`);
  }
  return summary(ms);
}

async function burst(api: Awaited<ReturnType<typeof open>>["api"]) {
  const t0 = performance.now();
  const results = await Promise.allSettled(Array.from({ length: BURST }, () => spawnToExec(api)));
  const wall = performance.now() - t0;
  const ok = results.filter((r): r is PromiseFulfilledResult<{ ms: number; id: string }> => r.status === "fulfilled").map((r) => r.value);
  await Promise.all(ok.map((r) => api("DELETE", `/sandboxes/${r.id}`)));
  const errors = results.filter((r): r is PromiseRejectedResult => r.status === "rejected").map((r) => String(r.reason).slice(0, 160));
  return { ...summary(ok.map((r) => r.ms)), ok: ok.length, of: BURST, wall_ms: Math.round(wall), errors: [...new Set(errors)].slice(0, 3) };
}

/** PSS and RSS (MiB) summed over the QEMU processes of these sandboxes. */
async function memory(server: Server, ids: string[]) {
  let pss = 0;
  let rss = 0;
  for (const id of ids) {
    const pid = server.forge.sandboxes.running(id).vm.info.pid;
    const text = await readFile(`/proc/${pid}/smaps_rollup`, "utf8");
    pss += Number(/^Pss:\s+(\d+)/m.exec(text)![1]);
    rss += Number(/^Rss:\s+(\d+)/m.exec(text)![1]);
  }
  return { pss_mib: Math.round(pss / 1024), rss_mib: Math.round(rss / 1024), per_vm_pss_mib: Math.round(pss / 1024 / ids.length) };
}

/** The memory of the data directory's QEMU processes that run no sandbox: prestarted VMMs, guest held. */
async function heldVmmMemory(server: Server) {
  const live = new Set(server.forge.sandboxes.list().map((r) => r.id));
  const out: { pss_mib: number; rss_mib: number; anonymous_mib: number }[] = [];
  for (const pid of await readdir("/proc")) {
    if (!/^\d+$/.test(pid)) continue;
    const cmd = await readFile(`/proc/${pid}/cmdline`, "utf8").catch(() => "");
    const dir = /\/vms\/(sb-[0-9a-f]+)\//.exec(cmd);
    if (!cmd.includes("qemu-system") || !cmd.includes(server.forge.paths.dataDir) || !dir || live.has(dir[1])) continue;
    const text = await readFile(`/proc/${pid}/smaps_rollup`, "utf8").catch(() => "");
    const kib = (k: string) => Number(new RegExp(`^${k}:\\s+(\\d+)`, "m").exec(text)?.[1] ?? 0);
    if (text) out.push({ pss_mib: round(kib("Pss") / 1024), rss_mib: round(kib("Rss") / 1024), anonymous_mib: round(kib("Anonymous") / 1024) });
  }
  return out;
}

async function idleMemory(server: Server, api: Awaited<ReturnType<typeof open>>["api"]) {
  const ids: string[] = [];
  for (let i = 0; i < IDLE; i++) ids.push((await spawnToExec(api)).id);
  await sleep(3000);
  const m = await memory(server, ids);
  await Promise.all(ids.map((id) => api("DELETE", `/sandboxes/${id}`)));
  return m;
}

/**
 * Idle restored sandboxes before and after memory reclaim: each runs a light workload (lists
 * /usr), goes idle, and its PSS is taken; then every one is asked to reclaim (page cache dropped,
 * free page reporting), and after the reports its PSS is taken again. The same command timed once
 * before the reclaim and once after says what the reclaim costs the next command.
 */
async function idleReclaim(server: Server, api: Awaited<ReturnType<typeof open>>["api"]) {
  const ids: string[] = [];
  for (let i = 0; i < IDLE; i++) ids.push((await spawnToExec(api)).id);
  const COMMAND = "ls -lR /usr/lib >/dev/null && cat /usr/bin/* >/dev/null 2>&1; true";
  const timed = async () => {
    const ms: number[] = [];
    for (const id of ids) {
      const t0 = performance.now();
      await api("POST", `/sandboxes/${id}/exec`, { command: COMMAND });
      ms.push(performance.now() - t0);
    }
    return ms;
  };
  await timed();
  await sleep(3000);
  const before = await memory(server, ids);
  const execBefore = await timed();
  await sleep(3000);
  await Promise.all(ids.map((id) => server.forge.sandboxes.running(id).vm.guest.request<"reclaim">({ op: "reclaim" })));
  // The guest reports blocks once they stayed free for ~2 s.
  await sleep(6000);
  const after = await memory(server, ids);
  const execAfter = await timed();
  await Promise.all(ids.map((id) => api("DELETE", `/sandboxes/${id}`)));
  return {
    count: IDLE,
    workload: COMMAND,
    before_reclaim: before,
    after_reclaim: after,
    command_before_ms: summary(execBefore),
    command_after_ms: summary(execAfter),
    command_after_vs_before_p50: round(pct(execAfter, 50) / pct(execBefore, 50)),
  };
}

async function main() {
  const started = Date.now();
  const accel = async (s: Server) => (await s.forge.providers.health()).accel;

  // 1. Cold boot: base snapshots off.
  let { server, api } = await open((c) => (c.snapshots.base = false));
  const machineAccel = await accel(server);
  const cold = await sequential(api);
  const coldBurst = await burst(api);
  const coldMemory = await idleMemory(server, api);
  await server.close();

  // 2. Restore from the base snapshot (made by the first spawn, not timed), QEMU started by the spawn.
  ({ server, api } = await open((c) => (c.snapshots.prestart = 0)));
  await api("DELETE", `/sandboxes/${(await spawnToExec(api)).id}`);
  const restore = await sequential(api);
  const restoreBurst = await burst(api);
  const restoreMemory = await idleMemory(server, api);
  const reclaim = await idleReclaim(server, api);

  // 2b. The other restore mechanism, in the same server: a snapshot of a running sandbox, whose
  // RAM is inside the migration stream (read whole by every restore) rather than mapped.
  const src = (await spawnToExec(api)).id;
  const snap = await api("POST", `/sandboxes/${src}/snapshot`, {});
  await api("DELETE", `/sandboxes/${src}`);
  const streamMs: number[] = [];
  for (let i = 0; i < RUNS; i++) {
    const t0 = performance.now();
    const r = await api("POST", `/snapshots/${snap.id}/spawn`, {});
    const id = r.sandboxes[0].id;
    await api("POST", `/sandboxes/${id}/exec`, { command: "true" });
    streamMs.push(performance.now() - t0);
    await api("DELETE", `/sandboxes/${id}`);
  }
  await api("DELETE", `/snapshots/${snap.id}`);
  const restoreStream = { ...summary(streamMs), snapshot_bytes: snap.size_bytes };

  // 2c. Restore into a prestarted VMM (QEMU started ahead, state loaded, guest held): each spawn
  // waits until one is ready, as a spawn that follows another by a moment finds one. Also the
  // memory a held VMM costs before any guest runs in it.
  await server.close();
  ({ server, api } = await open((c) => (c.snapshots.prestart = 1)));
  await api("DELETE", `/sandboxes/${(await spawnToExec(api)).id}`);
  const prestartedReady = async () => {
    const end = Date.now() + 60_000;
    while ((await api("GET", "/pool/status")).prestarted.ready < 1) {
      if (Date.now() > end) throw new Error("no VMM was prestarted");
      await sleep(20);
    }
  };
  const prestarted = await sequential(api, prestartedReady);
  await prestartedReady();
  await sleep(1000);
  const held = await heldVmmMemory(server);

  // 3. Fork a running sandbox into 1 and into 10 children, for a parent whose RAM goes through
  // the migration stream and a forkable one whose RAM file is copied while it stops; time until
  // every child answers, and the memory the idle children hold (10 against 1: what one more costs).
  const forkRun = async (forkable: boolean) => {
    const parent = (await api("POST", "/sandboxes", { forkable, ttl: "1h" })).id;
    await api("POST", `/sandboxes/${parent}/exec`, { command: "nohup sh -c 'while true; do sleep 1; done' >/dev/null 2>&1 &" });
    const fork = async (count: number) => {
      const t0 = performance.now();
      const r = await api("POST", `/sandboxes/${parent}/fork`, { count });
      const apiMs = performance.now() - t0;
      const ids = r.sandboxes.map((c: { id: string }) => c.id);
      await Promise.all(ids.map((id: string) => api("POST", `/sandboxes/${id}/exec`, { command: "true" })));
      const allMs = performance.now() - t0;
      await sleep(2000);
      const mem = await memory(server, ids);
      // What the fork saved: the stream (devices and, without a RAM file, all of RAM) and the RAM file's data.
      const snap = server.forge.snapshots.list(["ready", "deleted"]).find((x) => x.id === server.forge.sandboxes.get(ids[0]).snapshot_id);
      await Promise.all(ids.map((id: string) => api("DELETE", `/sandboxes/${id}`)));
      return {
        children: count,
        api_ms: round(apiMs),
        to_all_exec_ms: round(allMs),
        parent_pause_ms: r.pause_ms,
        pss_mib: mem.pss_mib,
        snapshot_mib: round((snap?.size_bytes ?? 0) / 2 ** 20),
      };
    };
    const runs = [await fork(1), await fork(1), await fork(1), await fork(10)];
    await api("DELETE", `/sandboxes/${parent}`);
    const one = pct(
      runs.slice(0, 3).map((r) => r.parent_pause_ms),
      50,
    );
    return {
      forkable,
      runs,
      pause_10_vs_1: round(runs[3].parent_pause_ms / one),
      marginal_pss_per_child_mib: round(
        (runs[3].pss_mib -
          pct(
            runs.slice(0, 3).map((r) => r.pss_mib),
            50,
          )) /
          9,
      ),
    };
  };
  const forks = { stream: await forkRun(false), ram_file: await forkRun(true) };
  await server.close();

  // 4. Warm pool: claims one at a time (pool refilled before each, not timed), then a burst.
  ({ server, api } = await open((c) => (c.warm_pool = { size: BURST, memory_budget_mb: BURST * 512 + 512 })));
  const full = async () => {
    const end = Date.now() + 180_000;
    while (server.forge.pools.warm().reduce((n, p) => n + p.ready, 0) < BURST) {
      if (Date.now() > end) throw new Error("the warm pool did not fill");
      await sleep(50);
    }
  };
  const pool = await sequential(api, full);
  await full();
  const poolBurst = await burst(api);
  // The baseline of a claim: one exec on a sandbox that is already running (and has run one), on
  // a server with nothing else to do. Measured twice: while the pool refills after the burst
  // (its VMs restoring take the machine's CPU), and once it is full, which is the baseline.
  const running = (await spawnToExec(api)).id;
  const execs = async () => {
    const xs: number[] = [];
    for (let i = 0; i < RUNS; i++) {
      const t0 = performance.now();
      await api("POST", `/sandboxes/${running}/exec`, { command: "true" });
      xs.push(performance.now() - t0);
    }
    return xs;
  };
  const whileRefilling = summary(await execs());
  await full();
  const execMs = await execs();
  const oneExec = summary(execMs);
  await server.close();

  const ratio = (x: number) => round(cold.p50 / x);
  console.log(
    JSON.stringify(
      {
        benchmark: "spawn",
        date: new Date().toISOString(),
        machine: machine(machineAccel),
        what: "POST /sandboxes then exec `true`, ms to the exec's answer",
        cold_boot: { sequential: cold, burst: coldBurst },
        restore_base_snapshot: { mechanism: "RAM file mapped copy-on-write (x-ignore-shared)", sequential: restore, burst: restoreBurst, speedup_p50_vs_cold: ratio(restore.p50) },
        restore_stream_snapshot: { mechanism: "RAM in the migration stream", sequential: restoreStream, speedup_p50_vs_cold: ratio(restoreStream.p50) },
        restore_prestarted_vmm: {
          mechanism: "QEMU started ahead, state loaded, guest held until the spawn",
          sequential: prestarted,
          speedup_p50_vs_cold: ratio(prestarted.p50),
          vs_restore_p50: round(prestarted.p50 / restore.p50),
          held_vmm: held,
        },
        warm_pool_claim: { sequential: pool, burst: poolBurst, speedup_p50_vs_cold: ratio(pool.p50), vs_one_exec_p50: round(pool.p50 / oneExec.p50) },
        one_exec_on_running_sandbox: oneExec,
        one_exec_while_the_pool_refills: whileRefilling,
        fork: forks,
        idle_memory: { cold_booted: coldMemory, restored: restoreMemory, count: IDLE, pss_ratio: round(coldMemory.pss_mib / restoreMemory.pss_mib) },
        idle_reclaim: reclaim,
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
