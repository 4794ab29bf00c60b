// Benchmark of the VM foundation; prints one JSON document.
//   cold boot to agent hello (p50/p95 over BOOTS boots) beside a bare QEMU boot of the same
//   kernel and initramfs to its first serial byte, measured in the same run (ratio reported);
//   exec round trip of `true` (p50/p99 over EXECS); 100 MiB upload and download throughput;
//   host RSS of one idle VM's QEMU process (after boot, and after the exec and file runs).
// Usage: node dist/bench/boot-exec-files.js [--boots N] [--execs N] [--mib N]
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { readFile } from "node:fs/promises";
import { parseArgs } from "node:util";
import { benchForge } from "./data-dir.js";
import { resolveImage } from "../src/images/store.js";
import { kernelCmdline, hostTscKhz, TCG_CPU } from "../src/providers/qemu/args.js";
import { QemuProvider } from "../src/providers/qemu/qemu-provider.js";
import { pct, machine } from "./stats.js";

const { values } = parseArgs({
  options: { boots: { type: "string", default: "7" }, execs: { type: "string", default: "300" }, mib: { type: "string", default: "100" } },
});
const BOOTS = Number(values.boots);
const EXECS = Number(values.execs);
const MIB = Number(values.mib);

async function rssKb(pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, "utf8");
  return Number(/VmRSS:\s+(\d+)/.exec(status)?.[1]);
}

/** QEMU with the same kernel and initramfs, no devices beyond the console: ms to first byte. */
function bareBoot(kernel: string, initramfs: string, accel: string, tscKhz?: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const append = kernelCmdline({ id: "bare", memoryMb: 256, vcpus: 1 }, { tcg: accel === "tcg", tscKhz }).replace(" quiet", "");
    const q = spawn(
      "qemu-system-x86_64",
      [
        "-M",
        "microvm,rtc=on",
        "-accel",
        accel,
        "-cpu",
        accel === "kvm" ? "host" : TCG_CPU,
        "-m",
        "256",
        "-smp",
        "1",
        "-nodefaults",
        "-no-user-config",
        "-nographic",
        "-no-reboot",
        "-kernel",
        kernel,
        "-initrd",
        initramfs,
        "-append",
        append,
        "-serial",
        "stdio",
      ],
      { stdio: ["ignore", "pipe", "ignore"] },
    );
    q.stdout.once("data", () => {
      const ms = performance.now() - t0;
      q.kill("SIGKILL");
      q.once("exit", () => resolve(ms));
    });
    q.once("error", reject);
  });
}

async function main() {
  const forge = await benchForge();
  // Raw VM boots go to the provider itself, on the same data directory.
  const provider = new QemuProvider({ paths: forge.paths });
  const verdict = await provider.accel();
  const image = await resolveImage(forge.paths);
  const tsc = hostTscKhz(await readFile("/proc/cpuinfo", "utf8"));

  // Alternate the two kinds of boot so that drift on a noisy machine hits both alike.
  const hello: number[] = [];
  const spawnTotal: number[] = [];
  const bare: number[] = [];
  const noDisk: number[] = [];
  for (let i = 0; i < BOOTS; i++) {
    bare.push(await bareBoot(forge.paths.kernel, forge.paths.initramfs, verdict.accel, tsc));
    const nd = await provider.spawn({ id: `bench-nodisk-${i}`, memoryMb: 512, vcpus: 1 });
    noDisk.push(nd.info.bootMs);
    await nd.destroy();
    const t0 = performance.now();
    const vm = await provider.spawn({ id: `bench-${i}`, rootfs: image.rootfs, memoryMb: 512, vcpus: 1, diskMb: 2048 });
    spawnTotal.push(performance.now() - t0);
    hello.push(vm.info.bootMs);
    await vm.destroy();
  }

  const sb = await forge.sandboxes.spawn({ memoryMb: 512 });
  await new Promise((r) => setTimeout(r, 2000));
  const rssIdleKb = await rssKb(sb.vm.info.pid);
  const execs: number[] = [];
  for (let i = 0; i < EXECS; i++) {
    const t0 = performance.now();
    await sb.exec(["true"]);
    execs.push(performance.now() - t0);
  }
  const pings: number[] = [];
  for (let i = 0; i < EXECS; i++) {
    const t0 = performance.now();
    await sb.vm.guest.request<"ping">({ op: "ping" });
    pings.push(performance.now() - t0);
  }

  const data = randomBytes(MIB * 1048576);
  let t0 = performance.now();
  await sb.writeFile("/root/bench.bin", data);
  const upS = (performance.now() - t0) / 1000;
  t0 = performance.now();
  const back = await sb.readFile("/root/bench.bin", (MIB + 1) * 1048576);
  const downS = (performance.now() - t0) / 1000;
  if (!back.equals(data)) throw new Error("download differs from upload");
  await sb.remove("/root/bench.bin");

  const rssAfterKb = await rssKb(sb.vm.info.pid);
  await forge.close();

  const p50Hello = pct(hello, 50);
  const p50Bare = pct(bare, 50);
  console.log(
    JSON.stringify(
      {
        benchmark: "boot-exec-files",
        date: new Date().toISOString(),
        machine: machine(),
        accel: verdict.accel,
        accel_reason: verdict.reason,
        image: image.name,
        boot: {
          runs: BOOTS,
          hello_ms: { p50: p50Hello, p95: pct(hello, 95) },
          spawn_total_ms: { p50: pct(spawnTotal, 50), p95: pct(spawnTotal, 95) },
          hello_without_disk_ms: { p50: pct(noDisk, 50), p95: pct(noDisk, 95) },
          bare_qemu_first_serial_byte_ms: { p50: p50Bare, p95: pct(bare, 95) },
          ratio_hello_to_bare_p50: Math.round((p50Hello / p50Bare) * 100) / 100,
        },
        exec_true_ms: { runs: EXECS, p50: pct(execs, 50), p99: pct(execs, 99) },
        ping_ms: { runs: EXECS, p50: pct(pings, 50), p99: pct(pings, 99) },
        files: {
          mib: MIB,
          upload_mib_s: Math.round((MIB / upS) * 10) / 10,
          download_mib_s: Math.round((MIB / downS) * 10) / 10,
        },
        qemu_rss_mib: {
          memory_mb: 512,
          idle_after_boot: Math.round(rssIdleKb / 1024),
          after_exec_and_file_runs: Math.round(rssAfterKb / 1024),
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
