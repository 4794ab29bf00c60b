// The provider interface: what core needs from a VM backend. QEMU implements it today; a
// Firecracker backend would be another folder beside qemu/.
import type { AgentChannel } from "../agent-client/index.js";

export type Accel = "kvm" | "tcg";

export interface VmSpec {
  /** Unique id; names the VM's runtime directory. */
  id: string;
  /** Read-only ext4 root filesystem; omit to stay in the initramfs (probes and tests). */
  rootfs?: string;
  memoryMb: number;
  vcpus: number;
  /** Size of the writable disk; the guest grows its filesystem to fill it. */
  diskMb?: number;
  hostname?: string;
  /** How long to wait for the agent's hello. */
  bootTimeoutMs?: number;
  /** Extra QEMU arguments, for debugging and tests. */
  qemuArgs?: string[];
}

export interface VmInfo {
  id: string;
  pid: number;
  dir: string;
  accel: Accel;
  memoryMb: number;
  vcpus: number;
  agentVersion: string;
  /** Milliseconds from launch to the agent's hello. */
  bootMs: number;
}

export interface Vm {
  readonly info: VmInfo;
  readonly channel: AgentChannel;
  /** The last bytes the guest printed on its serial console. */
  consoleTail(bytes?: number): string;
  /** Resolves when the VMM process has exited, for whatever reason. */
  readonly exited: Promise<void>;
  /** Stops the VM and removes every file it had; safe to call twice. */
  destroy(): Promise<void>;
}

export interface ProviderHealth {
  name: string;
  healthy: boolean;
  accel: Accel | null;
  problems: string[];
  details: Record<string, string>;
}

export interface Provider {
  readonly name: string;
  health(): Promise<ProviderHealth>;
  spawn(spec: VmSpec): Promise<Vm>;
}

/** The guest did not come up; message carries the reason and the console tail. */
export class BootError extends Error {
  override name = "BootError";
  constructor(
    message: string,
    readonly consoleTail: string,
  ) {
    super(message);
  }
}
