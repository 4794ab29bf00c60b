// A sandbox on a ForgeVM server: commands, files, lifetime. Obtained from Client.spawn or get.
import type { Transport } from "./http.js";
import { contextId, runCode } from "./code.js";
import { Desktop } from "./desktop.js";
import { durationMs, durationString } from "./durations.js";
import { ExecStream } from "./stream.js";
import type {
  CommitOptions,
  CommitResult,
  ArchiveResult,
  CodeContext,
  EgressEntry,
  Execution,
  ExecOptions,
  RunCodeOptions,
  ExecResult,
  FileInfo,
  NetworkInfo,
  EgressRules,
  NetworkUpdate,
  PortMapping,
  ProcessInfo,
  SandboxInfo,
  SandboxState,
  SnapshotInfo,
} from "./types.js";

/** How long an exec may take over HTTP beyond the command's own timeout. */
const EXEC_SLACK_MS = 15_000;

function base64(b: Uint8Array): string {
  let s = "";
  for (let i = 0; i < b.length; i += 0x8000) s += String.fromCharCode(...b.subarray(i, i + 0x8000));
  return btoa(s);
}

export class Sandbox implements AsyncDisposable {
  private _info: SandboxInfo;
  /** Its desktop, for a sandbox of the desktop image: screenshots, mouse, keyboard, windows, the live view. */
  readonly desktop: Desktop;

  /** @internal use Client.spawn or Client.get */
  constructor(
    private readonly http: Transport,
    info: SandboxInfo,
  ) {
    this._info = info;
    this.desktop = new Desktop(http, info.id);
  }

  get id(): string {
    return this._info.id;
  }
  get state(): SandboxState {
    return this._info.state;
  }
  get image(): string {
    return this._info.image;
  }
  get provider(): string {
    return this._info.provider;
  }
  get memoryMb(): number {
    return this._info.memory_mb;
  }
  get vcpus(): number {
    return this._info.vcpus;
  }
  /** When it expires; null when it lives until it is destroyed. */
  get expiresAt(): Date | null {
    return this._info.expires_at === null ? null : new Date(this._info.expires_at);
  }
  /** The sandbox as the server last described it. */
  get info(): SandboxInfo {
    return { ...this._info };
  }

  private path(suffix = ""): string {
    return `/sandboxes/${encodeURIComponent(this.id)}${suffix}`;
  }

  private execBody(command: string, opts: ExecOptions, stream: boolean) {
    const bytes = opts.stdin instanceof Uint8Array;
    const stdin = bytes ? base64(opts.stdin as Uint8Array) : (opts.stdin as string | undefined);
    return {
      command,
      args: opts.args,
      env: opts.env,
      workdir: opts.workdir,
      timeout: durationString(opts.timeout),
      user: opts.user,
      stdin,
      stdin_encoding: bytes ? "base64" : undefined,
      stream: stream || undefined,
    };
  }

  /** Runs a command under /bin/sh -c and waits for it; a non-zero exit is a result, not an error. */
  async exec(command: string, opts: ExecOptions = {}): Promise<ExecResult> {
    const limit = durationMs(opts.timeout);
    const timeoutMs = limit === undefined ? null : Math.max(this.http.timeoutMs, limit + EXEC_SLACK_MS);
    return this.http.json<ExecResult>("POST", this.path("/exec"), { body: this.execBody(command, opts, false), timeoutMs, sandboxId: this.id });
  }

  /**
   * Runs a command and yields its output as it is produced. After the loop, `exitCode` of the
   * returned stream holds the command's exit code (also: `await stream.done`).
   */
  execStream(command: string, opts: ExecOptions = {}): ExecStream {
    return new ExecStream(() => this.http.send("POST", this.path("/exec"), { body: this.execBody(command, opts, true), timeoutMs: null, sandboxId: this.id }));
  }

  /**
   * The processes the sandbox keeps track of: its main process, E2B's commands and terminals,
   * and every process a server that went away left running (`adopted`), plain execs included.
   */
  trackedProcesses(): Promise<ProcessInfo[]> {
    return this.http.json<ProcessInfo[]>("GET", this.path("/processes"), { sandboxId: this.id });
  }

  /**
   * Follows a tracked process again by its pid (an exec stream's `pid`): what it wrote while
   * nobody listened first, then its output as it comes; `exitCode` once it ends. Leaving the loop
   * leaves the process running.
   */
  followProcess(pid: number): ExecStream {
    return new ExecStream(() => this.http.send("GET", this.path(`/processes/${pid}/output`), { timeoutMs: null, sandboxId: this.id }));
  }

  /** Sends a signal ("SIGTERM", "HUP", 9; default SIGKILL) to a tracked process. */
  async killProcess(pid: number, signal: string | number = "SIGKILL"): Promise<number> {
    return (await this.http.json<{ signal: number }>("POST", this.path(`/processes/${pid}/kill`), { body: { signal }, sandboxId: this.id })).signal;
  }

  /**
   * Runs code in a stateful context: variables, imports and the working directory persist between
   * runs (Python by default; `language` or `context` choose another). The last expression's value
   * is a result, charts too; an exception is `error`, not a throw. Callbacks get output as it comes.
   */
  runCode(code: string, opts: RunCodeOptions = {}): Promise<Execution> {
    return runCode(this.http, this.id, this.path(), code, opts);
  }

  /** Starts a new code context (python by default) in `cwd`, running as `user`. */
  createCodeContext(opts: { language?: string; cwd?: string; user?: string } = {}): Promise<CodeContext> {
    return this.http.json<CodeContext>("POST", this.path("/code/contexts"), { body: opts, sandboxId: this.id, timeoutMs: Math.max(this.http.timeoutMs, 60_000) });
  }

  listCodeContexts(): Promise<CodeContext[]> {
    return this.http.json<CodeContext[]>("GET", this.path("/code/contexts"), { sandboxId: this.id });
  }

  /** Restarts a context: same id, fresh state. */
  restartCodeContext(context: string | CodeContext): Promise<CodeContext> {
    return this.http.json<CodeContext>("POST", this.path(`/code/contexts/${encodeURIComponent(contextId(context))}/restart`), {
      sandboxId: this.id,
      timeoutMs: Math.max(this.http.timeoutMs, 60_000),
    });
  }

  async deleteCodeContext(context: string | CodeContext): Promise<void> {
    await this.http.send("DELETE", this.path(`/code/contexts/${encodeURIComponent(contextId(context))}`), { sandboxId: this.id });
  }

  /** Writes a file (text, or bytes as they are), creating parent directories; `mode` like "0755". */
  async writeFile(path: string, content: string | Uint8Array, mode?: string): Promise<void> {
    if (typeof content === "string") {
      await this.http.send("POST", this.path("/files"), { body: { path, content, mode }, sandboxId: this.id, timeoutMs: null });
    } else {
      await this.http.send("POST", this.path("/files"), { raw: content, query: { path, mode }, sandboxId: this.id, timeoutMs: null });
    }
  }

  /** Reads a file as UTF-8 text, or as bytes with `{ binary: true }`. */
  readFile(path: string): Promise<string>;
  readFile(path: string, opts: { binary: true }): Promise<Uint8Array>;
  async readFile(path: string, opts: { binary?: boolean } = {}): Promise<string | Uint8Array> {
    const res = await this.http.send("GET", this.path("/files"), { query: { path }, sandboxId: this.id, timeoutMs: null });
    return opts.binary ? new Uint8Array(await res.arrayBuffer()) : res.text();
  }

  /** Reads a file as bytes. */
  readFileBytes(path: string): Promise<Uint8Array> {
    return this.readFile(path, { binary: true });
  }

  /** Makes a new image `image` (NAME[:TAG]) from this sandbox's disk: one layer on top of its image. */
  commit(image: string, opts: CommitOptions = {}): Promise<CommitResult> {
    return this.http.json("POST", this.path("/commit"), { body: { image, ...opts }, sandboxId: this.id, timeoutMs: null });
  }

  /** A file or directory tree as a tar stream (entries named from the path's last component; modes and links kept). */
  async downloadArchive(path: string): Promise<ReadableStream<Uint8Array>> {
    const res = await this.http.send("GET", this.path("/archive"), { query: { path }, sandboxId: this.id, timeoutMs: null });
    if (!res.body) throw new TypeError("the server sent no archive body");
    return res.body;
  }

  /** Extracts a tar archive (bytes or a stream) into a directory, creating it if missing. */
  async uploadArchive(path: string, tar: Uint8Array | ReadableStream<Uint8Array> | AsyncIterable<Uint8Array>): Promise<ArchiveResult> {
    return this.http.json<ArchiveResult>("PUT", this.path("/archive"), {
      raw: tar,
      contentType: "application/x-tar",
      query: { path },
      sandboxId: this.id,
      timeoutMs: null,
    });
  }

  async listFiles(path = "/"): Promise<FileInfo[]> {
    return this.http.json<FileInfo[]>("GET", this.path("/files/list"), { query: { path }, sandboxId: this.id });
  }

  async statFile(path: string): Promise<FileInfo> {
    return this.http.json<FileInfo>("GET", this.path("/files/stat"), { query: { path }, sandboxId: this.id });
  }

  async globFiles(pattern: string): Promise<string[]> {
    return this.http.json<string[]>("GET", this.path("/files/glob"), { query: { pattern }, sandboxId: this.id });
  }

  async moveFile(oldPath: string, newPath: string): Promise<void> {
    await this.http.send("POST", this.path("/files/move"), { body: { old_path: oldPath, new_path: newPath }, sandboxId: this.id });
  }

  /** Sets permission bits, given in octal like "755". */
  /** Changes a file's permissions: an octal string ("755") or a number (0o755). */
  async chmodFile(path: string, mode: string | number): Promise<void> {
    const octal = typeof mode === "number" ? mode.toString(8) : mode;
    await this.http.send("POST", this.path("/files/chmod"), { body: { path, mode: octal }, sandboxId: this.id });
  }

  async deleteFile(path: string, recursive = false): Promise<void> {
    await this.http.send("DELETE", this.path("/files"), { query: { path, recursive: recursive ? "true" : undefined }, sandboxId: this.id });
  }

  /** Sets the expiry to `ttl` from now (e.g. "30m"); resolves with the sandbox, its new expiry in `expiresAt`. */
  async extendTtl(ttl = "30m"): Promise<Sandbox> {
    this._info = await this.http.json<SandboxInfo>("POST", this.path("/extend"), { body: { ttl }, sandboxId: this.id });
    return this;
  }

  /** The sandbox's network mode, allowlist and published ports. */
  async network(): Promise<NetworkInfo> {
    return this.http.json<NetworkInfo>("GET", this.path("/network"), { sandboxId: this.id });
  }

  /** Replaces the egress allowlist; the sandbox's next request is decided by the new one. */
  async setAllowlist(allow: string[]): Promise<NetworkInfo> {
    return this.http.json<NetworkInfo>("PUT", this.path("/network/allow"), { body: { allow }, sandboxId: this.id });
  }

  /**
   * Changes the running sandbox's egress; a field left out is kept, null clears it. `mode` "none"
   * or "allowlist" for any sandbox ("full" only for one made with it); `deny: []` opens egress but
   * for the listed ranges.
   */
  async updateNetwork(change: NetworkUpdate): Promise<NetworkInfo> {
    return this.http.json<NetworkInfo>("PUT", this.path("/network"), { body: change, sandboxId: this.id });
  }

  /** Replaces the egress rules (headers the proxy adds per destination, secrets by placeholder); `{}` clears them. */
  async setEgressRules(rules: EgressRules): Promise<NetworkInfo> {
    return this.http.json<NetworkInfo>("PUT", this.path("/network/rules"), { body: { egress_rules: rules }, sandboxId: this.id });
  }

  /** The latest egress decisions (allowed and refused requests), oldest first. */
  async egress(lines = 100): Promise<EgressEntry[]> {
    return this.http.json<EgressEntry[]>("GET", this.path(`/egress?lines=${lines}`), { sandboxId: this.id });
  }

  /** Publishes a guest port on the host ("8080:80"; host port 0 picks a free one). */
  async publishPort(spec: string): Promise<PortMapping> {
    return this.http.json<PortMapping>("POST", this.path("/ports"), { body: { port: spec }, sandboxId: this.id });
  }

  /** Stops publishing a host port. */
  async unpublishPort(hostPort: number): Promise<void> {
    await this.http.json("DELETE", this.path(`/ports/${hostPort}`), { sandboxId: this.id });
  }

  /** Running copies of this sandbox as it is now (memory, processes, disk), each with its own identity. */
  async fork(opts: { count?: number; ttl?: string; forkable?: boolean } = {}): Promise<Sandbox[]> {
    const r = await this.http.json<{ sandboxes: SandboxInfo[] }>("POST", this.path("/fork"), { body: opts, sandboxId: this.id, timeoutMs: null });
    return r.sandboxes.map((s) => new Sandbox(this.http, s));
  }

  /** Snapshots this sandbox (it keeps running); restore it with Client.restore. */
  async snapshot(name?: string): Promise<SnapshotInfo> {
    return this.http.json<SnapshotInfo>("POST", this.path("/snapshot"), { body: name ? { name } : {}, sandboxId: this.id, timeoutMs: null });
  }

  /** Pauses it: memory, processes and streams kept, no VM held; any later call resumes it first. */
  async pause(opts: { memory?: boolean } = {}): Promise<Sandbox> {
    this._info = await this.http.json<SandboxInfo>("POST", this.path("/pause"), { body: opts, sandboxId: this.id, timeoutMs: null });
    return this;
  }

  /** Resumes it as it was (`ttl`: its life from now; default what it had left). */
  async resume(opts: { ttl?: string } = {}): Promise<Sandbox> {
    this._info = await this.http.json<SandboxInfo>("POST", this.path("/resume"), { body: opts, sandboxId: this.id, timeoutMs: null });
    return this;
  }

  /** Fetches the sandbox's current state from the server. */
  async refresh(): Promise<Sandbox> {
    this._info = await this.http.json<SandboxInfo>("GET", this.path(), { sandboxId: this.id });
    return this;
  }

  /** Destroys the sandbox; calling it again is harmless. */
  async destroy(): Promise<void> {
    await this.http.send("DELETE", this.path(), { sandboxId: this.id });
    this._info = { ...this._info, state: "destroyed" };
  }

  /** `await using sb = await client.spawn()` destroys it at the end of the block. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.destroy();
  }

  toString(): string {
    return `Sandbox(${this.id}, ${this.state})`;
  }

  toJSON(): SandboxInfo {
    return this.info;
  }
}
