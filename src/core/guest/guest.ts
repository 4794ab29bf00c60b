// What a sandbox's guest offers the helpers that run inside it (code contexts, guest users), and
// the shapes of its exec and file calls: the Sandbox class implements it, and the helpers depend
// on this instead of on the class that holds them.
import type { Readable } from "node:stream";
import type { ExecSession, FileStat } from "../../agent-client/index.js";

export interface ExecOptions {
  env?: Record<string, string>;
  cwd?: string;
  /** User name or numeric uid to run as (default root). */
  user?: string;
  /** Kill the whole process group after this many ms; the exit code is then 124. */
  timeoutMs?: number;
  stdin?: string | Uint8Array;
  /** Keep at most this many bytes of each of stdout and stderr. */
  maxOutputBytes?: number;
}

export interface ExecOutput {
  exitCode: number;
  stdout: string;
  stderr: string;
  timedOut: boolean;
  /** Output beyond maxOutputBytes was dropped. */
  truncated: boolean;
  durationMs: number;
}

export interface ExecDefaults {
  /** The network's variables (the egress proxy's address, the egress CA's files), under everything else. */
  network?: Record<string, string>;
  env?: Record<string, string>;
  cwd?: string;
  user?: string;
  /** Pool mode: the sandbox is this user in a shared VM; every exec and file operation runs as it. */
  tenant?: Tenant;
  /** Secret values every exec gets in its environment (held in memory only). */
  secrets?: Record<string, string>;
}

export interface Tenant {
  uid: number;
  gid: number;
  user: string;
  home: string;
}

/** The filesystem identity a file operation runs with (default: root, or the tenant's own). */
export interface FileIdentity {
  uid: number;
  gid: number;
}

/** Options of a streamed exec: stdin as a stream, a PTY, and `background` (it does not keep the sandbox busy). */
export type StreamExecOptions = Omit<ExecOptions, "stdin" | "maxOutputBytes"> & {
  stdin?: boolean;
  pty?: { rows: number; cols: number };
  background?: boolean;
  /** What the guest keeps about the process for a server that takes it over later (adopt.ts). */
  note?: string;
};

/** The guest operations of one running sandbox that helpers inside it use. */
export interface Guest {
  readonly id: string;
  exec(command: string | string[], opts?: ExecOptions): Promise<ExecOutput>;
  execStream(command: string | string[], opts?: StreamExecOptions): ExecSession;
  writeFile(path: string, data: string | Uint8Array | AsyncIterable<Uint8Array> | Readable, opts?: { mode?: number; as?: FileIdentity }): Promise<{ size: number }>;
  readFile(path: string, maxBytes?: number, as?: FileIdentity): Promise<Buffer>;
  stat(path: string, as?: FileIdentity): Promise<FileStat>;
  mkdir(path: string, mode?: number, as?: FileIdentity): Promise<void>;
  /** The shell commands and terminals run in: /bin/bash where the image has it, else /bin/sh (looked up once). */
  shell(): Promise<string>;
  /** Marks work in flight (the sandbox does not idle meanwhile); returns its end. */
  busy(): () => void;
  /** Marks a client following the sandbox (it does not idle meanwhile, but a follower wakes no pause); returns its end. */
  follow(): () => void;
}
