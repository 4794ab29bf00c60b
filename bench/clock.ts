// Benchmark of guest clocks under a CPU-heavy host: sandboxes of one and two vCPUs run for
// --minutes (default 10) while busy loops take every host core, and their clocks are compared
// with the host's every 10 s. Two servers in one process: one as shipped (the host sends its time
// every 30 s, sandboxes/clock.ts), one with that off, which shows the guests' own clocks (TSC
// declared reliable under TCG). The baseline is the measurement's own uncertainty: half the exec
// round trip that reads the guest's clock.
// Prints one JSON document. Usage: node dist/bench/clock.js [--minutes 10]
import { spawn, type ChildProcess } from "node:child_process";
import { cpus } from "node:os";
import { parseArgs } from "node:util";
import type { Sandbox } from "../src/core/guest/sandbox.js";
import { benchForge } from "./data-dir.js";
import { pct, machine } from "./stats.js";

const { values } = parseArgs({ options: { minutes: { type: "string", default: "10" } } });
const MINUTES = Number(values.minutes);

async function offset(sb: Sandbox): Promise<{ offsetMs: number; rttMs: number }> {
  const t0 = Date.now();
  const r = await sb.exec("date +%s%N");
  const t1 = Date.now();
  return { offsetMs: Number(BigInt(r.stdout.trim()) / 1_000_000n) - (t0 + t1) / 2, rttMs: t1 - t0 };
}

async function main() {
  const started = Date.now();
  const kept = await benchForge();
  const own = await benchForge({ clockEveryMs: 0 });
  const accel = (await kept.providers.health()).accel;
  const guests: { name: string; sb: Sandbox }[] = [];
  for (const [name, forge] of [
    ["kept", kept],
    ["own clock", own],
  ] as const)
    for (const vcpus of [1, 2]) guests.push({ name: `${name}, ${vcpus} vCPU`, sb: await forge.sandboxes.spawn({ vcpus, memoryMb: 256, ttlMs: (MINUTES + 5) * 60_000 }) });
  const clocksource = Object.fromEntries(
    await Promise.all(guests.map(async (g) => [g.name, (await g.sb.exec("cat /sys/devices/system/clocksource/clocksource0/current_clocksource")).stdout.trim()])),
  );
  const load: ChildProcess[] = cpus().map(() => spawn("sh", ["-c", "while :; do :; done"], { stdio: "ignore" }));
  const samples = new Map<string, number[]>(guests.map((g) => [g.name, []]));
  const rtts: number[] = [];
  try {
    for (const end = Date.now() + MINUTES * 60_000; Date.now() < end; ) {
      for (const g of guests) {
        const o = await offset(g.sb);
        samples.get(g.name)?.push(o.offsetMs);
        rtts.push(o.rttMs);
      }
      await new Promise((r) => setTimeout(r, 10_000));
    }
  } finally {
    for (const p of load) p.kill("SIGKILL");
  }
  const stat = (xs: number[]) => ({ n: xs.length, worst_abs_ms: Math.round(Math.max(...xs.map(Math.abs))), p50_ms: Math.round(pct(xs, 50)), last_ms: Math.round(xs.at(-1) ?? 0) });
  console.log(
    JSON.stringify(
      {
        benchmark: "clock",
        date: new Date().toISOString(),
        machine: machine(accel),
        host_load: `${cpus().length} busy loops, one per core`,
        minutes: MINUTES,
        baseline_half_exec_rtt_ms: { p50: Math.round(pct(rtts, 50) / 2), p95: Math.round(pct(rtts, 95) / 2) },
        clocksource,
        offset_guest_minus_host: Object.fromEntries([...samples].map(([k, xs]) => [k, stat(xs)])),
        seconds: Math.round((Date.now() - started) / 1000),
      },
      null,
      2,
    ),
  );
  await kept.close();
  await own.close();
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error(e);
    process.exit(1);
  },
);
