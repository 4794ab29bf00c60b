// One definition per wire message of the guest protocol. Field names match agent/src/*.c.

export const PROTOCOL_VERSION = 1;

export interface Hello {
  ok: true;
  proto: number;
  agent: string;
  pid: number;
  features: string[];
  /** Echo of the host's HELLO nonce when the host introduced itself. */
  nonce?: string;
  /** The guest carried every stream over to a host that asked to continue (feature continue-sessions). */
  continued?: boolean;
  /** Processes a host that went away left running, waiting for `procs` and `adopt` (feature adopt); absent when none. */
  detached?: number;
}

export interface ExecRequest {
  op: "exec";
  /** Program and arguments; when absent, `cmd` runs under /bin/sh -c. */
  argv?: string[];
  cmd?: string;
  env?: Record<string, string>;
  cwd?: string;
  /** User name or numeric uid (as a string) to run as. */
  user?: string;
  uid?: number;
  /** Whether the host will stream stdin; otherwise stdin is /dev/null. */
  stdin?: boolean;
  /** Kill the process group after this many ms and report exit code 124. */
  timeout_ms?: number;
  /** File creation mask of the process (default: the agent's, 022). */
  umask?: number;
  pty?: { rows: number; cols: number };
  /** The host's words about the process (at most 8 KiB), given back by `procs` when a later host finds it detached (feature adopt). */
  note?: string;
}

/** A process that a host that went away left running (or that ended since), as `procs` lists it. */
export interface DetachedProcess {
  /** What `adopt` names it by (the agent's own id, not the pid: a pid may be reused once it ended). */
  id: number;
  pid: number;
  running: boolean;
  /** How it ended, once it has. */
  exit_code?: number;
  signal?: number;
  timed_out?: boolean;
  pty: boolean;
  /** Its stdin is still open: the adopting host can write to it. */
  stdin: boolean;
  /** Bytes of output kept for the adopter, and bytes it wrote that were not kept. */
  kept: number;
  lost: number;
  /** The start of its command line. */
  cmd?: string;
  note?: string;
}

export interface ExecResult {
  ok: true;
  exit_code: number;
  timed_out: boolean;
  signal?: number;
}

export interface ExecStarted {
  event: "started";
  pid: number;
  /** An adopted process (feature adopt): its output so far follows, less `lost` bytes it wrote while no host held it. */
  adopted?: boolean;
  lost?: number;
}

/**
 * Filesystem identity a file operation runs with (default root): the kernel then checks it the
 * way it would that user's own programs.
 */
export interface AsUser {
  as_uid?: number;
  as_gid?: number;
}

export interface WriteRequest extends AsUser {
  op: "write";
  path: string;
  mode?: number;
  uid?: number;
  gid?: number;
  parents?: boolean;
}

export interface ReadRequest extends AsUser {
  op: "read";
  path: string;
  offset?: number;
  length?: number;
}

export type FileType = "file" | "dir" | "symlink" | "fifo" | "socket" | "chardev" | "blockdev" | "other";

export interface FileStat {
  type: FileType;
  size: number;
  mode: number;
  uid: number;
  gid: number;
  mtime_ms: number;
  target?: string;
  /** Inode identity and change time ("sec.nsec"), from agents with the "commit" feature. */
  ino?: number;
  nlink?: number;
  dev?: number;
  ctime?: string;
  /** Device numbers of a character or block device. */
  rdev_major?: number;
  rdev_minor?: number;
}

export interface DirEntry extends FileStat {
  name: string;
}

export interface Metrics {
  cpu: {
    user: number;
    nice: number;
    system: number;
    idle: number;
    iowait: number;
    irq: number;
    softirq: number;
    steal: number;
    count: number;
    ticks_per_second: number;
    load: [number, number, number];
  };
  memory: { total: number; free: number; available: number };
  disk: { total: number; free: number; used: number };
  processes: number;
  uptime_s: number;
  /** Bytes through every interface but loopback (older agents leave it out). */
  net?: { rx_bytes: number; tx_bytes: number };
  /** Bytes read and written on the guest's virtio disks (older agents leave it out). */
  io?: { read_bytes: number; write_bytes: number };
}

export interface ConfigureRequest {
  op: "configure";
  hostname?: string;
  time_ms?: number;
  seed_hex?: string;
  /** 32 hex digits written to /etc/machine-id. */
  machine_id?: string;
  /** Limit of the cgroup every exec'd process lives in: tasks at most. */
  pids_max?: number;
  /** ... and memory: all of the guest's but this many MiB. */
  memory_reserve_mb?: number;
  /** Configure the guest's network device (feature `nic`). */
  net?: { addr: string; netmask: string; gateway: string; dns: string };
}

/** Asks the guest to listen on one of its own TCP ports (IPv4 literal, default 127.0.0.1). */
export interface ListenRequest {
  op: "listen";
  addr?: string;
  port?: number;
  /** A unix socket to listen on instead (feature unix-listen), with its mode and owner. */
  path?: string;
  mode?: number;
  uid?: number;
  gid?: number;
}

/**
 * Opens a TCP tunnel: to a port inside the guest (`addr`/`port`), or onto a connection a
 * listener accepted (`conn`, from its `accept` event). DATA channel 0 carries host → guest
 * bytes, channel 1 guest → host; EOF on either is a half-close.
 */
export interface ConnectRequest {
  op: "connect";
  addr?: string;
  port?: number;
  conn?: number;
}

/** Watches a directory (and, with `recursive`, the ones below it) for changes. */
/** A FUSE mount at `path` whose requests come to the host (feature "host-dirs"). */
export interface ShareRequest {
  op: "share";
  path: string;
  readonly?: boolean;
}

export interface WatchRequest extends AsUser {
  op: "watch";
  path: string;
  recursive?: boolean;
}

/** A change under a watched directory; `name` is relative to it. */
export interface DirChange {
  name: string;
  op: "create" | "write" | "remove" | "rename" | "chmod";
}

/** Notices of a watch stream: the watch is in place, then one per change. */
export type WatchEvent = { event: "watching" } | ({ event: "fs" } & DirChange);

/** Intermediate notices of listen and connect streams. */
export type TcpEvent = { event: "listening" } | { event: "accept"; conn: number } | { event: "connected" };

/** Simple request/response operations and their replies. */
export interface SimpleOps {
  hello: { req: { op: "hello" }; res: Hello };
  ping: { req: { op: "ping" }; res: { ok: true } };
  stat: { req: { op: "stat"; path: string } & AsUser; res: { ok: true } & FileStat };
  list: { req: { op: "list"; path: string; offset?: number } & AsUser; res: { ok: true; entries: DirEntry[]; truncated: boolean } };
  /** With `uid`/`gid` (feature owned-dirs), each directory it makes is given to that user. */
  mkdir: { req: { op: "mkdir"; path: string; mode?: number; parents?: boolean; uid?: number; gid?: number } & AsUser; res: { ok: true } };
  remove: { req: { op: "remove"; path: string; recursive?: boolean } & AsUser; res: { ok: true } };
  move: { req: { op: "move"; from: string; to: string; overwrite?: boolean } & AsUser; res: { ok: true } };
  chmod: { req: { op: "chmod"; path: string; mode: number } & AsUser; res: { ok: true } };
  symlink: { req: { op: "symlink"; path: string; target: string } & AsUser; res: { ok: true } };
  sync: { req: { op: "sync" }; res: { ok: true } };
  freeze: { req: { op: "freeze"; on: boolean }; res: { ok: true } };
  hold: { req: { op: "hold"; on?: boolean }; res: { ok: true } };
  /** Drops the guest's clean page cache and compacts free memory, for free page reporting to give back; `free_kib` is what is free after. */
  reclaim: { req: { op: "reclaim"; drop_caches?: boolean; compact?: boolean }; res: { ok: true; free_kib: number } };
  mount: { req: { op: "mount"; serial: string; path: string; readonly: boolean }; res: { ok: true } };
  glob: { req: { op: "glob"; pattern: string } & AsUser; res: { ok: true; matches: string[]; truncated: boolean } };
  metrics: { req: { op: "metrics" }; res: { ok: true } & Metrics };
  configure: { req: ConfigureRequest; res: { ok: true } };
  signal: { req: { op: "signal"; target: number; signal: number; group?: boolean }; res: { ok: true } };
  resize: { req: { op: "resize"; target: number; rows: number; cols: number }; res: { ok: true } };
  shutdown: { req: { op: "shutdown" }; res: { ok: true } };
  /** Ends every process of the sandbox (its cgroup's, execs' own included; feature killall). */
  killall: { req: { op: "killall" }; res: { ok: true } };
  /** The processes a host that went away left running (feature adopt). */
  procs: { req: { op: "procs" }; res: { ok: true; procs: DetachedProcess[]; truncated?: boolean } };
  /**
   * Ends a tunnel, listener or watch at once (its own stream then replies `{closed: true}`); with
   * `transfer`, a read or write instead (it replies ECANCELED, and a write leaves no file).
   */
  close: { req: { op: "close"; target: number; transfer?: true }; res: { ok: true } };
}

export interface ErrorReply {
  ok: false;
  error: { code: string; message: string };
}
