// The provider interface: what core needs from a VM backend. QEMU implements it today; a
// Firecracker backend would be another folder beside qemu/.
import type { Writable } from "node:stream";
import type { Guest } from "./guest.js";

export type Accel = "kvm" | "tcg";

export interface VmSpec {
  /** Unique id; names the VM's runtime directory. */
  id: string;
  /** Read-only ext4 root filesystem; omit to stay in the initramfs (probes and tests). */
  rootfs?: string;
  /** The image's name, for providers that start the sandbox elsewhere (remote, e2b). */
  image?: string;
  memoryMb: number;
  vcpus: number;
  /** Size of the writable disk; the guest grows its filesystem to fill it. */
  diskMb?: number;
  /**
   * Boot (not restore) with the root disk over this frozen qcow2 disk instead of `rootfs`: a
   * stopped sandbox whose snapshot cannot be restored starts cold with its files.
   */
  baseDisk?: { file: string; bytes: number };
  hostname?: string;
  /** Boot the image's systemd as PID 1, which starts the agent as its first service (docs/system-images.md). */
  init?: "systemd";
  /** How long to wait for the agent's hello. */
  bootTimeoutMs?: number;
  /** Extra QEMU arguments, for debugging and tests. */
  qemuArgs?: string[];
  /** Resume a snapshot instead of booting; memoryMb and vcpus must be the snapshot's. */
  restore?: RestoreSource;
  /**
   * Keep guest RAM in this file (shared), so that `freeze` can turn the VM into a snapshot
   * whose RAM every restore maps copy-on-write.
   */
  memoryFile?: string;
  /**
   * Keep guest RAM in a file of the VM's own, mapped shared: a fork or pause then saves the
   * devices only and copies (or hands over) that file, so the guest stops for a file copy
   * instead of a stream of its whole RAM. Its pages are the VM's own (no sharing with the
   * snapshot it came from), which is what it costs.
   */
  forkable?: boolean;
  /** Scheduling niceness of the VMM (warm-pool VMs wait at low priority). */
  nice?: number;
  /**
   * A network device on QEMU's user-mode network (network "full"). The VMM then stays in the
   * host's network namespace, and the host firewall keeps it off the host and private networks.
   */
  nic?: boolean;
  /**
   * Volumes: raw ext4 files attached as disks with serials "vol0", "vol1"… in this order. The
   * same list must be given again to restore a snapshot of the VM.
   */
  volumes?: VolumeDisk[];
}

/** A volume's disk file as a VM gets it. */
export interface VolumeDisk {
  file: string;
  readOnly: boolean;
  /** Its size in bytes (what the VMM may write up to). */
  bytes: number;
}

/** The serial a VM's volume disk `i` carries, by which the guest finds it. */
export const volumeSerial = (i: number) => `vol${i}`;

/** Limits inside the guest on everything the sandbox runs (the agent itself stays outside them). */
export interface GuestLimits {
  /** Most processes and threads at once. */
  pidsMax: number;
  /** Guest memory kept back from the sandbox's processes for the agent and kernel. */
  memoryReserveMb: number;
}

export const DEFAULT_GUEST_LIMITS: GuestLimits = { pidsMax: 1024, memoryReserveMb: 48 };

/** The files of a snapshot. Everything in it is immutable once written. */
export interface SnapshotFiles {
  /** QEMU migration stream: device state, and guest RAM unless `memory` holds it. */
  state: string;
  /** Guest RAM, mapped privately (copy-on-write) by every VM restored from it. */
  memory?: string;
  /** Frozen qcow2 disk that restored VMs get an overlay on, and its virtual size. */
  disk?: string;
  diskBytes?: number;
  /** The console log up to the snapshot; a restored VM's log starts with it. */
  console?: string;
}

export interface RestoreSource {
  files: SnapshotFiles;
  /**
   * Stream the state in through a pipe instead of reading `files.state`: called with the
   * pipe's writing end as soon as QEMU runs (a fork's children load while the parent sends).
   */
  feed?: (stream: Writable) => void;
  /** Open the disk's backing file without checking it (it is still being written by the parent). */
  diskInUse?: boolean;
  /**
   * The guest's processes run on (detached, for the new host to adopt) rather than being killed:
   * a resumed pause, and a snapshot's or a fork's copies, which are the machine as it was.
   */
  keepProcesses?: boolean;
  /** The same sandbox going on (a resumed pause): it keeps its machine id. */
  sameMachine?: boolean;
  /**
   * The guest the sandbox had, held before its save (Guest.hold): the restored guest takes over
   * every stream of it (processes with their output, tunnels, watches), so the new VM's guest is
   * this same object. Without it, or when the guest cannot, streams are lost.
   */
  guest?: Guest;
  /**
   * With `forkable`: `files.memory` is moved into the VM and becomes its own RAM file (a pause
   * of a forkable VM being resumed), instead of being copied.
   */
  adoptMemory?: boolean;
}

/**
 * Where a snapshot's guest RAM goes: into the migration stream (the default, and what an
 * export carries); copied from a forkable VM's RAM file while it is stopped ("copy"); that file
 * itself, linked, for a VM that never runs again ("give": it stays stopped until destroyed); or,
 * for a VM restored from a snapshot whose RAM file it maps, that file linked and the stream
 * less the pages it holds ("delta": what a pause stores; the stream where there is no such file).
 */
export type SnapshotMemory = "stream" | "copy" | "give" | "delta";

export interface CaptureResult {
  files: SnapshotFiles;
  /** How long the guest was paused, by QEMU's own clock. */
  pauseMs: number;
  /** Size of the migration stream. */
  bytes: number;
  /** The RAM file is the one the VM was restored from, linked (a delta): its space is not this snapshot's. */
  memoryShared?: boolean;
}

export interface VmInfo {
  id: string;
  pid: number;
  dir: string;
  /** "none": not a VM (the local provider's namespaces). */
  accel: Accel | "none";
  memoryMb: number;
  vcpus: number;
  agentVersion: string;
  /** Milliseconds from launch to the agent's hello. */
  bootMs: number;
  /** Resumed from a snapshot rather than booted. */
  restored: boolean;
  /** Its RAM is a file of its own (VmSpec.forkable): snapshots can copy it instead of streaming it. */
  forkable?: boolean;
}

export interface Vm {
  readonly info: VmInfo;
  /** What core asks of the guest: processes, files, TCP, watches (guest.ts). */
  readonly guest: Guest;
  /** The last bytes the guest printed on its serial console. */
  consoleTail(bytes?: number): string;
  /** Resolves when the VMM process has exited, for whatever reason. */
  readonly exited: Promise<void>;
  /** Stops the VM and removes every file it had; safe to call twice. */
  destroy(): Promise<void>;
  /**
   * Lets go of the VM without stopping it, as a server that exits leaves its VMs for the next
   * one to re-attach (features.reattach); this object is unusable afterwards. Requests and
   * streams in flight end with `reason`.
   */
  release(reason?: Error): void;
  /**
   * Snapshots the running VM into `dir` and lets it run on (unless `memory` is "give"); the
   * guest is stopped for the copy. `tees` receive the stream as it is written (RAM in the stream only).
   */
  snapshot(dir: string, opts?: { tees?: Writable[]; disk?: string; memory?: SnapshotMemory }): Promise<CaptureResult>;
  /** Prepares `dir` for a snapshot: links the current disk there and says where it will be. */
  prepareSnapshot(dir: string): Promise<{ disk: string; diskBytes: number } | null>;
  /**
   * Turns a VM spawned with `memoryFile` into a snapshot in `dir` whose RAM is that file, and
   * stops it for good (the RAM file must never change again).
   */
  freeze(dir: string): Promise<CaptureResult>;
  /**
   * Copies the VM's root disk, as it is now, into `dest` as a raw image (its whole backing chain
   * merged); the guest's vCPUs stop for the copy. Null when the VM has no disk.
   */
  copyDisk(dest: string): Promise<{ pauseMs: number } | null>;
  /** Changes the VMM's scheduling niceness (all its threads). */
  setNice(nice: number): Promise<void>;
  /**
   * Connects or cuts the VM's network device (VmSpec.nic) at the VMM, where the guest cannot
   * undo it; absent where the provider cannot.
   */
  setLink?(up: boolean): Promise<void>;
  /**
   * Whether the VMM holds the guest paused because a write to its disk found the host's disk
   * full (QEMU's werror=enospc: the write is retried, and nothing is lost, once it goes on).
   */
  waitingForDisk(): Promise<boolean>;
  /**
   * Lets the guest of a snapshot taken with `memory: "give"` run on, once that snapshot was
   * abandoned before anything used it (its RAM file is its own again). Only VMs that give.
   */
  continueAfterGive?(): Promise<void>;
  /** Lets a guest paused on a full disk go on (its failed write is retried); nothing for one that runs. */
  continueAfterDisk(): Promise<void>;
  /** What the VM costs the host right now (counters since it started); null once it is gone. */
  usage(): Promise<VmUsage | null>;
  /**
   * The guest RAM its balloon leaves it, in bytes; with `bytes`, asks the balloon for that first
   * and resolves once it stops moving (VMs without a balloon do not have this).
   */
  balloon?(bytes?: number): Promise<number>;
}

/** A VM's cost on the host, read from its VMM process. */
export interface VmUsage {
  /** CPU time of every VMM thread, user and system. */
  cpuMs: number;
  rssBytes: number;
  /** Proportional set size: shared pages (a snapshot's RAM mapped by many VMs) counted in shares. */
  pssBytes: number;
  /** Bytes the VMM made the host's block devices read and write. */
  diskReadBytes: number;
  diskWriteBytes: number;
}

export interface ProviderHealth {
  name: string;
  healthy: boolean;
  accel: Accel | null;
  problems: string[];
  details: Record<string, string>;
}

/** What a provider can do beyond booting VMs; core refuses the rest with an error that says so. */
export interface ProviderFeatures {
  /** VMs can be snapshotted, frozen, forked and restored (Vm.snapshot, freeze; VmSpec.restore, memoryFile). */
  snapshots: boolean;
  /** VMs outlive the server process, and a later one can take them over (attach). */
  reattach: boolean;
  /** Volumes (VmSpec.volumes) and live host directories (the agent's share op) can be attached. */
  volumes: boolean;
  /** VMs can boot the image's systemd as init, with the agent as its service (VmSpec.init). */
  init: boolean;
  /** A sandbox's disk can be copied into an image (Vm.copyDisk: commit). */
  commit: boolean;
  /**
   * What keeps a sandbox from the host: "vm" (its own kernel behind a VMM) or "namespaces"
   * (Linux namespaces on the host's kernel: no security boundary).
   */
  isolation: "vm" | "namespaces";
}

/** A VM a previous server process left running, as its sandbox row recorded it. */
export interface AttachSpec {
  id: string;
  pid: number;
  dir: string;
  memoryMb: number;
  vcpus: number;
  helloTimeoutMs?: number;
}

/**
 * A VM backend. Core depends on this interface only; QEMU (providers/qemu) implements it, and
 * every implementation must pass the contract suite in test/provider-contract.ts.
 */
export interface Provider {
  readonly name: string;
  readonly features: ProviderFeatures;
  /** Whether VMs can run here, with what the check found (VMM version, accelerator, confinement). */
  health(): Promise<ProviderHealth>;
  /** Boots a throwaway VM without a disk and pings its agent: true when that worked. */
  probe(): Promise<boolean>;
  /** Most vCPUs one VM may have on this host. */
  maxVcpus(): number;
  /** Most memory (MiB) one VM may have on this host. */
  maxMemoryMb(): number;
  /** Boots a VM, or restores one when `spec.restore` is set. */
  spawn(spec: VmSpec): Promise<Vm>;
  /**
   * Starts the VMM of a restore from snapshot files ahead of demand (its devices made, the
   * state loaded, the guest held): a spawn then pays only for letting it run. Optional.
   */
  prestart?(spec: VmSpec): Promise<PrestartedVm>;
  /** What a snapshot's guest memory depends on (VMM build, accelerator): part of every base snapshot's key. */
  machineKey(): Promise<string>;
  /** Why VMs with a network device (VmSpec.nic) cannot run here, or null when they can. */
  nicProblem(): Promise<string | null>;
  /** Takes over a VM a previous server process left running (features.reattach). */
  attach(spec: AttachSpec): Promise<Vm>;
  /**
   * Removes the VMs on this data directory that no live server owns and `keep` does not name
   * (warm-pool, pool-mode and base-snapshot VMs have no sandbox row); returns their ids.
   */
  sweepOrphans(keep: Set<string>, isLiveServer: (pid: number) => Promise<boolean>): Promise<string[]>;
  /** Destroys every VM this provider started and still tracks. */
  destroyAll(): Promise<void>;
}

/** A VMM started ahead for one restore (Provider.prestart); it holds no guest memory of its own until started. */
export interface PrestartedVm {
  /** The VM id it was started under (its directory's name): the sandbox it becomes keeps it. */
  readonly id: string;
  /** False once its VMM has exited or it was taken. */
  readonly alive: boolean;
  /** Lets the guest run as a new VM, with these spec fields changed (niceness 0 unless given), and returns it once configured. */
  start(change?: Pick<VmSpec, "hostname" | "bootTimeoutMs" | "nice">): Promise<Vm>;
  /** Stops the VMM and removes its files. */
  discard(): Promise<void>;
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

/** The host's disk is full where a VM needs it: QEMU has paused the guest on a write it could not make. */
export class HostDiskFullError extends Error {
  override name = "HostDiskFullError";
}
