// Processes a sandbox keeps track of after the call that started them returns: started in the
// background, listed, re-attached to by pid or tag, fed stdin, signalled, resized, and their exit
// kept for a while after they end. The E2B envd interface is built on this; any interface that
// needs a process to outlive its request uses it too.
import type { Readable } from "node:stream";
import type { ExecSession } from "../../agent-client/index.js";
import { badRequest, conflict, notFound } from "../../http/errors.js";
import { ignore } from "../../util/ignore.js";

/** What a tracked process was started with (as the caller gave it). */
export interface ProcessSpec {
  cmd: string;
  args: string[];
  env: Record<string, string>;
  cwd?: string;
  user?: string;
  /** A name the caller may later find the process by instead of its pid. */
  tag?: string;
  /** Keep stdin open for sendInput (a PTY always has it). */
  stdin: boolean;
  pty?: { rows: number; cols: number };
  /** Kill the process group after this many ms. */
  timeoutMs?: number;
}

/** How a tracked process ended. */
export interface ProcessEnd {
  exitCode: number;
  /** The signal that killed it, if one did. */
  signal?: number;
  timedOut: boolean;
  /** Set when the process could not run or its sandbox went away. */
  error?: string;
}

/** A process's end as a shell reports it: its exit code, or 128 + the signal that killed it. */
export function exitCodeOf(e: ProcessEnd): number {
  return e.signal ? 128 + e.signal : e.exitCode;
}

export type ProcessOutput = { stream: "stdout" | "stderr" | "pty"; data: Buffer };

/** A subscriber gets output and the end; returning false asks the producer to wait for `drained`. */
export interface ProcessListener {
  /** Called first, when the listener subscribed at start (before any output). */
  start?(pid: number): void;
  output(o: ProcessOutput): boolean;
  drained(): Promise<void>;
  end(e: ProcessEnd): void;
  /** The server's own listener (a main process's log): not a client, so not work in flight. */
  background?: boolean;
}

/** How many ended processes a sandbox remembers (their exit codes, for late re-attaches). */
const KEEP_ENDED = 64;
/** How much output of an adopted process waits for its first listener (what it wrote while no server held it). */
const MAX_UNHEARD = 1024 * 1024;

export class TrackedProcess {
  /** Each listener, with the function that ends its count as work in flight. */
  private readonly listeners = new Map<ProcessListener, () => void>();
  private ending: ProcessEnd | null = null;

  /** Output that came while nobody listened, for the first listener: only an adopted process keeps it (see `adopted`). */
  private unheard: ProcessOutput[] | null = null;
  private unheardBytes = 0;

  constructor(
    readonly pid: number,
    readonly spec: ProcessSpec,
    private readonly session: ExecSession,
    /** Marks a client following the process (Sandbox.follow): it keeps its sandbox from idling. */
    private readonly follow: () => () => void = () => () => {},
    /** Taken over from a server that went away (adopt.ts): what it wrote meanwhile waits for the first listener. */
    readonly adopted = false,
  ) {
    if (adopted) this.unheard = [];
  }

  get running(): boolean {
    return this.ending === null;
  }

  /** Starts pumping output to the listeners; output nobody listens to is dropped, as envd does. */
  pump(onEnd: () => void): void {
    const out = this.spec.pty ? "pty" : "stdout";
    const relay = (stream: Readable, name: ProcessOutput["stream"]) =>
      new Promise<void>((resolve) => {
        stream.on("data", (data: Buffer) => {
          if (this.unheard && this.listeners.size === 0) return this.keepUnheard({ stream: name, data });
          const waits: Promise<void>[] = [];
          for (const l of this.listeners.keys()) if (!l.output({ stream: name, data })) waits.push(l.drained());
          if (waits.length) {
            // A slow reader slows the process (through the channel's credit), never our memory.
            stream.pause();
            void Promise.all(waits).then(() => stream.resume());
          }
        });
        stream.on("end", resolve);
        stream.on("error", () => resolve());
        // A sandbox destroyed under a process closes its streams without an end.
        stream.on("close", resolve);
      });
    void Promise.all([relay(this.session.stdout, out), relay(this.session.stderr, "stderr"), this.session.result.catch((e: Error) => e)]).then(([, , r]) => {
      this.ending =
        r instanceof Error ? { exitCode: -1, timedOut: false, error: r.message } : { exitCode: r.exit_code, timedOut: r.timed_out, ...(r.signal ? { signal: r.signal } : {}) };
      for (const [l, end] of this.listeners) {
        l.end(this.ending);
        end();
      }
      this.listeners.clear();
      onEnd();
    });
  }

  private keepUnheard(o: ProcessOutput): void {
    this.unheard!.push(o);
    this.unheardBytes += o.data.length;
    while (this.unheardBytes > MAX_UNHEARD && this.unheard!.length > 1) this.unheardBytes -= this.unheard!.shift()!.data.length;
  }

  /** Receives output from now on (an adopted process's first listener: what it wrote while nobody listened, first) and the end (at once if it has ended). */
  subscribe(l: ProcessListener): void {
    const unheard = this.unheard;
    if (unheard) {
      this.unheard = null;
      for (const o of unheard) l.output(o);
    }
    if (this.ending) l.end(this.ending);
    else if (!this.listeners.has(l)) this.listeners.set(l, l.background ? () => {} : this.follow());
  }

  /** Stops sending to a listener. */
  unsubscribe(l: ProcessListener): void {
    this.listeners.get(l)?.();
    this.listeners.delete(l);
  }

  /** Writes to the process's stdin (or its terminal). */
  async sendInput(data: Buffer): Promise<void> {
    const stdin = this.session.stdin;
    if (!this.running) throw notFound(`process ${this.pid} has ended`);
    if (!stdin || stdin.writableEnded) throw conflict(`process ${this.pid} was started without stdin (or its stdin is closed)`);
    await new Promise<void>((resolve, reject) => stdin.write(data, (e) => (e ? reject(e) : resolve())));
  }

  /** Closes the process's stdin (EOF). */
  closeStdin(): void {
    if (!this.running) throw notFound(`process ${this.pid} has ended`);
    if (!this.session.stdin) throw conflict(`process ${this.pid} was started without stdin`);
    if (!this.session.stdin.writableEnded) this.session.stdin.end();
  }

  /** Sends a signal to the process's group (its children get it too). */
  async signal(sig: number): Promise<void> {
    if (!this.running) throw notFound(`process ${this.pid} has ended`);
    await this.session.signal(sig);
  }

  /** Resizes the process's terminal. */
  async resize(rows: number, cols: number): Promise<void> {
    if (!this.running) throw notFound(`process ${this.pid} has ended`);
    if (!this.spec.pty) throw badRequest(`process ${this.pid} has no terminal to resize`);
    await this.session.resize(rows, cols);
  }
}

/** The tracked processes of one sandbox. */
export class ProcessTable {
  private readonly byPid = new Map<number, TrackedProcess>();
  private readonly ended: number[] = [];

  constructor(private readonly follow: () => () => void = () => () => {}) {}

  /**
   * Starts tracking a session once the guest says it started (its pid is the guest's); `first`
   * hears everything from the first byte of output.
   */
  async track(spec: ProcessSpec, session: ExecSession, first?: ProcessListener): Promise<TrackedProcess> {
    if (spec.tag !== undefined && this.list().some((p) => p.spec.tag === spec.tag)) {
      void session.signal(9).catch(ignore("the process may have exited"));
      throw conflict(`a running process already has the tag "${spec.tag}"`);
    }
    const { pid } = await session.started;
    const p = new TrackedProcess(pid, spec, session, this.follow);
    this.add(p);
    if (first) {
      first.start?.(pid);
      p.subscribe(first);
    }
    return p;
  }

  /** Tracks a process taken over from a server that went away (adopt.ts), once the guest has handed it over. */
  async adopt(spec: ProcessSpec, session: ExecSession): Promise<TrackedProcess> {
    const { pid } = await session.started;
    const p = new TrackedProcess(pid, spec, session, this.follow, true);
    this.add(p);
    return p;
  }

  private add(p: TrackedProcess): void {
    const pid = p.pid;
    this.byPid.set(pid, p);
    p.pump(() => {
      this.ended.push(pid);
      while (this.ended.length > KEEP_ENDED) {
        const old = this.ended.shift()!;
        if (this.byPid.get(old) && !this.byPid.get(old)!.running) this.byPid.delete(old);
      }
    });
  }

  /** A process by pid or tag (running or recently ended); 404 when there is none. */
  find(sel: { pid?: number; tag?: string }): TrackedProcess {
    if (sel.pid !== undefined) {
      const p = this.byPid.get(sel.pid);
      if (p) return p;
      throw notFound(`no process with pid ${sel.pid}`);
    }
    if (sel.tag !== undefined) {
      const all = [...this.byPid.values()].filter((p) => p.spec.tag === sel.tag);
      const p = all.find((x) => x.running) ?? all.at(-1);
      if (p) return p;
      throw notFound(`no process with tag "${sel.tag}"`);
    }
    throw badRequest("process: give a pid or a tag");
  }

  /** Processes still running, oldest first. */
  list(): TrackedProcess[] {
    return [...this.byPid.values()].filter((p) => p.running);
  }
}
