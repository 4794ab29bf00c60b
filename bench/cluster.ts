// Benchmark of a cluster on this machine; prints one JSON document. A PostgreSQL in a temporary
// directory, three nodes and one front in this process. In one run: spawn → first exec through
// the front against the same directly on a node (the routing overhead, alternating), an exec's
// round trip both ways, and a burst of spawns through the front (spread over three nodes)
// against the same burst on one node. The nodes share this machine's cores, so the burst ratio
// says what placement costs, not what three machines would give.
// Usage: node dist/bench/cluster.js [--rounds 8] [--burst 9]
import { parseArgs } from "node:util";
import { startServer } from "../src/compose/serve.js";
import { startFront } from "../src/front/front.js";
import { startPostgres } from "../test/postgres.js";
import { benchConfig } from "./data-dir.js";
import { pct, machine } from "./stats.js";

const { values } = parseArgs({ options: { rounds: { type: "string", default: "8" }, burst: { type: "string", default: "9" } } });
const ROUNDS = Number(values.rounds);
const BURST = Number(values.burst);
const stats = (xs: number[]) => ({ p50: Math.round(pct(xs, 50) * 10) / 10, p90: Math.round(pct(xs, 90) * 10) / 10, n: xs.length });

async function call(base: string, method: string, path: string, body?: unknown): Promise<any> {
  const res = await fetch(`${base}/api/v1${path}`, {
    method,
    headers: body !== undefined ? { "Content-Type": "application/json" } : {},
    body: body !== undefined ? JSON.stringify(body) : undefined,
  });
  const json = await res.json();
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${JSON.stringify(json)}`);
  return json;
}

async function main() {
  const db = await startPostgres();
  const nodes = [];
  for (const id of ["n1", "n2", "n3"]) {
    nodes.push(
      await startServer(
        await benchConfig((c) => {
          c.cluster = { role: "node", database: db.url, advertise: "", node_id: id, heartbeat: "500ms", node_timeout: "5s" };
          c.metrics.enabled = false;
        }),
        "bench",
      ),
    );
  }
  const front = await startFront(
    await benchConfig((c) => (c.cluster = { role: "front", database: db.url, advertise: "", node_id: "", heartbeat: "500ms", node_timeout: "5s" })),
    "bench",
  );
  // Base snapshots on every node before anything is timed.
  for (const n of nodes) await call(n.url, "DELETE", `/sandboxes/${(await call(n.url, "POST", "/sandboxes", { memory_mb: 256 })).id}`);
  const accel = (await call(nodes[0].url, "GET", "/providers/qemu")).config.accel;

  const firstExec = { front: [] as number[], node: [] as number[] };
  const execs = { front: [] as number[], node: [] as number[] };
  for (let r = 0; r < ROUNDS; r++) {
    for (const via of ["front", "node"] as const) {
      const base = via === "front" ? front.url : nodes[r % 3].url;
      const t0 = performance.now();
      const sb = await call(base, "POST", "/sandboxes", { memory_mb: 256 });
      await call(base, "POST", `/sandboxes/${sb.id}/exec`, { command: "true" });
      firstExec[via].push(performance.now() - t0);
      for (let i = 0; i < 4; i++) {
        const t1 = performance.now();
        await call(base, "POST", `/sandboxes/${sb.id}/exec`, { command: "true" });
        execs[via].push(performance.now() - t1);
      }
      await call(base, "DELETE", `/sandboxes/${sb.id}`);
    }
  }

  const burst = async (base: string) => {
    const t0 = performance.now();
    const made = await Promise.all(Array.from({ length: BURST }, () => call(base, "POST", "/sandboxes", { memory_mb: 256 })));
    const s = (performance.now() - t0) / 1000;
    await Promise.all(made.map((m) => call(base, "DELETE", `/sandboxes/${m.id}`)));
    return { seconds: Math.round(s * 100) / 100, spawns_per_s: Math.round((BURST / s) * 100) / 100, nodes: [...new Set(made.map((m) => m.node))].sort() };
  };
  const oneNode = await burst(nodes[0].url);
  // Heartbeats carry the node's free memory again before the front places the next burst.
  await new Promise((r) => setTimeout(r, 1500));
  const threeNodes = await burst(front.url);

  await front.close();
  for (const n of nodes) await n.close();
  db.stop();

  console.log(
    JSON.stringify(
      {
        benchmark: "cluster",
        date: new Date().toISOString(),
        machine: machine(),
        accel,
        spawn_to_first_exec_ms: { through_front: stats(firstExec.front), on_node: stats(firstExec.node) },
        exec_round_trip_ms: { through_front: stats(execs.front), on_node: stats(execs.node) },
        burst_of_spawns: { size: BURST, one_node: oneNode, three_nodes_through_front: threeNodes },
        ratios_p50: {
          front_to_node_first_exec: Math.round((pct(firstExec.front, 50) / pct(firstExec.node, 50)) * 100) / 100,
          front_to_node_exec: Math.round((pct(execs.front, 50) / pct(execs.node, 50)) * 100) / 100,
          three_nodes_to_one_spawns_per_s: Math.round((threeNodes.spawns_per_s / oneNode.spawns_per_s) * 100) / 100,
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
