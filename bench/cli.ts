// Benchmark of the CLI's start: how long a command takes before it does anything, beside Node
// starting and exiting (the baseline, measured in the same run). `version` loads no config;
// `ps` reads the config and asks a running server (one sandbox listed); `--help` prints the
// commands. With --compare, the same commands of another checkout's CLI (its dist/src/cli/main.js)
// are timed in the same run, against the same server. Prints one JSON document.
// Usage: node dist/bench/cli.js [--runs 20] [--compare /path/to/other/dist/src/cli/main.js]
import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { parseArgs } from "node:util";
import { startServer } from "../src/compose/serve.js";
import { benchConfig } from "./data-dir.js";
import { pct, timed, machine } from "./stats.js";

const run = promisify(execFile);
const { values } = parseArgs({ options: { runs: { type: "string", default: "20" }, compare: { type: "string" } } });
const RUNS = Number(values.runs);
const CLI = fileURLToPath(new URL("../src/cli/main.js", import.meta.url));

async function main() {
  const cfg = await benchConfig();
  const server = await startServer(cfg, "bench");
  const env = { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: cfg.data_dir };
  const sb = await server.forge.sandboxes.spawn();
  const cases: Record<string, string[]> = {
    node: ["-e", "0"],
    version: [CLI, "version"],
    help: [CLI, "--help"],
    ps: [CLI, "--server", server.url, "ps"],
    ...(values.compare ? { other_version: [values.compare, "version"], other_help: [values.compare, "--help"], other_ps: [values.compare, "--server", server.url, "ps"] } : {}),
  };
  const results: Record<string, { p50_ms: number; p90_ms: number; vs_node: number }> = {};
  let base = 0;
  for (const [name, args] of Object.entries(cases)) {
    await run(process.execPath, args, { env }); // warm the file cache
    const ms = await timed(RUNS, () => run(process.execPath, args, { env }));
    const p50 = pct(ms, 50);
    if (name === "node") base = p50;
    results[name] = { p50_ms: p50, p90_ms: pct(ms, 90), vs_node: Math.round((p50 / base) * 100) / 100 };
  }
  await sb.destroy();
  await server.close();
  console.log(JSON.stringify({ bench: "cli", date: new Date().toISOString(), machine: machine(), runs: RUNS, results }, null, 2));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
