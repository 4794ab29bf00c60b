// The QEMU microvm provider: one QEMU process per VM with the shared kernel and initramfs, the
// image as a read-only backing file under a per-VM qcow2 overlay, the agent's virtio-serial
// channel, the serial console and a QMP socket, all in the VM's own directory. This file holds
// what the provider knows about the host (accelerator, confinement, firewall, health); starting
// a VM is launch.ts, the VM itself qemu-vm.ts, VMs of an earlier server reattach.ts.
import { randomBytes } from "node:crypto";
import { accessSync, constants as fsConstants, readFileSync, rmSync } from "node:fs";
import { stat } from "node:fs/promises";
import { availableParallelism } from "node:os";
import { join } from "node:path";
import type { Paths } from "../../config/paths.js";
import { Gate } from "../../util/gate.js";
import { run } from "../../util/process.js";
import {
  DEFAULT_GUEST_LIMITS,
  type Accel,
  type AttachSpec,
  type GuestLimits,
  type PrestartedVm,
  type Provider,
  type ProviderFeatures,
  type ProviderHealth,
  type Vm,
  type VmSpec,
} from "../provider.js";
import { resolveAccel, type AccelMode, type AccelVerdict } from "./accel.js";
import { hostTscKhz, MACHINE_LAYOUT, TCG_BOOT, TCG_CPU, TCG_TB_MIB, tcgTranslationMib } from "./args.js";
import { cgroupVersion } from "../cgroups.js";
import { firewallIntact, firewallProblem, installFirewall, type FirewallSpec } from "./firewall.js";
import { jailConfig } from "./jail.js";
import { hostMemoryCapMb, validateSpec } from "../spec.js";
import { launch, prestart, startProcess } from "./launch.js";
import { BlankVmms } from "./blank-vmms.js";
import { attach, sweepOrphans } from "./reattach.js";
import type { QemuRuntime } from "./runtime.js";

export { isQemuCommand } from "./runtime.js";

export interface QemuProviderOptions {
  paths: Paths;
  /** Limits on what sandboxes run inside each guest (default DEFAULT_GUEST_LIMITS). */
  guestLimits?: GuestLimits;
  /** Confine each QEMU (own uid, own mount namespace, rlimits): default when running as root. */
  jail?: boolean;
  /** What the host firewall keeps VMMs with a network device from reaching. */
  firewall?: FirewallSpec;
  accel?: AccelMode;
  qemuBinary?: string;
  /** Default hello deadline; TCG boots are slower, so the default depends on the accel. */
  bootTimeoutMs?: number;
  /**
   * Kill this provider's VMs when the Node process exits (default true). A server that
   * re-attaches to its VMs after a restart turns this off.
   */
  killOnExit?: boolean;
  /** Blank VMMs kept started for each shape of restore lately made (blank-vmms.ts; default 0: none). */
  blanksPerShape?: number;
  /** The CPU model guests see under TCG (default TCG_CPU); bench/tcg-cpu.ts compares others. */
  tcgCpu?: string;
}

/**
 * How many VMs start at once; the others wait their turn in order (util/gate.ts). A start is mostly
 * CPU: under TCG about half a second of it for a restore, most of it the guest's code translated
 * afresh; under KVM far less, and no translation. A burst of more than the host has cores only
 * makes every start late; twice the cores leaves room for starts that wait on the disk or on a
 * guest that is slow to answer.
 */
const STARTS_AT_ONCE = Math.max(4, 2 * availableParallelism());

export class QemuProvider implements Provider {
  readonly name = "qemu";
  readonly features: ProviderFeatures = { snapshots: true, reattach: true, volumes: true, init: true, commit: true, isolation: "vm" };
  private readonly rt: QemuRuntime;
  private verdict: Promise<AccelVerdict> | null = null;
  private firewall: Promise<void> | null = null;
  private firewallReady = false;
  private nicCheck: Promise<string | null> | null = null;
  private readonly starts = new Gate(STARTS_AT_ONCE);

  constructor(private readonly opts: QemuProviderOptions) {
    const jail = opts.jail === false ? null : jailConfig(opts.paths.dataDir);
    this.rt = {
      paths: opts.paths,
      qemu: findProgram(opts.qemuBinary ?? "qemu-system-x86_64"),
      jail,
      cgroups: jail ? cgroupVersion() : null,
      uids: new Set(),
      live: new Set(),
      launching: new Map(),
      tscKhz: hostTscKhz(readFileSync("/proc/cpuinfo", "utf8")),
      tcgCpu: opts.tcgCpu ?? TCG_CPU,
      guestLimits: opts.guestLimits ?? DEFAULT_GUEST_LIMITS,
      bootTimeoutMs: opts.bootTimeoutMs,
      blanks: null,
      ensureFirewall: () => this.ensureFirewall(),
    };
    if (opts.blanksPerShape) {
      this.rt.blanks = new BlankVmms(this.rt, opts.blanksPerShape, async (spec, blank) => startProcess(this.rt, spec, (await this.accel()).accel, blank));
    }
    if (opts.killOnExit !== false) process.once("exit", () => this.killAllSync());
  }

  /** Why sandboxes with a network device (network "full") cannot run here, or null (checked once). */
  nicProblem(): Promise<string | null> {
    this.nicCheck ??= firewallProblem(this.rt.jail !== null);
    return this.nicCheck;
  }

  /**
   * Installs the host firewall before the first VMM with a network device, and checks before
   * every later one that it is still in place (reinstalling it if someone flushed it).
   */
  private async ensureFirewall(): Promise<void> {
    if (this.firewallReady && !(await firewallIntact())) {
      this.firewallReady = false;
      this.firewall = null;
    }
    this.firewall ??= (async () => {
      const problem = await this.nicProblem();
      if (problem) throw new Error(`network "full" is not available: ${problem}`);
      await installFirewall(this.opts.firewall ?? { blockedV4: [] });
      this.firewallReady = true;
    })();
    this.firewall.catch(() => (this.firewall = null));
    return this.firewall;
  }

  // Last resort at process exit: only synchronous calls work here.
  private killAllSync(): void {
    const all = new Map(this.rt.launching);
    for (const vm of this.rt.live) all.set(vm.info.pid, vm.info.dir);
    for (const [pid, dir] of all) {
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        // already gone
      }
      // A VMM just killed, or a helper still writing into the directory, can add an entry while it
      // is emptied (ENOTEMPTY): a few retries, rather than an exit that throws.
      rmSync(dir, { recursive: true, force: true, maxRetries: 5, retryDelay: 20 });
    }
  }

  /** The accelerator in use (probing KVM on first call when accel is auto). */
  accel(): Promise<AccelVerdict> {
    this.verdict ??= this.qemuVersion().then((qemuVersion) =>
      resolveAccel(this.opts.accel ?? "auto", {
        stateDir: this.opts.paths.stateDir,
        kernel: this.opts.paths.kernel,
        qemuVersion,
        probe: () => this.probeKvm(),
      }),
    );
    this.verdict.catch(() => (this.verdict = null));
    return this.verdict;
  }

  async machineKey(): Promise<string> {
    const v = await this.accel();
    // A CPU other than TCG_CPU (a benchmark's) is another machine: its snapshots must not be shared.
    const cpu = this.rt.tcgCpu === TCG_CPU ? "" : `/${this.rt.tcgCpu}`;
    return `${v.key}/${v.accel}/m${MACHINE_LAYOUT}${v.accel === "tcg" ? `/b${TCG_BOOT}${cpu}` : ""}`;
  }

  maxVcpus(): number {
    return availableParallelism();
  }

  maxMemoryMb(): number {
    return hostMemoryCapMb();
  }

  async health(): Promise<ProviderHealth> {
    const problems: string[] = [];
    const details: Record<string, string> = {};
    let accel: Accel | null = null;
    try {
      details.qemu = await this.qemuVersion();
    } catch (e) {
      problems.push(`QEMU is not usable: ${(e as Error).message}`);
    }
    for (const [what, p] of [
      ["kernel", this.opts.paths.kernel],
      ["initramfs", this.opts.paths.initramfs],
    ] as const) {
      try {
        await stat(p);
        details[what] = p;
      } catch {
        problems.push(`${what} missing at ${p} (run ./setup.sh)`);
      }
    }
    if (!problems.length) {
      try {
        const v = await this.accel();
        accel = v.accel;
        details.accel_reason = v.reason;
      } catch (e) {
        problems.push((e as Error).message);
      }
    }
    // The confinement in force: operators should see when QEMU runs unconfined.
    details.vmm_jail = this.rt.jail
      ? "on (own uid, mount, network and IPC namespaces, rlimits)"
      : process.getuid?.() === 0
        ? "off (providers.qemu.jail: false)"
        : "off (the server is not root)";
    details.vmm_cgroups = this.rt.cgroups ?? "none (rlimits only)";
    details.network_full = (await this.nicProblem()) ?? "available";
    details.memory_free_page_reporting = "on (virtio-balloon: blocks the guest keeps free go back to the host; the same under KVM)";
    if (accel)
      details.memory_translation_cache =
        accel === "tcg"
          ? `${TCG_TB_MIB} MiB at most per VM of up to 1 GiB, ${tcgTranslationMib(2048)} MiB for one of 2 GiB (TCG translates guest code into it)`
          : "none (KVM runs guest code natively)";
    return { name: this.name, healthy: problems.length === 0, accel, problems, details };
  }

  async probe(): Promise<boolean> {
    try {
      const vm = await this.spawn({ id: `probe-${randomBytes(4).toString("hex")}`, memoryMb: 128, vcpus: 1 });
      try {
        return (await vm.guest.request<"ping">({ op: "ping" }, { timeoutMs: 5000 })).ok === true;
      } finally {
        await vm.destroy();
      }
    } catch {
      return false;
    }
  }

  async spawn(spec: VmSpec): Promise<Vm> {
    validateSpec(spec);
    const { accel } = await this.accel();
    // Background starts (warm pools fill at a lower priority) run beside the others; the scheduler already puts them last.
    return spec.nice ? launch(this.rt, spec, accel) : this.starts.run(() => launch(this.rt, spec, accel));
  }

  async prestart(spec: VmSpec): Promise<PrestartedVm> {
    validateSpec(spec);
    const { accel } = await this.accel();
    return prestart(this.rt, spec, accel);
  }

  async destroyAll(): Promise<void> {
    await this.rt.blanks?.close();
    await Promise.all([...this.rt.live].map((vm) => vm.destroy()));
  }

  async attach(a: AttachSpec): Promise<Vm> {
    const { accel } = await this.accel();
    return attach(this.rt, a, accel);
  }

  sweepOrphans(keep: Set<string>, isLiveServer: (pid: number) => Promise<boolean>): Promise<string[]> {
    return sweepOrphans(this.rt, keep, isLiveServer);
  }

  private async qemuVersion(): Promise<string> {
    const { stdout } = await run(this.rt.qemu, ["--version"]);
    return stdout.split("\n")[0].trim();
  }

  private async probeKvm(): Promise<boolean> {
    try {
      const vm = await launch(this.rt, { id: `probe-${randomBytes(4).toString("hex")}`, memoryMb: 128, vcpus: 1, bootTimeoutMs: 8000 }, "kvm");
      const ok = (await vm.guest.request<"ping">({ op: "ping" }, { timeoutMs: 3000 })).ok;
      await vm.destroy();
      return ok;
    } catch {
      return false;
    }
  }
}

/** The absolute path of a program, looked up in $PATH (the jail helper execs it directly). */
function findProgram(name: string): string {
  if (name.includes("/")) return name;
  for (const dir of (process.env.PATH ?? "/usr/bin:/bin").split(":")) {
    const p = join(dir || ".", name);
    try {
      accessSync(p, fsConstants.X_OK);
      return p;
    } catch {
      // not here
    }
  }
  return name; // spawn reports it missing
}
