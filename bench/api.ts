// Benchmark of the REST API; prints one JSON document.
//   GET /sandboxes/{id} and exec of `true` through HTTP (p50/p99), beside the same exec called on
//   the core directly in the same run (the HTTP overhead is the difference), and requests per
//   second for 16 concurrent clients each running execs in a loop for 20 s, with the error count.
// Usage: node dist/bench/api.js [--seconds 20] [--clients 16] [--runs 300]
import { parseArgs } from "node:util";
import { benchConfig } from "./data-dir.js";
import { startServer } from "../src/compose/serve.js";
import { pct, timed, machine } from "./stats.js";

const { values } = parseArgs({ options: { seconds: { type: "string", default: "20" }, clients: { type: "string", default: "16" }, runs: { type: "string", default: "300" } } });
const SECONDS = Number(values.seconds);
const CLIENTS = Number(values.clients);
const RUNS = Number(values.runs);

async function main() {
  const cfg = await benchConfig();
  const server = await startServer(cfg, "bench");
  const base = `${server.url}/api/v1`;
  const post = (path: string, body: unknown) => fetch(base + path, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
  const sb = (await (await post("/sandboxes", { ttl: "1h" })).json()) as { id: string };
  const core = server.forge.sandboxes.running(sb.id);

  const health = await timed(RUNS, async () => (await fetch(`${base}/health`)).arrayBuffer());
  const get = await timed(RUNS, async () => {
    const r = await fetch(`${base}/sandboxes/${sb.id}`);
    if (r.status !== 200) throw new Error(`GET ${r.status}`);
    await r.arrayBuffer();
  });
  const execCore = await timed(RUNS, () => core.exec("true"));
  const execHttp = await timed(RUNS, async () => {
    const r = await post(`/sandboxes/${sb.id}/exec`, { command: "true" });
    const j = (await r.json()) as { exit_code: number };
    if (j.exit_code !== 0) throw new Error("exec failed");
  });

  let ok = 0;
  let errors = 0;
  const end = Date.now() + SECONDS * 1000;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: CLIENTS }, async () => {
      while (Date.now() < end) {
        try {
          const r = await post(`/sandboxes/${sb.id}/exec`, { command: "true" });
          const j = (await r.json()) as { exit_code?: number };
          if (r.status === 200 && j.exit_code === 0) ok++;
          else errors++;
        } catch {
          errors++;
        }
      }
    }),
  );
  const elapsed = (performance.now() - t0) / 1000;
  const verdict = { accel: (await server.forge.providers.health()).accel };
  await server.close();

  console.log(
    JSON.stringify(
      {
        benchmark: "api",
        date: new Date().toISOString(),
        machine: machine(),
        accel: verdict.accel,
        runs: RUNS,
        get_health_ms: { p50: pct(health, 50), p99: pct(health, 99) },
        get_sandbox_ms: { p50: pct(get, 50), p99: pct(get, 99) },
        exec_true_core_ms: { p50: pct(execCore, 50), p99: pct(execCore, 99) },
        exec_true_http_ms: { p50: pct(execHttp, 50), p99: pct(execHttp, 99) },
        http_overhead_exec_p50_ms: Math.round((pct(execHttp, 50) - pct(execCore, 50)) * 100) / 100,
        concurrent_exec: { clients: CLIENTS, seconds: SECONDS, requests: ok + errors, ok, errors, requests_per_second: Math.round(((ok + errors) / elapsed) * 10) / 10 },
      },
      null,
      2,
    ),
  );
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
