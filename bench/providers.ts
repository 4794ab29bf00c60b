// Benchmark of the providers; prints one JSON document. In one run, against the same image: a
// spawn's time to its first exec and an exec's round trip, through the REST API of one server,
// on qemu (the baseline), local (namespaces), remote (a second server on this machine, its qemu
// sandboxes relayed), e2b (the second server's E2B routes) and custom (its Custom HTTP routes,
// each guest operation one HTTP call); and the second server's own qemu exec round trip, so that
// the relays' cost is a ratio measured here.
// Usage: node dist/bench/providers.js [--rounds 5] [--execs 30]
import { parseArgs } from "node:util";
import { startServer } from "../src/compose/serve.js";
import { benchConfig } from "./data-dir.js";
import { pct, machine } from "./stats.js";

const { values } = parseArgs({ options: { rounds: { type: "string", default: "5" }, execs: { type: "string", default: "30" } } });
const ROUNDS = Number(values.rounds);
const EXECS = Number(values.execs);
const KEY = "e2b_0123456789abcdef";

const stats = (xs: number[]) => ({ p50: Math.round(pct(xs, 50) * 10) / 10, p90: Math.round(pct(xs, 90) * 10) / 10, n: xs.length });

async function call(base: string, method: string, path: string, body?: unknown, key?: string): Promise<any> {
  const res = await fetch(`${base}/api/v1${path}`, {
    method,
    headers: { ...(body !== undefined ? { "Content-Type": "application/json" } : {}), ...(key ? { "X-API-Key": key } : {}) },
    body: body !== undefined ? JSON.stringify(body) : undefined,
  });
  const json = await res.json();
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${JSON.stringify(json)}`);
  return json;
}

/** Spawn → first exec, then exec round trips, on `provider` of the server at `base`. */
async function measure(base: string, provider: string | undefined, key?: string) {
  const first: number[] = [];
  const execs: number[] = [];
  for (let r = 0; r < ROUNDS; r++) {
    const t0 = performance.now();
    const sb = await call(base, "POST", "/sandboxes", provider ? { provider } : {}, key);
    await call(base, "POST", `/sandboxes/${sb.id}/exec`, { command: "true" }, key);
    first.push(performance.now() - t0);
    for (let i = 0; i < EXECS / ROUNDS; i++) {
      const t1 = performance.now();
      await call(base, "POST", `/sandboxes/${sb.id}/exec`, { command: "true" }, key);
      execs.push(performance.now() - t1);
    }
    await call(base, "DELETE", `/sandboxes/${sb.id}`, undefined, key);
  }
  return { spawn_to_first_exec_ms: stats(first), exec_round_trip_ms: stats(execs) };
}

async function main() {
  const far = await startServer(await benchConfig((c) => (c.auth.api_key = KEY)), "bench");
  const near = await startServer(
    await benchConfig((c) => {
      c.providers.local.enabled = true;
      c.providers.remote = { url: far.url, api_key: KEY };
      c.providers.e2b = { api_url: far.url, api_key: KEY, sandbox_url: far.url, domain: "", template: "base" };
      c.providers.custom = { base_url: `${far.url}/custom-http`, api_key: KEY, timeout: "60s", name: "custom" };
    }),
    "bench",
  );
  // Base snapshots on both servers, the local provider's image tree and the far E2B user: made before anything is timed.
  for (const p of ["qemu", "local", "remote", "e2b", "custom"]) await call(near.url, "DELETE", `/sandboxes/${(await call(near.url, "POST", "/sandboxes", { provider: p })).id}`);
  const accel = (await call(near.url, "GET", "/providers/qemu")).config.accel;
  const out: Record<string, unknown> = {};
  out.qemu = await measure(near.url, "qemu");
  out.local = await measure(near.url, "local");
  out.remote = await measure(near.url, "remote");
  out.e2b = await measure(near.url, "e2b");
  out.custom = await measure(near.url, "custom");
  out.far_server_qemu_direct = await measure(far.url, undefined, KEY);
  await near.close();
  await far.close();

  const p50 = (k: string, m: "spawn_to_first_exec_ms" | "exec_round_trip_ms") => (out[k] as Record<string, { p50: number }>)[m].p50;
  const ratio = (a: number, b: number) => Math.round((a / b) * 100) / 100;
  console.log(
    JSON.stringify(
      {
        benchmark: "providers",
        date: new Date().toISOString(),
        machine: machine(),
        accel,
        rounds: ROUNDS,
        ...out,
        ratios_p50: {
          local_to_qemu_spawn: ratio(p50("local", "spawn_to_first_exec_ms"), p50("qemu", "spawn_to_first_exec_ms")),
          remote_to_direct_exec: ratio(p50("remote", "exec_round_trip_ms"), p50("far_server_qemu_direct", "exec_round_trip_ms")),
          e2b_to_direct_exec: ratio(p50("e2b", "exec_round_trip_ms"), p50("far_server_qemu_direct", "exec_round_trip_ms")),
          custom_to_direct_exec: ratio(p50("custom", "exec_round_trip_ms"), p50("far_server_qemu_direct", "exec_round_trip_ms")),
          remote_to_direct_spawn: ratio(p50("remote", "spawn_to_first_exec_ms"), p50("far_server_qemu_direct", "spawn_to_first_exec_ms")),
        },
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
