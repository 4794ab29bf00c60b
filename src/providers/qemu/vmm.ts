// A QEMU between its start and its guest's first instruction, as the parts that start one pass it on.
import type { ChildProcess } from "node:child_process";
import type { Socket } from "node:net";
import type { AgentChannel } from "../../agent-client/index.js";
import type { ConsoleLog } from "../console-log.js";
import type { VmSpec } from "../provider.js";
import type { VmFiles } from "./args.js";

/** A QEMU that has started, its console attached and its agent's socket connected; no state loaded. */
export interface VmmProcess {
  dir: string;
  files: VmFiles;
  proc: ChildProcess;
  exited: Promise<void>;
  consoleLog: ConsoleLog;
  agentSocket: Socket;
  ownRam: string | undefined;
  /** A snapshot's RAM file it maps privately (linked into its directory). */
  mappedRam: string | undefined;
  started: number;
  qemuLog: () => Promise<string>;
  /** Kills the QEMU and removes everything it had; safe to call twice. */
  cleanup: () => Promise<void>;
}

/** A QEMU with its agent's channel and a restore's state loaded; its guest does not run yet. */
export interface Vmm extends Omit<VmmProcess, "agentSocket"> {
  channel: AgentChannel;
}

/**
 * The file a blank VMM reads its state from (its fd 3, in its directory): the restore copies its
 * stream in before the load. A pipe fed by the server would cost a scheduling round trip per
 * 64 KiB, which on a host busy with other VMs made a resume slower than a start.
 */
export const BLANK_INCOMING = "incoming";

/** What a blank VMM is started with (blank-vmms.ts): the RAM file it maps and its disk's size. */
export interface BlankDisk {
  ramFile: string;
  diskBytes: number;
}

/** VMMs started ahead of the restores they serve (blank-vmms.ts). */
export interface BlankSource {
  /** One ready for this restore, with its disk and state in place; null when none fits. */
  take(spec: VmSpec): Promise<Vmm | null>;
  /** Stops and removes every one not taken, and starts no more. */
  close(): Promise<void>;
}
