// Shell sessions of a sandbox: one long-lived shell per session, so that `cd` and `export` carry
// over from one command to the next and a session's commands run one after another. Each command
// is written into the shell as `eval '<text>'`, followed by markers carrying a random token and
// its exit status, on stdout and on stderr; output is the command's until its markers arrive.
// A command's output is kept (in arrival order, stream by stream) for its logs and for whoever
// follows it. An async command's stdin is a FIFO fed by a small `cat` the host writes to.
// A session's shell is tagged with its id, so it outlives its server: the next server (or a
// fork's copy) that adopts the shell takes the session back under the same id, with the shell's
// working directory and variables; the commands given before are not remembered (their output
// was the old server's).
// Daytona's toolbox sessions are built on this; the Sandbox holds one ShellSessions.
import { randomBytes } from "node:crypto";
import { ForgevmError, badRequest, conflict, notFound } from "../../http/errors.js";
import { ignore } from "../../util/ignore.js";
import type { Guest } from "./guest.js";
import type { ProcessEnd, ProcessListener, ProcessSpec, TrackedProcess } from "./processes.js";

/** Most sessions one sandbox keeps, and most commands one session remembers. */
export const MAX_SESSIONS = 32;
const KEEP_COMMANDS = 256;
/** Output kept per command; beyond it the log says it was cut. */
const MAX_LOG_BYTES = 16 * 1024 * 1024;
/** Output one session keeps in all: the oldest finished commands are forgotten past it. */
const SESSION_LOG_BYTES = 32 * 1024 * 1024;
/** Where async commands' stdin FIFOs live in the guest. */
const FIFO_DIR = "/tmp/.forgevm-sessions";
const RS = 0x1e;
/** The tag of a session's shell: this, then the session's id. */
const SHELL_TAG = "shell-session:";

export type LogStream = "stdout" | "stderr";
export interface LogChunk {
  stream: LogStream;
  data: Buffer;
}

/** What a session command is, as its callers see it. */
export interface SessionCommandInfo {
  id: string;
  command: string;
  exitCode?: number;
}

/** One command of a session: its output so far and, once it has finished, its exit code. */
export class SessionCommand {
  readonly log: LogChunk[] = [];
  /** Bytes kept in `log`. */
  logBytes = 0;
  exitCode: number | undefined;
  private readonly followers = new Set<(c: LogChunk | null) => void>();
  /** The `cat` feeding an async command's stdin. */
  feeder: TrackedProcess | null = null;
  readonly finished: Promise<void>;
  private finish!: () => void;

  constructor(
    readonly id: string,
    readonly command: string,
    readonly async: boolean,
    readonly echoInput: boolean,
  ) {
    this.finished = new Promise((resolve) => (this.finish = resolve));
  }

  get info(): SessionCommandInfo {
    return { id: this.id, command: this.command, ...(this.exitCode !== undefined ? { exitCode: this.exitCode } : {}) };
  }

  /** The output of one stream, or of both in arrival order. */
  text(stream?: LogStream): string {
    return Buffer.concat(this.log.filter((c) => !stream || c.stream === stream).map((c) => c.data)).toString("utf8");
  }

  append(stream: LogStream, data: Buffer): void {
    if (data.length === 0) return;
    if (this.logBytes + data.length > MAX_LOG_BYTES) {
      if (this.logBytes >= MAX_LOG_BYTES) return;
      data = Buffer.concat([data.subarray(0, MAX_LOG_BYTES - this.logBytes), Buffer.from("\n[output cut: over 16 MiB]\n")]);
    }
    this.logBytes += data.length;
    const chunk = { stream, data };
    this.log.push(chunk);
    for (const f of this.followers) f(chunk);
  }

  end(exitCode: number): void {
    if (this.exitCode !== undefined) return;
    this.exitCode = exitCode;
    if (this.feeder?.running) void this.feeder.signal(9).catch(ignore("the feeder may have ended with its reader"));
    for (const f of this.followers) f(null);
    this.followers.clear();
    this.finish();
  }

  /** Sends what is logged, then each new chunk, then null once the command has finished; returns the unsubscribe. */
  follow(onChunk: (c: LogChunk | null) => void): () => void {
    for (const c of this.log) onChunk(c);
    if (this.exitCode !== undefined) {
      onChunk(null);
      return () => {};
    }
    this.followers.add(onChunk);
    return () => this.followers.delete(onChunk);
  }
}

/** Splits a stream at its end markers (`prefix`, a payload, RS), holding back a tail that may be the start of one. */
export class MarkerReader {
  private pending: Buffer = Buffer.alloc(0);

  constructor(
    private readonly prefix: Buffer,
    private readonly onData: (b: Buffer) => void,
    /** Called with the marker's payload (what stands between the prefix and the closing RS). */
    private readonly onMarker: (payload: string) => void,
  ) {}

  push(data: Buffer): void {
    let buf = this.pending.length ? Buffer.concat([this.pending, data]) : data;
    for (;;) {
      const at = buf.indexOf(this.prefix);
      if (at < 0) break;
      const close = buf.indexOf(RS, at + this.prefix.length);
      if (close < 0) {
        this.onData(buf.subarray(0, at));
        this.pending = buf.subarray(at);
        return;
      }
      this.onData(buf.subarray(0, at));
      this.onMarker(buf.subarray(at + this.prefix.length, close).toString("latin1"));
      buf = buf.subarray(close + 1);
    }
    // Hold back only a tail that could still grow into the marker.
    let keep = 0;
    for (let n = Math.min(this.prefix.length - 1, buf.length); n > 0; n--) {
      if (buf.subarray(buf.length - n).equals(this.prefix.subarray(0, n))) {
        keep = n;
        break;
      }
    }
    this.onData(buf.subarray(0, buf.length - keep));
    this.pending = Buffer.from(buf.subarray(buf.length - keep));
  }
}

/** Quotes a string for a POSIX shell. */
const quote = (s: string) => `'${s.replaceAll("'", `'\\''`)}'`;

/** One session: its shell, and its commands in the order they were given. */
export class ShellSession {
  readonly commands = new Map<string, SessionCommand>();
  private readonly queue: SessionCommand[] = [];
  // Each server's own: markers of a command a server before it gave are plain output to this one.
  private readonly token = randomBytes(12).toString("hex");
  private seq = 0;
  private ended: ProcessEnd | null = null;
  private stdoutDone = false;
  private stderrDone = false;
  private pendingCode: number | null = null;
  private readonly out: MarkerReader;
  private readonly err: MarkerReader;
  shell!: TrackedProcess;

  constructor(
    readonly id: string,
    private readonly guest: Guest & { startProcess(spec: ProcessSpec, first?: ProcessListener): Promise<TrackedProcess> },
    private readonly spec: { user?: string; cwd?: string },
  ) {
    this.out = new MarkerReader(
      Buffer.from(`\x1eE${this.token}:`),
      (b) => this.current()?.append("stdout", b),
      (code) => {
        this.pendingCode = Number(code) || 0;
        this.stdoutDone = true;
        this.settle();
      },
    );
    this.err = new MarkerReader(
      Buffer.from(`\x1eE${this.token}`),
      (b) => this.current()?.append("stderr", b),
      () => {
        this.stderrDone = true;
        this.settle();
      },
    );
  }

  /** Starts the shell: the sandbox's (bash where the image has it, else sh). */
  async start(): Promise<void> {
    this.shell = await this.guest.startProcess(
      {
        cmd: await this.guest.shell(),
        args: [],
        env: {},
        cwd: this.spec.cwd,
        user: this.spec.user,
        stdin: true,
        tag: `${SHELL_TAG}${this.id}`,
      },
      this.listener(),
    );
  }

  /**
   * Takes over the shell of this session that a server before this one started (adopted):
   * commands queue behind a hidden one whose markers come once whatever the shell was running
   * has ended, so no new command is told the end of an old one.
   */
  async takeOver(shell: TrackedProcess): Promise<void> {
    this.shell = shell;
    const resync = new SessionCommand(`${this.id}-taken-over`, "", false, false);
    this.queue.push(resync);
    shell.subscribe(this.listener());
    if (!this.alive) return;
    await shell.sendInput(Buffer.from(`printf '\\036E${this.token}:0\\036'; printf '\\036E${this.token}\\036' >&2\n`));
  }

  private listener(): ProcessListener {
    return {
      // The server's own reader: a session left open does not keep its sandbox from idling.
      background: true,
      output: (o) => {
        (o.stream === "stderr" ? this.err : this.out).push(o.data);
        return true;
      },
      drained: async () => {},
      end: (e) => {
        this.ended = e;
        // A command that ended the shell (`exit`) ends with it; those queued behind it never ran.
        const [running, ...never] = this.queue.splice(0);
        running?.end(e.exitCode);
        for (const c of never) c.end(-1);
      },
    };
  }

  get alive(): boolean {
    return this.ended === null;
  }

  private current(): SessionCommand | undefined {
    return this.queue[0];
  }

  private settle(): void {
    if (!this.stdoutDone || !this.stderrDone) return;
    const c = this.queue.shift();
    this.stdoutDone = this.stderrDone = false;
    c?.end(this.pendingCode ?? 0);
    this.pendingCode = null;
    this.forget();
  }

  /** Runs a command in the shell after those before it; an async one gets a stdin to write to. */
  async exec(command: string, opts: { async?: boolean; echoInput?: boolean } = {}): Promise<SessionCommand> {
    if (!this.alive) throw conflict(`session ${this.id} has ended: its shell exited (${this.ended?.exitCode}); delete it and make another`);
    if (typeof command !== "string" || !command.trim()) throw badRequest("command is required");
    const c = new SessionCommand(`${this.id}-${++this.seq}-${randomBytes(4).toString("hex")}`, command, !!opts.async, opts.echoInput !== false);
    let stdin = "/dev/null";
    if (c.async) {
      stdin = `${FIFO_DIR}/${c.id}`;
      const made = await this.guest.exec(["sh", "-c", `mkdir -p ${FIFO_DIR} && chmod 1777 ${FIFO_DIR} 2>/dev/null; mkfifo -m 600 "$0"`, stdin], { user: this.spec.user });
      if (made.exitCode !== 0) throw new ForgevmError("INTERNAL_ERROR", `could not make the command's stdin: ${made.stderr.trim()}`);
      // Opening the FIFO waits for the shell to reach the command; the command's stdin ends when the feeder does.
      c.feeder = await this.guest.startProcess({ cmd: "sh", args: ["-c", 'exec cat > "$0"', stdin], env: {}, user: this.spec.user, stdin: true });
    }
    this.commands.set(c.id, c);
    this.queue.push(c);
    this.forget();
    const script = `eval ${quote(command)} < ${quote(stdin)}\n__fvm_rc=$?; ${c.async ? `rm -f ${quote(stdin)}; ` : ""}printf '\\036E${this.token}:%d\\036' "$__fvm_rc"; printf '\\036E${this.token}\\036' >&2\n`;
    await this.shell.sendInput(Buffer.from(script));
    return c;
  }

  /** Writes to an async command's stdin (a newline added if missing); echoed into its log unless it asked not to be. */
  async sendInput(commandId: string, data: string): Promise<void> {
    const c = this.command(commandId);
    if (c.exitCode !== undefined) throw conflict(`command ${commandId} has finished`);
    if (!c.feeder) throw conflict(`command ${commandId} was not started with runAsync: it has no stdin`);
    const text = data.endsWith("\n") ? data : `${data}\n`;
    await c.feeder.sendInput(Buffer.from(text));
    if (c.echoInput) c.append("stdout", Buffer.from(text));
  }

  command(id: string): SessionCommand {
    const c = this.commands.get(id);
    if (!c) throw notFound(`session ${this.id} has no command ${id}`);
    return c;
  }

  /** Ends the shell and everything it started. */
  async close(): Promise<void> {
    for (const c of this.commands.values()) if (c.feeder?.running) await c.feeder.signal(9).catch(ignore("it may have ended"));
    if (this.alive) await this.shell.signal(9).catch(ignore("the shell may have ended already"));
  }

  /** Drops the oldest finished commands past the limits on their count and on the output kept. */
  private forget(): void {
    let bytes = 0;
    for (const c of this.commands.values()) bytes += c.logBytes;
    for (const [id, c] of this.commands) {
      if (this.commands.size <= KEEP_COMMANDS && bytes <= SESSION_LOG_BYTES) break;
      if (c.exitCode === undefined) continue;
      bytes -= c.logBytes;
      this.commands.delete(id);
    }
  }
}

/** The sessions of one sandbox. */
export class ShellSessions {
  private readonly sessions = new Map<string, ShellSession>();

  constructor(private readonly guest: ConstructorParameters<typeof ShellSession>[1]) {}

  /** Starts a session's shell as `user` in `cwd`. */
  async create(id: string, spec: { user?: string; cwd?: string }): Promise<ShellSession> {
    if (typeof id !== "string" || !/^[A-Za-z0-9._-]{1,128}$/.test(id)) throw badRequest("sessionId must be 1-128 letters, digits, '.', '_' or '-'");
    if (this.sessions.has(id)) throw conflict(`session ${id} already exists`);
    if (this.sessions.size >= MAX_SESSIONS) throw conflict(`this sandbox has ${MAX_SESSIONS} sessions already: delete one first`);
    const s = new ShellSession(id, this.guest, spec);
    this.sessions.set(id, s);
    try {
      await s.start();
    } catch (e) {
      this.sessions.delete(id);
      throw e;
    }
    return s;
  }

  /** Takes back the sessions whose shells a server before this one left running (adopted, adopt.ts). */
  async takeOver(adopted: TrackedProcess[]): Promise<void> {
    for (const p of adopted) {
      const id = p.spec.tag?.startsWith(SHELL_TAG) ? p.spec.tag.slice(SHELL_TAG.length) : "";
      if (!/^[A-Za-z0-9._-]{1,128}$/.test(id) || this.sessions.has(id) || !p.running || this.sessions.size >= MAX_SESSIONS) continue;
      const s = new ShellSession(id, this.guest, { user: p.spec.user, cwd: p.spec.cwd });
      this.sessions.set(id, s);
      await s.takeOver(p).catch(ignore("a shell that ended meanwhile leaves its session ended"));
    }
  }

  get(id: string): ShellSession {
    const s = this.sessions.get(id);
    if (!s) throw notFound(`no session ${id}`);
    return s;
  }

  list(): ShellSession[] {
    return [...this.sessions.values()];
  }

  async delete(id: string): Promise<void> {
    const s = this.get(id);
    this.sessions.delete(id);
    await s.close();
  }
}
