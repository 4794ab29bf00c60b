// Benchmark of the Daytona interface; prints one JSON document. All against one server, in one run:
//   - Daytona `create()` → first `executeCommand("true")` answered, beside our own SDK's spawn →
//     first exec answered (the ratio is what the compatibility layer costs: the `daytona` user
//     made at create, and the shell every command runs in);
//   - a command on a running sandbox, both ways, and ours through the shells the toolbox runs.
// Usage: node dist/bench/daytona.js [--runs 8] [--calls 40]
import { parseArgs } from "node:util";
import { Daytona } from "@daytonaio/sdk";
import { Client } from "forgevm";
import { startServer } from "../src/compose/serve.js";
import { DEFAULT_IMAGE } from "../src/core/forge.js";
import { benchConfig } from "./data-dir.js";
import { pct, timed, machine } from "./stats.js";

const { values } = parseArgs({ options: { runs: { type: "string", default: "8" }, calls: { type: "string", default: "40" } } });
const RUNS = Number(values.runs);
const CALLS = Number(values.calls);

const stats = (xs: number[]) => ({ p50: pct(xs, 50), p90: pct(xs, 90), n: xs.length });

async function main() {
  const cfg = await benchConfig(() => {}, [DEFAULT_IMAGE]);
  const server = await startServer(cfg, "bench");
  for (const k of Object.keys(process.env)) if (k.startsWith("DAYTONA_")) delete process.env[k];
  const daytona = new Daytona({ apiUrl: `${server.url}/daytona`, apiKey: "daytona_0000", target: "local" });
  const client = new Client({ baseUrl: server.url });

  // The first spawn boots the image and makes its base snapshot: not what is measured.
  await (await client.spawn({})).destroy();

  const ours: number[] = [];
  const theirs: number[] = [];
  for (let i = 0; i < RUNS; i++) {
    let t0 = performance.now();
    const sb = await client.spawn({});
    await sb.exec("true");
    ours.push(performance.now() - t0);
    await sb.destroy();
    t0 = performance.now();
    const d = await daytona.create();
    const r = await d.process.executeCommand("true");
    if (r.exitCode !== 0) throw new Error(`true exited ${r.exitCode}`);
    theirs.push(performance.now() - t0);
    await d.delete();
  }

  const sb = await client.spawn({});
  const d = await daytona.get(sb.id);
  const execOurs = await timed(CALLS, () => sb.exec("true"));
  // What the toolbox runs for every command: sh picking bash, bash running it.
  const execShell = await timed(CALLS, () => sb.exec("exec 2>&1; exec /bin/bash -c true"));
  const execDaytona = await timed(CALLS, async () => {
    await d.process.executeCommand("true");
  });
  await sb.destroy();
  const accel = (await server.forge.providers.health()).accel;
  await server.close();

  console.log(
    JSON.stringify(
      {
        benchmark: "daytona",
        date: new Date().toISOString(),
        machine: machine(),
        accel,
        spawn_to_first_command_ms: { forgevm_sdk: stats(ours), daytona_sdk: stats(theirs), ratio_p50: Math.round((pct(theirs, 50) / pct(ours, 50)) * 100) / 100 },
        command_on_running_sandbox_ms: {
          forgevm_exec: stats(execOurs),
          forgevm_exec_through_shells: stats(execShell),
          daytona_execute_command: stats(execDaytona),
          ratio_p50: Math.round((pct(execDaytona, 50) / pct(execOurs, 50)) * 100) / 100,
          ratio_to_shells_p50: Math.round((pct(execDaytona, 50) / pct(execShell, 50)) * 100) / 100,
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
