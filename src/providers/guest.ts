// What core needs of a sandbox's guest, as typed operations: processes (started, adopted, run to
// the end), files (streamed reads and writes, and the simple requests: stat, list, mkdir, move…),
// TCP (tunnels and listeners), host directories shared in, watches, and the requests on the whole
// guest (metrics, freeze, sync, hold for a pause). Each provider's VM has one (`Vm.guest`): our
// agent's channel (agent-client/channel.ts) carries them as frames to the agent in the guest; a
// Custom HTTP backend's sandbox carries them as that backend's calls (custom-http/custom-guest.ts).
// `supports` names what a guest can do (the features of agent-client/features.ts), so core refuses
// the rest by that name before asking, whatever carries them.
import type { Readable } from "node:stream";
import type {
  AgentChannel,
  BufferedExecResult,
  ConnectRequest,
  DirChange,
  DirWatch,
  ExecRequest,
  ExecSession,
  GuestListener,
  Hello,
  ListenRequest,
  ReadFileStream,
  ReadRequest,
  RequestOptions,
  Share,
  ShareRequest,
  SimpleOps,
  Tunnel,
  WatchRequest,
  WriteRequest,
} from "../agent-client/index.js";

export interface Guest {
  /** False once it closed: its VM gone, let go of, or a guest that broke its protocol. */
  readonly isOpen: boolean;
  /** Why it closed, or null while open. */
  readonly closeReason: Error | null;
  /** Who answers (agent, version) and its features. */
  readonly hello: Promise<Hello>;
  /** Whether it can do `feature` (a name of agent-client/features.ts). */
  supports(feature: string): boolean;
  /** A request answered once (stat, list, mkdir, remove, move, chmod, glob, metrics, freeze, sync…). */
  request<K extends keyof SimpleOps>(req: SimpleOps[K]["req"], opts?: RequestOptions): Promise<SimpleOps[K]["res"]>;
  /** Starts a process; its output arrives as it is produced. */
  exec(req: Omit<ExecRequest, "op">): ExecSession;
  /** Takes over a process a host that went away left running (feature adopt). */
  adopt(target: number, stdin: boolean): ExecSession;
  /** Runs a process to its end, collecting at most maxOutputBytes of each stream. */
  execBuffered(req: Omit<ExecRequest, "op" | "stdin">, opts?: { stdin?: Uint8Array | string; maxOutputBytes?: number }): Promise<BufferedExecResult>;
  /** Writes a file whole, from bytes or a stream of chunks: nothing partial is ever in place. */
  writeFile(path: string, data: Uint8Array | string | AsyncIterable<Uint8Array> | Readable, opts?: Omit<WriteRequest, "op" | "path">): Promise<{ size: number }>;
  /** Streams a file out, its metadata first. */
  readFile(path: string, opts?: Omit<ReadRequest, "op" | "path">): ReadFileStream;
  /** Reads a whole file, refusing one larger than maxBytes. */
  readFileBuffer(path: string, maxBytes?: number, opts?: Omit<ReadRequest, "op" | "path">): Promise<Buffer>;
  /** A TCP tunnel to a guest port, or onto a connection a guest listener accepted (feature tcp). */
  connect(req: Omit<ConnectRequest, "op">): Tunnel;
  /** A host directory mounted at a guest path (feature share). */
  share(req: Omit<ShareRequest, "op">): Share;
  /** Changes under a guest directory as they happen (feature watch). */
  watch(req: Omit<WatchRequest, "op">, onChange: (c: DirChange) => void): DirWatch;
  /** Listens on a guest TCP port (feature listen). */
  listen(req: Omit<ListenRequest, "op">, onAccept: (conn: number) => void): GuestListener;
  /** Holds every stream still while the VM is saved (feature continue-sessions); `unhold` when the save did not happen. */
  hold(): Promise<void>;
  unhold(): Promise<void>;
  /** Fails the file operations in flight (a guest its VMM holds paused on a full disk); returns how many. */
  failFileOps(reason: Error): number;
  /** Closes it; every call in flight fails with `reason`. */
  close(reason?: Error): void;
  /** `close` once it closed, with why. */
  once(event: "close", listener: (reason: Error) => void): unknown;
}

/** Our agent's channel is a guest: this type fails to compile the day it is not. */
export type AgentChannelGuest = IsGuest<AgentChannel>;
type IsGuest<T extends Guest> = T;
