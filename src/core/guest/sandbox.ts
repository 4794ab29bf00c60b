// A running sandbox: one VM plus the operations every interface offers on it. The REST API,
// CLI and SDKs all call these, so behaviour is the same everywhere.
import type { Readable } from "node:stream";
import type { DirChange, DirEntry, DirWatch, ExecSession, FileStat, Metrics, SimpleOps } from "../../agent-client/index.js";
import type { Vm } from "../../providers/provider.js";
import { badRequest } from "../../http/errors.js";
import { checkEnv } from "../../schemas/checks.js";
import type { Emit } from "../events.js";
import { CodeContexts } from "./code/contexts.js";
import { GuestUsers, type GuestUser } from "./guest-users.js";
import { installMcpGateway } from "./mcp-gateway.js";
import { ShellSessions } from "./shell-sessions.js";
import { ProcessTable, type ProcessListener, type ProcessSpec, type TrackedProcess } from "./processes.js";
import { adoptDetached, noteOf } from "./adopt.js";
import { Activity } from "./activity.js";
import { openRead, type OpenedRead } from "./file-read.js";
import type { ExecDefaults, ExecOptions, ExecOutput, FileIdentity, Guest, StreamExecOptions, Tenant } from "./guest.js";

export type { ExecDefaults, ExecOptions, ExecOutput, FileIdentity, Tenant } from "./guest.js";
export type { GuestUser };

export class Sandbox extends Activity implements Guest {
  /** The guest's user accounts (guest-users.ts). */
  private readonly users = new GuestUsers(this);
  /** Processes that outlive the call that started them (see processes.ts); a client attached to one follows it. */
  readonly processes = new ProcessTable(() => this.follow());
  /** Shell sessions: a long-lived shell each, commands run in order in it (shell-sessions.ts). */
  readonly shells = new ShellSessions(this);
  /** Code contexts: stateful Python, JavaScript and bash runtimes (code/contexts.ts). */
  readonly code = new CodeContexts(this, async (user) => {
    if (user) return (await this.guestUser(user))?.home ?? "/";
    return this.workDir();
  });

  constructor(
    readonly id: string,
    readonly image: string,
    /** Its VM: another one after a resume (`rebind`), with the same agent channel. */
    public vm: Vm,
    private readonly onDestroy: (sb: Sandbox) => Promise<void>,
    private readonly emit: Emit = () => {},
    /** What every exec gets unless it says otherwise: the image's and sandbox's env, the image's working directory. */
    private readonly defaults: ExecDefaults = {},
  ) {
    super();
  }

  /** Replaces the network's variables every later exec gets under its own (its egress changed while it runs). */
  setNetworkEnv(env: Record<string, string>): void {
    this.defaults.network = env;
  }

  private envFor(env?: Record<string, string>): Record<string, string> | undefined {
    const t = this.defaults.tenant;
    const own = t ? { HOME: t.home, USER: t.user, LOGNAME: t.user } : undefined;
    const { secrets, network } = this.defaults;
    const net = network && Object.keys(network).length ? network : undefined;
    return net || this.defaults.env || env || own || secrets ? { ...net, ...this.defaults.env, ...secrets, ...own, ...env } : undefined;
  }

  /** Who an exec runs as: a tenant only ever as itself (and with a private umask). */
  private runAs(user?: string): { user?: string; umask?: number } {
    const t = this.defaults.tenant;
    if (!t) return { user: user ?? this.defaults.user };
    if (user !== undefined && user !== t.user && user !== String(t.uid)) throw badRequest(`user: sandbox ${this.id} shares its VM and runs only as its own user ${t.user}`);
    return { user: t.user, umask: 0o077 };
  }

  /** Runs on the VM restored from this sandbox's pause, which carried its channel over. */
  rebind(vm: Vm): void {
    if (vm.guest !== this.vm.guest) throw new Error(`sandbox ${this.id}: a resumed VM must carry the channel over`);
    this.vm = vm;
    this.touch();
  }

  /** Runs `work` counted as work in flight. */
  private async during<T>(work: () => Promise<T>): Promise<T> {
    const end = this.busy();
    try {
      return await work();
    } finally {
      end();
    }
  }

  /** A file operation's request, counted as work in flight. */
  private fileOp<K extends keyof SimpleOps>(req: SimpleOps[K]["req"]): Promise<SimpleOps[K]["res"]> {
    return this.during(() => this.vm.guest.request<K>(req));
  }

  /** The filesystem identity of file operations (every file call goes through it, so it marks use too). */
  private fsId(as?: FileIdentity): { as_uid?: number; as_gid?: number } {
    this.touch();
    const t = this.defaults.tenant ?? as;
    return t ? { as_uid: t.uid, as_gid: t.gid } : {};
  }

  /** The agent's exec request (the channel refuses one too large for a message to the guest). */
  private execRequest(command: string | string[], opts: Omit<ExecOptions, "stdin">) {
    this.touch();
    checkEnv(opts.env, "env");
    const req = {
      ...(Array.isArray(command) ? { argv: command } : { cmd: command }),
      env: this.envFor(opts.env),
      cwd: opts.cwd ?? this.defaults.cwd,
      ...this.runAs(opts.user),
      timeout_ms: opts.timeoutMs,
    };
    return req;
  }

  /** Runs a command (a shell string, or argv without a shell) and waits for it. */
  /**
   * Runs a check the server makes on its own (a HEALTHCHECK): not a use of the sandbox, so no
   * idle timer is put off by it and no event tells of it. Output is stdout then stderr.
   */
  async probe(argv: string[], opts: { user?: string; timeoutMs: number; maxOutputBytes: number }): Promise<{ exitCode: number; output: string; timedOut: boolean }> {
    const req = { argv, env: this.envFor(undefined), cwd: this.defaults.cwd, ...this.runAs(opts.user), timeout_ms: opts.timeoutMs };
    const r = await this.vm.guest.execBuffered(req, { maxOutputBytes: opts.maxOutputBytes });
    return { exitCode: r.exit_code, output: Buffer.concat([r.stdout, r.stderr]).toString("utf8"), timedOut: r.timed_out };
  }

  async exec(command: string | string[], opts: ExecOptions = {}): Promise<ExecOutput> {
    const t0 = performance.now();
    const req = this.execRequest(command, opts);
    this.emit("exec.started", this.id, { command });
    const r = await this.during(() => this.vm.guest.execBuffered(req, { stdin: opts.stdin, maxOutputBytes: opts.maxOutputBytes }));
    this.emit("exec.finished", this.id, { exit_code: r.exit_code, timed_out: r.timed_out });
    return {
      exitCode: r.exit_code,
      stdout: r.stdout.toString("utf8"),
      stderr: r.stderr.toString("utf8"),
      timedOut: r.timed_out,
      truncated: r.truncated,
      durationMs: Math.round(performance.now() - t0),
    };
  }

  /**
   * Starts a command whose output streams as it is produced (consume stdout and stderr). It is
   * work in flight until it ends, unless `background` (a process nobody waits on: a main
   * process, a runtime, a tracked process, whose attached clients count instead).
   */
  execStream(command: string | string[], opts: StreamExecOptions = {}): ExecSession {
    const { background, note, ...rest } = opts;
    const req = { ...this.execRequest(command, rest), stdin: rest.stdin, pty: rest.pty, ...(note !== undefined ? { note } : {}) };
    this.emit("exec.started", this.id, { command, stream: true });
    const end = background ? () => {} : this.busy();
    const s = this.vm.guest.exec(req);
    s.result.then(
      (r) => {
        end();
        this.emit("exec.finished", this.id, { exit_code: r.exit_code, timed_out: r.timed_out });
      },
      () => end(),
    );
    return s;
  }

  /** Writes a file atomically, creating parent directories. */
  /**
   * Writes a file atomically, creating parent directories; as `as` (the kernel checks that user's
   * permissions), or with `owner` as root, the file and the directories it makes given to that
   * user (E2B's envd writes so: a user's upload may go where only root may write).
   */
  async writeFile(path: string, data: string | Uint8Array | AsyncIterable<Uint8Array> | Readable, opts: { mode?: number; as?: FileIdentity; owner?: FileIdentity } = {}) {
    const { as, owner, ...rest } = opts;
    const identity = owner && !this.defaults.tenant ? { uid: owner.uid, gid: owner.gid } : this.fsId(as);
    const r = await this.during(() => this.vm.guest.writeFile(path, data, { ...rest, ...identity }));
    this.emit("file.written", this.id, { path, size: r.size });
    return r;
  }

  /** Reads a whole file (refusing files larger than maxBytes). */
  readFile(path: string, maxBytes?: number, as?: FileIdentity): Promise<Buffer> {
    return this.during(() => this.vm.guest.readFileBuffer(path, maxBytes, this.fsId(as)));
  }

  /** Reads at most `length` bytes from `offset`, with the file's metadata (its whole size included). */
  async readFileRange(path: string, offset: number, length: number, as?: FileIdentity): Promise<{ data: Buffer; stat: FileStat }> {
    return this.during(async () => {
      const r = this.vm.guest.readFile(path, { offset, length, ...this.fsId(as) });
      await Promise.race([r.stat, r.done]); // a refused read fails here, before any byte
      const parts: Buffer[] = [];
      for await (const c of r.stream as AsyncIterable<Buffer>) parts.push(c);
      await r.done;
      return { data: Buffer.concat(parts), stat: await r.stat };
    });
  }

  /** Streams a file out of the guest (work in flight until it ends); destroying the stream ends the read in the guest. */
  readFileStream(path: string, as?: FileIdentity) {
    const end = this.busy();
    const r = this.vm.guest.readFile(path, this.fsId(as));
    r.done.then(end, end);
    r.stream.once("close", end);
    return r;
  }

  /** A file opened for a download (file-read.ts): the one way every interface streams a file out. */
  openRead(path: string, as?: FileIdentity): Promise<OpenedRead> {
    return openRead(this.readFileStream(path, as), path);
  }

  async listFiles(path: string, as?: FileIdentity): Promise<DirEntry[]> {
    return (await this.fileOp<"list">({ op: "list", path, ...this.fsId(as) })).entries;
  }

  /** Lists every entry of a directory, page by page past the agent's limit per reply. */
  async listAllFiles(path: string, as?: FileIdentity): Promise<DirEntry[]> {
    const all: DirEntry[] = [];
    for (;;) {
      const r = await this.fileOp<"list">({ op: "list", path, offset: all.length || undefined, ...this.fsId(as) });
      all.push(...r.entries);
      if (!r.truncated || !r.entries.length) return all;
    }
  }

  /** The pool-mode user this sandbox is, when it shares a VM with others. */
  get tenant(): Tenant | undefined {
    return this.defaults.tenant;
  }

  /** Stops (true) or resumes (false) every process in the guest but its agent; stopping also flushes the filesystems. */
  async freeze(on: boolean): Promise<void> {
    await this.vm.guest.request<"freeze">({ op: "freeze", on });
  }

  /** Copies the root disk as it is now into `dest` (raw); null when the VM has none. */
  copyDisk(dest: string): Promise<{ pauseMs: number } | null> {
    return this.vm.copyDisk(dest);
  }

  /** Flushes the guest's filesystems to its disk. */
  async sync(): Promise<void> {
    await this.vm.guest.request<"sync">({ op: "sync" });
  }

  /** Creates a symbolic link at `path` pointing to `target`. */
  async symlink(path: string, target: string, as?: FileIdentity): Promise<void> {
    await this.fileOp<"symlink">({ op: "symlink", path, target, ...this.fsId(as) });
  }

  async stat(path: string, as?: FileIdentity): Promise<FileStat> {
    const { ok: _ok, ...st } = await this.fileOp<"stat">({ op: "stat", path, ...this.fsId(as) });
    return st;
  }

  async mkdir(path: string, mode?: number, as?: FileIdentity): Promise<void> {
    await this.fileOp<"mkdir">({ op: "mkdir", path, mode, parents: true, ...this.fsId(as) });
  }

  /**
   * Makes a directory and its parents as root, each one it makes given to `owner`, as E2B's envd
   * does (`/workspace` for the default user); an agent without the feature makes them as that user.
   */
  async mkdirFor(path: string, owner: FileIdentity, mode = 0o755): Promise<void> {
    if (this.defaults.tenant || !this.vm.guest.supports("owned-dirs")) return this.mkdir(path, mode, owner);
    await this.fileOp<"mkdir">({ op: "mkdir", path, mode, parents: true, uid: owner.uid, gid: owner.gid, ...this.fsId() });
  }

  async remove(path: string, recursive = false, as?: FileIdentity): Promise<void> {
    await this.fileOp<"remove">({ op: "remove", path, recursive, ...this.fsId(as) });
  }

  async move(from: string, to: string, overwrite = true, as?: FileIdentity): Promise<void> {
    await this.fileOp<"move">({ op: "move", from, to, overwrite, ...this.fsId(as) });
  }

  async chmod(path: string, mode: number, as?: FileIdentity): Promise<void> {
    await this.fileOp<"chmod">({ op: "chmod", path, mode, ...this.fsId(as) });
  }

  async glob(pattern: string, as?: FileIdentity): Promise<string[]> {
    return (await this.fileOp<"glob">({ op: "glob", pattern, ...this.fsId(as) })).matches;
  }

  /** Starts a process that outlives this call (see processes.ts); `first` hears all of its output. */
  async startProcess(spec: ProcessSpec, first?: ProcessListener): Promise<TrackedProcess> {
    const session = this.execStream([spec.cmd, ...spec.args], {
      background: true,
      env: spec.env,
      cwd: spec.cwd,
      user: spec.user,
      timeoutMs: spec.timeoutMs,
      stdin: spec.stdin || !!spec.pty,
      pty: spec.pty,
      // The guest keeps what it was started as, for a server that takes it over later (adopt.ts).
      ...(this.vm.guest.supports("adopt") ? { note: noteOf(spec) } : {}),
    });
    return this.processes.track(spec, session, first);
  }

  /** Takes over the processes a server that went away left running here (adopt.ts), and the shell sessions among them; returns them. */
  async adoptProcesses(): Promise<TrackedProcess[]> {
    const adopted = await adoptDetached(this.vm.guest, this.processes);
    await this.shells.takeOver(adopted);
    return adopted;
  }

  /** The user execs run as unless they say otherwise (the image's USER or the spawn's), when one was set. */
  get defaultUser(): string | undefined {
    return this.defaults.tenant?.user ?? this.defaults.user;
  }

  private shellPath: Promise<string> | null = null;

  /**
   * The shell every interface runs command lines and terminals in: /bin/bash where the image has
   * it, else /bin/sh. Asked once per sandbox (an image does not change under it); a failed look
   * is asked again next time.
   */
  shell(): Promise<string> {
    this.shellPath ??= this.stat("/bin/bash").then(
      () => "/bin/bash",
      (e) => {
        if ((e as { code?: string }).code === "ENOENT") return "/bin/sh";
        this.shellPath = null;
        return "/bin/sh";
      },
    );
    return this.shellPath;
  }

  /** The image's working directory, when it set one. */
  get imageWorkDir(): string | undefined {
    return this.defaults.cwd;
  }

  /** Where execs start unless they say otherwise: the image's working directory, else the default user's home. */
  async workDir(): Promise<string> {
    return this.defaults.cwd ?? (await this.guestUser(this.defaults.tenant?.user ?? this.defaults.user ?? "root"))?.home ?? "/";
  }

  /** A guest user by name or uid, or null when /etc/passwd has none. */
  guestUser(nameOrUid: string): Promise<GuestUser | null> {
    return this.users.find(nameOrUid);
  }

  /** A guest group's name by gid, or null when /etc/group has none. */
  guestGroupName(gid: number): Promise<string | null> {
    return this.users.groupName(gid);
  }

  /** Makes sure the guest has this user with this home directory (guest-users.ts); a pool tenant is only ever itself. */
  ensureUser(name: string, home: string): Promise<GuestUser> {
    const t = this.defaults.tenant;
    if (t) return Promise.resolve({ name: t.user, uid: t.uid, gid: t.gid, home: t.home });
    return this.users.ensure(name, home);
  }

  /** Puts the MCP gateway program on the guest's PATH (mcp-gateway.ts). */
  installMcpGateway(): Promise<void> {
    return installMcpGateway(this);
  }

  /** Watches a directory (recursively if asked); onChange gets each change, named relative to it. Close the watch when done. */
  async watchDir(path: string, opts: { recursive?: boolean; as?: FileIdentity }, onChange: (c: DirChange) => void): Promise<DirWatch> {
    // Setting it up is a call; once in place, an open watch only follows the sandbox (it keeps it
    // from idling, and waits silent through a pause).
    const end = this.follow();
    const w = this.vm.guest.watch({ path, recursive: opts.recursive, ...this.fsId(opts.as) }, onChange);
    w.done.then(end, end);
    try {
      await this.during(() => w.ready);
    } catch (e) {
      end();
      throw e;
    }
    return w;
  }

  /** Ends every process in the sandbox, whatever session or group it is in (an agent without the feature: nothing). */
  async endAll(): Promise<void> {
    if (this.vm.guest.supports("killall")) await this.vm.guest.request<"killall">({ op: "killall" });
  }

  /** Sets the guest's clock to the host's (it is not activity: the sandbox's idle timer goes on). */
  async setClock(): Promise<void> {
    await this.vm.guest.request<"configure">({ op: "configure", time_ms: Date.now() }, { timeoutMs: 5000 });
  }

  async metrics(): Promise<Metrics> {
    const { ok: _ok, ...m } = await this.vm.guest.request<"metrics">({ op: "metrics" });
    return m;
  }

  /** Stops the VM and removes all of its files. */
  async destroy(): Promise<void> {
    await this.onDestroy(this);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.destroy();
  }
}
