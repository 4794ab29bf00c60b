// Benchmark of process starts in a guest with and without address-space randomization; prints one
// JSON document. Under TCG, guests boot with `norandmaps` (providers/qemu/args.ts): QEMU keeps the
// code it translated under the guest's virtual addresses, so a library mapped at a new address in
// each process is translated again in each. In one sandbox, rounds interleave the two settings
// (the guest's /proc/sys/kernel/randomize_va_space: 2 is a stock kernel's default, the baseline;
// 0 is what TCG guests boot with) over commands that start one process or several: an exec of
// `true`, `sh -c true`, a login bash (what E2B's SDK runs), Python. Under KVM nothing is
// translated and the guest keeps randomization; the two columns then show what it costs there.
// Usage: node dist/bench/guest-aslr.js [--rounds 15]
import { parseArgs } from "node:util";
import { startServer } from "../src/compose/serve.js";
import { benchConfig } from "./data-dir.js";
import { restApi } from "./rest.js";
import { pct, machine } from "./stats.js";

const { values } = parseArgs({ options: { rounds: { type: "string", default: "15" } } });
const ROUNDS = Number(values.rounds);
const COMMANDS = ["true", "sh -c true", "bash -l -c true", "python3 -c 1"];
/** Runs of each command per setting and round: enough that a round's first, which may translate afresh, is not its median. */
const RUNS = 5;

async function main() {
  const server = await startServer(await benchConfig(), "bench");
  const api = restApi(server.url);
  const { id } = await api("POST", "/sandboxes", { ttl: "1h" });
  const exec = async (command: string) => {
    const r = await api("POST", `/sandboxes/${id}/exec`, { command });
    if (r.exit_code !== 0) throw new Error(`${command}: exit ${r.exit_code} ${r.stderr}`);
  };
  const booted = (await api("POST", `/sandboxes/${id}/exec`, { command: "cat /proc/sys/kernel/randomize_va_space" })).stdout.trim();
  const ms: Record<string, Record<string, number[]>> = { randomized: {}, not_randomized: {} };
  for (const setting of Object.values(ms)) for (const c of COMMANDS) setting[c] = [];
  for (let r = 0; r < ROUNDS; r++) {
    // Alternate which setting goes first, so that neither always runs on a guest the other warmed.
    for (const setting of r % 2 ? ["not_randomized", "randomized"] : ["randomized", "not_randomized"]) {
      await exec(`echo ${setting === "randomized" ? 2 : 0} > /proc/sys/kernel/randomize_va_space`);
      for (const c of COMMANDS) {
        for (let i = 0; i < RUNS; i++) {
          const t0 = performance.now();
          await exec(c);
          ms[setting][c].push(performance.now() - t0);
        }
      }
    }
  }
  await exec(`echo ${booted} > /proc/sys/kernel/randomize_va_space`);
  const p50 = (setting: string, c: string) => Math.round(pct(ms[setting][c], 50) * 10) / 10;
  const accel = (await server.forge.providers.health()).accel;
  await api("DELETE", `/sandboxes/${id}`);
  await server.close();
  console.log(
    JSON.stringify(
      {
        benchmark: "guest-aslr",
        date: new Date().toISOString(),
        machine: machine(accel),
        rounds: ROUNDS,
        runs_per_round: RUNS,
        guest_booted_with_randomize_va_space: Number(booted),
        p50_ms: Object.fromEntries(COMMANDS.map((c) => [c, { randomized: p50("randomized", c), not_randomized: p50("not_randomized", c) }])),
        randomized_vs_not: Object.fromEntries(COMMANDS.map((c) => [c, Math.round((p50("randomized", c) / p50("not_randomized", c)) * 100) / 100])),
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
