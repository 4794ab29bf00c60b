// The QEMU command line for one microVM. Pure, so tests can check it without launching.
import { volumeSerial, type Accel, type VmSpec } from "../provider.js";

export const AGENT_PORT_NAME = "org.forgevm.agent";

/**
 * TCG translation cache size. QEMU defaults to 1 GiB, which a small VM never needs and which
 * shows up in host RSS as the cache fills; 64 MiB was measured to cost no boot or exec time.
 */
export const TCG_TB_MIB = 64;

/**
 * A VM's TCG translation cache: TCG_TB_MIB, and for a VM of more than 1 GiB, made for large
 * programs, a quarter of its memory up to 512 MiB: a desktop's Firefox is ~100 MiB of machine code,
 * whose translation overflows 64 MiB, and each time the cache fills QEMU empties it and translates
 * everything again. KVM runs guest code natively and has no such cache.
 */
export function tcgTranslationMib(memoryMb: number): number {
  return memoryMb <= 1024 ? TCG_TB_MIB : Math.min(512, Math.floor(memoryMb / 4));
}

export interface VmFiles {
  kernel: string;
  initramfs: string;
  /** qcow2 overlay over the image; absent when the VM has no disk. */
  disk?: string;
  agentSocket: string;
  consoleSocket: string;
  qmpSocket: string;
  /** QEMU writes its pid here, so that a later server can find VMs nobody owns any more. */
  pidFile?: string;
  /**
   * Where guest RAM lives. Anonymous by default; a snapshot's RAM file mapped privately
   * (copy-on-write, so clones share untouched pages) when restoring; a shared file when
   * capturing one. The backend id is the same in all three so migration streams match.
   */
  memory?: { file: string; share: boolean };
  /**
   * Restore instead of booting: the migration stream arrives on file descriptor 3, and the
   * guest stays paused until a QMP `cont` (so the host can connect first). `ignoreShared` says
   * the stream leaves RAM out because it lives in `memory.file`; the host then starts the load
   * over QMP. `deferred`: the host starts the load over QMP whatever the stream holds (a VMM
   * started ahead of the restore it serves, blank-vmms.ts).
   */
  incoming?: { ignoreShared: boolean; deferred?: boolean };
  /** The root disk's nodes are named (BLANK_DISK_NODES), for its backing to be set later (a VMM started ahead). */
  namedDisk?: boolean;
}

/** Node names of a root disk whose backing is set after QEMU starts (blank-vmms.ts): its qcow2 node and its file's. */
export const BLANK_DISK_NODES = { format: "root-0", file: "root-0-file" } as const;

/**
 * QEMU's own seccomp filter: no obsolete system calls, no privilege changes, no new processes,
 * no scheduling or resource changes by QEMU itself. Snapshots never need QEMU to spawn anything
 * (migration goes to a socket this server serves; restores read an inherited fd).
 */
export const SECCOMP = "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny";

/**
 * The devices every VM has, as one version: a snapshot only loads into a machine with the same
 * devices, so this is part of the machine key (base snapshots of another layout are remade).
 * 2: a balloon with free page reporting.
 */
export const MACHINE_LAYOUT = 2;

/** Id of the guest RAM backend; must be identical on both ends of a migration. */
export const RAM_BACKEND_ID = "ram0";

/**
 * Under TCG every vCPU's TSC is the host's counter, read at emulation time; with two vCPUs or
 * more the kernel's boot check finds them unsynchronized ("Marking TSC unstable"), falls back to
 * jiffies, and then loses time whenever a vCPU thread waits for the host (71 s in 26 minutes
 * under load, measured). The host's counter is one clock, so it is declared reliable. Under KVM
 * the guest keeps time with kvm-clock, which the host keeps in step, so this is TCG's alone.
 */
const TCG_CLOCK = ["tsc=reliable"];

/**
 * TCG keeps the host code it translated from guest code under the guest's virtual address: a
 * library that every process maps at an address of its own (address-space layout randomization)
 * is translated again in every process, and a desktop's Firefox, a dozen processes, overflows the
 * translation cache with copies. Without randomization each program and library is where it was in
 * the last process, and the translations are reused: an exec of `true` 47 → 16 ms, `bash -l -c
 * true` 147 → 36 ms, `python3 -c 1` 230 → 139 ms, Firefox's first page 82 → 65 host CPU-s
 * (docs/benchmarks.md). The VM is what confines a sandbox's code; randomization inside it only
 * hardens one guest program against another (docs/security.md). Under KVM guest code runs
 * natively, nothing is translated, and the guest keeps its randomization.
 */
const TCG_SHARED_TRANSLATIONS = ["norandmaps"];

/**
 * The CPU a guest sees under TCG: all that QEMU emulates ("max", so software built for newer CPUs
 * runs: AVX2, SSE4.2) but the fast-string hints, ERMS and FSRM. With them the guest kernel and glibc
 * copy and clear memory with `rep movsb`, which TCG runs a byte at a time: without, a `dd` of 2,000
 * MiB from /dev/zero 2,645 → 409 ms and a cold boot 2.46 → 2.21 s, with compute and process starts
 * as they were (bench/tcg-cpu.ts). No program can need the hints: the instruction works either way, they only
 * say it is fast. Under KVM the guest gets the host's CPU, on which it is.
 */
export const TCG_CPU = "max,-erms,-fsrm";

/**
 * What a guest is booted with under TCG, as one version, part of the machine key (a base snapshot
 * holds a booted kernel, which chose its ways of copying memory for the CPU it saw, so bases
 * booted otherwise are remade).
 * 1: no address-space randomization, TCG_CPU.
 */
export const TCG_BOOT = 1;

/**
 * Kernel command line: quiet serial console (a chatty console costs seconds under TCG). Under
 * TCG the guest's TSC runs at the host's rate, and calibrating it against the emulated PIT
 * fails now and then (about one boot in six here), after which the kernel hangs waiting for a
 * clock; passing the host's TSC rate skips that calibration.
 */
export function kernelCmdline(spec: VmSpec, opts: { tcg?: boolean; tscKhz?: number } = {}): string {
  const parts = ["console=ttyS0", "quiet", "panic=-1", "reboot=t"];
  if (opts.tcg && opts.tscKhz) parts.push(`tsc_early_khz=${opts.tscKhz}`, ...TCG_CLOCK);
  if (opts.tcg) parts.push(...TCG_SHARED_TRANSLATIONS);
  if (spec.rootfs || spec.baseDisk) parts.push("fvm.root=vda");
  if (spec.hostname) parts.push(`fvm.hostname=${spec.hostname}`);
  if (spec.init && (spec.rootfs || spec.baseDisk)) parts.push(`fvm.init=${spec.init}`);
  return parts.join(" ");
}

export function qemuArgs(spec: VmSpec, files: VmFiles, accel: Accel, hostTscKhz?: number, tcgCpu = TCG_CPU): string[] {
  const args = [
    "-M",
    "microvm,rtc=on",
    "-accel",
    accel === "tcg" ? `tcg,tb-size=${tcgTranslationMib(spec.memoryMb)}` : accel,
    "-cpu",
    accel === "kvm" ? "host" : tcgCpu,
    "-m",
    String(spec.memoryMb),
    "-object",
    files.memory
      ? `memory-backend-file,id=${RAM_BACKEND_ID},size=${spec.memoryMb}M,mem-path=${files.memory.file},share=${files.memory.share ? "on" : "off"}`
      : `memory-backend-ram,id=${RAM_BACKEND_ID},size=${spec.memoryMb}M`,
    "-machine",
    `memory-backend=${RAM_BACKEND_ID}`,
    "-smp",
    String(spec.vcpus),
    "-nodefaults",
    "-no-user-config",
    "-nographic",
    "-no-reboot",
    "-sandbox",
    SECCOMP,
    "-kernel",
    files.kernel,
    "-initrd",
    files.initramfs,
    "-append",
    kernelCmdline(spec, { tcg: accel === "tcg", tscKhz: hostTscKhz }),
    "-chardev",
    `socket,id=con,path=${files.consoleSocket},server=on,wait=off`,
    "-serial",
    "chardev:con",
    "-device",
    "virtio-serial-device",
    "-chardev",
    `socket,id=agent,path=${files.agentSocket},server=on,wait=off`,
    "-device",
    `virtserialport,chardev=agent,name=${AGENT_PORT_NAME}`,
    "-device",
    "virtio-rng-device",
    // Free page reporting: the guest tells QEMU which blocks it has kept free for a while, and
    // QEMU discards them (MADV_DONTNEED on RAM mapped from a snapshot: the copy-on-write copies
    // go, and the page reads as the snapshot's again, which the guest never reads before
    // writing; a hole punched in a forkable VM's RAM file). The balloon is never inflated. Under
    // KVM the same discard happens; the guest's pages are then refaulted through the EPT.
    "-device",
    "virtio-balloon-device,free-page-reporting=on",
    "-qmp",
    `unix:${files.qmpSocket},server=on,wait=off`,
  ];
  if (files.pidFile) args.push("-pidfile", files.pidFile);
  // QEMU's user-mode network: the guest is 10.0.2.15 behind 10.0.2.2, resolver 10.0.2.3. IPv6 off:
  // the host firewall that keeps VMMs off private networks is IPv4.
  if (spec.nic) args.push("-netdev", "user,id=net0,ipv6=off", "-device", "virtio-net-device,netdev=net0");
  if (files.disk) {
    const nodes = files.namedDisk ? `,node-name=${BLANK_DISK_NODES.format},file.node-name=${BLANK_DISK_NODES.file}` : "";
    args.push("-drive", `id=root,file=${files.disk},format=qcow2,if=none,discard=unmap${nodes}`, "-device", "virtio-blk-device,drive=root");
  }
  for (const [i, v] of (spec.volumes ?? []).entries()) {
    args.push(
      "-drive",
      `id=vol${i},file=${v.file.replaceAll(",", ",,")},format=raw,if=none,discard=unmap${v.readOnly ? ",readonly=on" : ""}`,
      "-device",
      `virtio-blk-device,drive=vol${i},serial=${volumeSerial(i)}`,
    );
  }
  // x-ignore-shared can only be set over QMP (QEMU 7.2 has no command-line switch for it), so
  // such a restore waits for `migrate-incoming`.
  if (files.incoming) args.push("-S", "-incoming", files.incoming.ignoreShared || files.incoming.deferred ? "defer" : "fd:3");
  return args.concat(spec.qemuArgs ?? []);
}

/** The host's TSC rate in kHz as /proc/cpuinfo reports it, or undefined when it does not. */
export function hostTscKhz(cpuinfo: string): number | undefined {
  const m = /^cpu MHz\s*:\s*([0-9.]+)/m.exec(cpuinfo);
  const khz = m ? Math.round(Number(m[1]) * 1000) : NaN;
  return Number.isFinite(khz) && khz > 0 ? khz : undefined;
}
