// What the parts of the QEMU provider share: its paths and binaries, its confinement, and the
// VMs (and VM uids) it is responsible for.
import type { Paths } from "../../config/paths.js";
import type { GuestLimits } from "../provider.js";
import type { CgroupVersion } from "../cgroups.js";
import type { JailConfig } from "./jail.js";
import type { QemuVm } from "./qemu-vm.js";
import type { BlankSource } from "./vmm.js";

export interface QemuRuntime {
  paths: Paths;
  /** Absolute path of qemu-system-x86_64 (the jail helper execs it directly). */
  qemu: string;
  jail: JailConfig | null;
  /** Host cgroups for confined VMs (null: not available, or not jailed). */
  cgroups: CgroupVersion | null;
  /** uids of the confined VMMs this provider runs. */
  uids: Set<number>;
  /** VMs past their hello. */
  live: Set<QemuVm>;
  /** VMs between QEMU start and hello, by pid → directory: theirs to clean up at exit. */
  launching: Map<number, string>;
  tscKhz: number | undefined;
  /** The CPU model guests see under TCG (args.ts TCG_CPU unless a benchmark compares another). */
  tcgCpu: string;
  guestLimits: GuestLimits;
  /** Default hello deadline (the accelerator's default when unset). */
  bootTimeoutMs?: number;
  /** VMMs started ahead for restores of file-mapped snapshots (blank-vmms.ts); null when off. */
  blanks: BlankSource | null;
  /** Installs (or checks) the host firewall before a VMM with a network device starts. */
  ensureFirewall(): Promise<void>;
}

/** The guest limits as the agent's `configure` takes them. */
export function limitFields(rt: QemuRuntime): { pids_max: number; memory_reserve_mb: number } {
  return { pids_max: rt.guestLimits.pidsMax, memory_reserve_mb: rt.guestLimits.memoryReserveMb };
}

/** Whether a /proc cmdline is a QEMU's (started by name or by path). */
export function isQemuCommand(cmdline: string): boolean {
  return /^(\S*\/)?qemu-system-/.test(cmdline);
}
