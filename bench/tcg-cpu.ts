// Benchmark of the CPU model guests see under TCG; prints one JSON document. Two VMs of the default
// image boot side by side, one with QEMU's "max" CPU (the baseline: every feature TCG emulates) and
// one with TCG_CPU (providers/qemu/args.ts: the same without the fast-string hints ERMS and FSRM,
// with which the guest copies memory with `rep movsb`, a byte at a time under TCG); rounds
// alternate between them over a cold boot, process starts, memory copies and compute. Under KVM
// both VMs get the host's CPU and the columns should agree.
// Usage: node dist/bench/tcg-cpu.js [--rounds 5]
import { parseArgs } from "node:util";
import { resolveImage } from "../src/images/store.js";
import { TCG_CPU } from "../src/providers/qemu/args.js";
import { QemuProvider } from "../src/providers/qemu/qemu-provider.js";
import type { Vm } from "../src/providers/provider.js";
import { benchForge } from "./data-dir.js";
import { pct, machine } from "./stats.js";

const { values } = parseArgs({ options: { rounds: { type: "string", default: "5" } } });
const ROUNDS = Number(values.rounds);
const BASELINE = "max";

const WORKLOADS: Record<string, string> = {
  exec_true: "true",
  login_bash: "bash -l -c true",
  python_start: "python3 -c 1",
  copy_2000_mib: "dd if=/dev/zero of=/dev/null bs=1M count=2000 2>/dev/null",
  gzip_30_mib: "head -c 30000000 /dev/urandom > /tmp/r; gzip -1 -c /tmp/r > /dev/null",
  python_loop: "python3 -c 'sum(i*i for i in range(3000000))'",
  sort_400k_lines: "seq 1 400000 | sort -R | sort -n | tail -1 >/dev/null",
};

async function main() {
  const forge = await benchForge();
  const image = await resolveImage(forge.paths);
  const models = [BASELINE, TCG_CPU];
  const providers = models.map((tcgCpu) => new QemuProvider({ paths: forge.paths, tcgCpu }));
  const accel = (await providers[0].accel()).accel;
  const ms: Record<string, Record<string, number[]>> = Object.fromEntries(
    models.map((m) => [m, Object.fromEntries([["boot_to_hello", []], ...Object.keys(WORKLOADS).map((w) => [w, []])])]),
  );
  const vms: Vm[] = [];
  try {
    for (let r = 0; r < ROUNDS; r++) {
      // Alternate which model goes first, so that neither always runs on a machine the other warmed.
      for (const i of r % 2 ? [1, 0] : [0, 1]) {
        const vm = await providers[i].spawn({ id: `bench-cpu-${i}-${r}`, rootfs: image.rootfs, memoryMb: 512, vcpus: 1, diskMb: 2048 });
        vms.push(vm);
        ms[models[i]].boot_to_hello.push(vm.info.bootMs);
        for (const [name, cmd] of Object.entries(WORKLOADS)) {
          // The first run of each translates the program's code; the second is what a program run again costs.
          for (const run of [0, 1]) {
            const t0 = performance.now();
            const res = await vm.guest.execBuffered({ cmd, timeout_ms: 300_000 });
            if (res.exit_code !== 0) throw new Error(`${name} on ${models[i]}: exit ${res.exit_code} ${res.stderr}`);
            if (run === 1) ms[models[i]][name].push(performance.now() - t0);
          }
        }
        await vm.destroy();
        vms.pop();
      }
    }
  } finally {
    for (const vm of vms) await vm.destroy().catch(() => {});
    await forge.close();
  }
  const p50 = (m: string, w: string) => Math.round(pct(ms[m][w], 50));
  const names = ["boot_to_hello", ...Object.keys(WORKLOADS)];
  console.log(
    JSON.stringify(
      {
        benchmark: "tcg-cpu",
        date: new Date().toISOString(),
        machine: machine(accel),
        rounds: ROUNDS,
        models: { baseline: BASELINE, tcg_cpu: TCG_CPU },
        p50_ms: Object.fromEntries(names.map((w) => [w, { baseline: p50(BASELINE, w), tcg_cpu: p50(TCG_CPU, w) }])),
        baseline_vs_tcg_cpu: Object.fromEntries(names.map((w) => [w, Math.round((p50(BASELINE, w) / p50(TCG_CPU, w)) * 100) / 100])),
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
