// Benchmark of the system image (docs/system-images.md) against the default image, in one Forge:
//   cold boot → ready (a spawn that boots instead of restoring: for the system image this includes
//   systemd's start-up, which a spawn waits for), restore → first exec (a spawn from the image's
//   base snapshot, then `true`), and idle memory ten seconds after a restore: the guest's own
//   count (MemTotal − MemAvailable) and its VMM's PSS on the host. The default image is the
//   baseline; the ratios are what carries across machines.
// Prints one JSON document. Usage: node dist/bench/system-image.js [--runs 5]
import { readFile } from "node:fs/promises";
import { parseArgs } from "node:util";
import { DEFAULT_IMAGE, SYSTEM_IMAGE } from "../src/images/store.js";
import { preparedSystemImage } from "../src/setup/index.js";
import { benchDataDir, benchForge } from "./data-dir.js";
import { pct, machine } from "./stats.js";

const { values } = parseArgs({ options: { runs: { type: "string", default: "5" } } });
const RUNS = Number(values.runs);
const MEMORY_MB = 512;
const round = (x: number) => Math.round(x * 10) / 10;

async function pssMib(pid: number): Promise<number> {
  const text = await readFile(`/proc/${pid}/smaps_rollup`, "utf8");
  return round(Number(/^Pss:\s+(\d+)/m.exec(text)?.[1] ?? 0) / 1024);
}

async function main() {
  const started = Date.now();
  // The system image as the tests keep it: built once per checkout, shared into this data directory.
  const dataDir = await benchDataDir();
  await preparedSystemImage(dataDir);
  const forge = await benchForge({ dataDir, prestart: 0, reapIntervalMs: 0, metrics: { enabled: false } });
  const accel = (await forge.providers.health()).accel;
  const measure = async (image: string) => {
    const cold: number[] = [];
    for (let i = 0; i < Math.min(RUNS, 3); i++) {
      const t0 = performance.now();
      const sb = await forge.sandboxes.spawn({ image, memoryMb: MEMORY_MB, coldBoot: true });
      cold.push(performance.now() - t0);
      await sb.destroy();
    }
    await (await forge.sandboxes.spawn({ image, memoryMb: MEMORY_MB })).destroy(); // makes the base, untimed
    const restore: number[] = [];
    for (let i = 0; i < RUNS; i++) {
      const t0 = performance.now();
      const sb = await forge.sandboxes.spawn({ image, memoryMb: MEMORY_MB });
      await sb.exec("true");
      restore.push(performance.now() - t0);
      await sb.destroy();
    }
    const sb = await forge.sandboxes.spawn({ image, memoryMb: MEMORY_MB });
    await new Promise((r) => setTimeout(r, 10_000));
    const mem = (await sb.exec("awk '/^MemTotal/{t=$2} /^MemAvailable/{a=$2} END{print int((t-a)/1024)}' /proc/meminfo")).stdout.trim();
    const pss = await pssMib(forge.sandboxes.get(sb.id).vm_pid!);
    const units = image === SYSTEM_IMAGE ? Number((await sb.exec("systemctl list-units --state=running --no-legend | wc -l")).stdout.trim()) : undefined;
    await sb.destroy();
    return {
      cold_boot_ms: { n: cold.length, p50: round(pct(cold, 50)), max: round(pct(cold, 100)) },
      restore_to_exec_ms: { n: restore.length, p50: round(pct(restore, 50)), p95: round(pct(restore, 95)) },
      idle_guest_used_mib: Number(mem),
      idle_vmm_pss_mib: pss,
      ...(units !== undefined ? { running_units: units } : {}),
    };
  };
  try {
    const baseline = await measure(DEFAULT_IMAGE);
    const system = await measure(SYSTEM_IMAGE);
    const ratio = (a: number, b: number) => Math.round((a / b) * 100) / 100;
    console.log(
      JSON.stringify(
        {
          bench: "system-image",
          date: new Date().toISOString(),
          machine: machine(),
          accel,
          memory_mb: MEMORY_MB,
          runs: RUNS,
          default_image: baseline,
          system_image: system,
          ratios_system_to_default: {
            cold_boot: ratio(system.cold_boot_ms.p50, baseline.cold_boot_ms.p50),
            restore_to_exec: ratio(system.restore_to_exec_ms.p50, baseline.restore_to_exec_ms.p50),
            idle_guest_used: ratio(system.idle_guest_used_mib, baseline.idle_guest_used_mib),
            idle_vmm_pss: ratio(system.idle_vmm_pss_mib, baseline.idle_vmm_pss_mib),
          },
          seconds: Math.round((Date.now() - started) / 1000),
        },
        null,
        2,
      ),
    );
  } finally {
    await forge.close();
  }
}

await main();
