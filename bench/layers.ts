// Benchmark of one sandbox's disk chain: --snapshots live snapshots (default 50) and --forks
// forks (default 50) of one sandbox, each adding a layer below its disk, then a pause, a resume,
// a stop and a start. Past 12 layers the chain is collapsed into the guest's disk in the
// background (providers/qemu/disk-layers.ts). Measured: each snapshot's and fork's time (first
// ten against the last ten), an exec and a 1 MiB file write and read at the start and at the
// end (the baseline is the same calls on the fresh sandbox, in the same run), and the chain's
// length at the end.
// Prints one JSON document. Usage: node dist/bench/layers.js [--snapshots 50] [--forks 50]
import { parseArgs } from "node:util";
import type { Sandbox } from "../src/core/guest/sandbox.js";
import { backingChain } from "../src/providers/qemu/jail.js";
import { topFile } from "../src/providers/qemu/disk-layers.js";
import { benchForge } from "./data-dir.js";
import { pct, machine } from "./stats.js";

const { values } = parseArgs({ options: { snapshots: { type: "string", default: "50" }, forks: { type: "string", default: "50" } } });
const SNAPSHOTS = Number(values.snapshots);
const FORKS = Number(values.forks);

const round = (x: number) => Math.round(x * 10) / 10;
const p50 = (xs: number[]) => round(pct(xs, 50));

async function io(sb: Sandbox): Promise<{ exec_ms: number; write_1mib_ms: number; read_1mib_ms: number }> {
  const data = Buffer.alloc(1024 * 1024, 7);
  const e: number[] = [];
  const w: number[] = [];
  const r: number[] = [];
  for (let i = 0; i < 10; i++) {
    let t = performance.now();
    await sb.exec("true");
    e.push(performance.now() - t);
    t = performance.now();
    await sb.writeFile(`/root/io${i}`, data);
    w.push(performance.now() - t);
    t = performance.now();
    await sb.readFile(`/root/io${i}`);
    r.push(performance.now() - t);
  }
  return { exec_ms: p50(e), write_1mib_ms: p50(w), read_1mib_ms: p50(r) };
}

async function main() {
  const started = Date.now();
  const forge = await benchForge();
  const accel = (await forge.providers.health()).accel;
  let sb = await forge.sandboxes.spawn({ memoryMb: 256, forkable: true, ttlMs: 3_600_000 });
  const fresh = await io(sb);
  const snapMs: number[] = [];
  for (let i = 0; i < SNAPSHOTS; i++) {
    await sb.writeFile(`/root/s${i}`, `snapshot ${i}`);
    const t = performance.now();
    const snap = await forge.snapshots.take(sb.id);
    snapMs.push(performance.now() - t);
    await forge.snapshots.remove(snap.id);
  }
  const forkMs: number[] = [];
  for (let i = 0; i < FORKS; i++) {
    await sb.writeFile(`/root/f${i}`, `fork ${i}`);
    const t = performance.now();
    const { sandboxes } = await forge.snapshots.fork(sb.id);
    forkMs.push(performance.now() - t);
    await sandboxes[0].destroy();
  }
  const chain = (await backingChain(await topFile(sb.vm.info.dir))).length;
  const deep = await io(sb);
  const t0 = performance.now();
  await forge.sandboxes.pause(sb.id);
  sb = await forge.sandboxes.use(sb.id, "bench");
  const pauseResumeMs = performance.now() - t0;
  const t1 = performance.now();
  await forge.sandboxes.stop(sb.id, 1000);
  sb = await forge.sandboxes.start(sb.id);
  const stopStartMs = performance.now() - t1;
  const files = (await sb.exec(`cat /root/s0 /root/s${SNAPSHOTS - 1} /root/f0 /root/f${FORKS - 1}`)).stdout;
  console.log(
    JSON.stringify(
      {
        benchmark: "layers",
        date: new Date().toISOString(),
        machine: machine(accel),
        snapshots: SNAPSHOTS,
        forks: FORKS,
        snapshot_ms: { first10_p50: p50(snapMs.slice(0, 10)), last10_p50: p50(snapMs.slice(-10)) },
        fork_ms: { first10_p50: p50(forkMs.slice(0, 10)), last10_p50: p50(forkMs.slice(-10)) },
        chain_files_at_the_end: chain,
        baseline_fresh_sandbox: fresh,
        after_all_of_them: deep,
        pause_and_resume_ms: round(pauseResumeMs),
        stop_and_start_ms: round(stopStartMs),
        files_intact: files === `snapshot 0snapshot ${SNAPSHOTS - 1}fork 0fork ${FORKS - 1}`,
        seconds: Math.round((Date.now() - started) / 1000),
      },
      null,
      2,
    ),
  );
  await forge.sandboxes.destroy(sb.id);
  await forge.close();
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error(e);
    process.exit(1);
  },
);
