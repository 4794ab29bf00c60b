// Benchmark of a burst of creates, as the field's independent benchmark runs them: N concurrent
// `POST /sandboxes`, each followed by a command (`python3 -V`), timed from the create to the
// command's answer; p50, p95, p99, the success count and the errors, against one create (the
// same, alone) in the same run. And the server's event loop meanwhile: the longest it was kept
// from running (its delay, sampled every 10 ms; the server runs in this process). Twice: with no
// warm pool and no prestarted VMM, then with a warm pool and a prestarted VMM.
// Usage: node dist/bench/burst.js [--burst 100] [--pool 10] [--alone 5]
import { monitorEventLoopDelay } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";
import { parseArgs } from "node:util";
import { writeFile } from "node:fs/promises";
import { SERVER_AUTOGROUP_NICE, startServer } from "../src/compose/serve.js";
import type { Config } from "../src/config/config.js";
import { benchConfig } from "./data-dir.js";
import { restApi } from "./rest.js";
import { tail as summary, machine } from "./stats.js";

const { values } = parseArgs({ options: { burst: { type: "string", default: "100" }, pool: { type: "string", default: "10" }, alone: { type: "string", default: "5" } } });
const BURST = Number(values.burst);
const POOL = Number(values.pool);
const ALONE = Number(values.alone);
const COMMAND = "python3 -V";

async function scenario(change: (c: Config) => void, pool: number) {
  const cfg = await benchConfig((c) => {
    c.defaults.ttl = "1h";
    change(c);
  });
  const server = await startServer(cfg, "bench");
  const api = restApi(server.url);
  const createAndRun = async () => {
    const t0 = performance.now();
    const sb = await api("POST", "/sandboxes", {});
    const r = await api("POST", `/sandboxes/${sb.id}/exec`, { command: COMMAND });
    if (r.exit_code !== 0 || !/Python 3/.test(r.stdout + r.stderr)) throw new Error(`${COMMAND} gave ${r.exit_code}: ${r.stderr}`);
    return { ms: performance.now() - t0, id: sb.id as string };
  };
  const poolFull = async () => {
    const end = Date.now() + 300_000;
    while (server.forge.pools.warm().reduce((n, p) => n + p.ready, 0) < pool) {
      if (Date.now() > end) throw new Error("the warm pool did not fill");
      await sleep(100);
    }
  };
  // The first create makes the base snapshot: not measured.
  await api("DELETE", `/sandboxes/${(await createAndRun()).id}`);
  const alone: number[] = [];
  for (let i = 0; i < ALONE; i++) {
    await poolFull();
    const r = await createAndRun();
    alone.push(r.ms);
    await api("DELETE", `/sandboxes/${r.id}`);
  }
  await poolFull();
  // Let the server settle (prestarts, samplers) before the burst.
  await sleep(2000);
  const loop = monitorEventLoopDelay({ resolution: 10 });
  loop.enable();
  const t0 = performance.now();
  const results = await Promise.allSettled(Array.from({ length: BURST }, () => createAndRun()));
  const wall = performance.now() - t0;
  loop.disable();
  const ok = results.filter((r): r is PromiseFulfilledResult<{ ms: number; id: string }> => r.status === "fulfilled").map((r) => r.value);
  const errors = results.filter((r): r is PromiseRejectedResult => r.status === "rejected").map((r) => String(r.reason).slice(0, 200));
  const listed = (await api("GET", "/sandboxes")) as unknown[];
  for (const r of ok) await api("DELETE", `/sandboxes/${r.id}`);
  const accel = (await server.forge.providers.health()).accel;
  await server.close();
  const burst = summary(ok.map((r) => r.ms));
  const one = summary(alone);
  return {
    accel,
    one_create_alone_ms: one,
    burst_ms: burst,
    ok: ok.length,
    of: BURST,
    errors: [...new Set(errors)].slice(0, 5),
    sandboxes_listed_after: listed.length,
    wall_ms: Math.round(wall),
    burst_p50_vs_one: Math.round((burst.p50 / one.p50) * 100) / 100,
    event_loop_delay_max_ms: Math.round(loop.max / 1e6),
    event_loop_delay_p99_ms: Math.round(loop.percentile(99) / 1e6),
  };
}

async function main() {
  // The server runs in this process as `forgevm serve` would as a service: its session raised (compose/serve.ts).
  await writeFile("/proc/self/autogroup", String(SERVER_AUTOGROUP_NICE)).catch(() => console.error("# the session's scheduling group could not be raised (not root?)"));
  const plain = await scenario((c) => {
    c.snapshots.prestart = 0;
    c.warm_pool = { size: 0, memory_budget_mb: 0 };
  }, 0);
  const pooled = await scenario((c) => {
    c.snapshots.prestart = 1;
    c.warm_pool = { size: POOL, memory_budget_mb: POOL * 512 + 512 };
  }, POOL);
  console.log(
    JSON.stringify(
      {
        benchmark: "burst",
        date: new Date().toISOString(),
        machine: machine(plain.accel),
        what: `${BURST} concurrent POST /sandboxes, each followed by exec \`${COMMAND}\`: ms from the create to the command's answer`,
        no_pool_no_prestart: plain,
        [`warm_pool_${POOL}_and_prestart`]: pooled,
      },
      null,
      2,
    ),
  );
  process.exit(0);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
