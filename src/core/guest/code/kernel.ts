// One code context's process in the guest: a runtime that keeps its state between executions
// (agent/runtime/python.py and node.js, or a plain bash). Requests go in as JSON lines on its
// stdin; what the code prints comes back as it is, and the runtime's messages come as lines that
// start with a marker chosen here, so nothing the code prints can pass for one (markers.ts).
import { randomBytes } from "node:crypto";
import type { ExecSession } from "../../../agent-client/index.js";
import { badRequest, ForgevmError } from "../../../http/errors.js";
import type { Guest } from "../guest.js";
import { MarkedStream } from "./markers.js";
import { type CodeEvent, type CodeLanguage, RUNTIME_DIR } from "./types.js";
import { ignore } from "../../../util/ignore.js";

/** How long a runtime may take to say it is ready (a cold Python under emulation takes ~1 s). */
const READY_TIMEOUT_MS = 30_000;
/** After an interrupt, how long the code may take to stop before the context is restarted. */
const INTERRUPT_GRACE_MS = 3_000;

/** The program a context of each language runs. */
function argvOf(language: CodeLanguage): string[] {
  if (language === "python") return ["python3", "-u", `${RUNTIME_DIR}/python.py`];
  if (language === "javascript") return ["node", `${RUNTIME_DIR}/node.js`];
  return ["bash", "--noprofile", "--norc"];
}

/** A single-quoted shell word. */
const quote = (s: string) => `'${s.replace(/'/g, "'\\''")}'`;

export interface KernelSpec {
  language: CodeLanguage;
  cwd: string;
  user?: string;
  env?: Record<string, string>;
}

interface Running {
  onEvent: (e: CodeEvent) => void;
  ended: boolean;
  synced: boolean;
  done: () => void;
}

export class Kernel {
  private readonly mark = `\x1eFVM:${randomBytes(9).toString("base64url")}`;
  private session: ExecSession | null = null;
  private ready: Promise<void> | null = null;
  private current: Running | null = null;
  private queue: Promise<unknown> = Promise.resolve();
  private executions = 0;
  private exitReason: string | null = null;

  constructor(
    private readonly sandbox: Guest,
    readonly spec: KernelSpec,
  ) {}

  /** Starts the runtime if it is not running; resolves when it is ready. */
  start(): Promise<void> {
    if (this.ready && this.session && !this.exitReason) return this.ready;
    this.exitReason = null;
    this.executions = 0;
    this.ready = this.launch();
    this.ready.catch(() => (this.ready = null));
    return this.ready;
  }

  private async launch(): Promise<void> {
    const { language, cwd, user, env } = this.spec;
    // The runtime waits between runs: only a run is work in flight.
    const s = this.sandbox.execStream(argvOf(language), { cwd, user, env: { ...env, FVM_RUNTIME_MARK: this.mark }, stdin: true, background: true });
    this.session = s;
    let becameReady!: () => void;
    const ready = new Promise<void>((r) => (becameReady = r));
    let stderrTail = "";
    const out = new MarkedStream(this.mark, {
      text: (t) => this.current?.onEvent({ type: "stdout", text: t }),
      message: (m) => {
        if (m === "sync") return;
        let msg: { type: string };
        try {
          msg = JSON.parse(m);
        } catch {
          return;
        }
        if (typeof msg !== "object" || msg === null) return;
        if (msg.type === "ready") becameReady();
        else if (msg.type === "end") this.finishPart("ended");
        else if (this.current && isCodeEvent(msg)) this.current.onEvent(msg);
      },
    });
    const err = new MarkedStream(this.mark, {
      text: (t) => {
        stderrTail = (stderrTail + t).slice(-2000);
        this.current?.onEvent({ type: "stderr", text: t });
      },
      message: (m) => m === "sync" && this.finishPart("synced"),
    });
    s.stdout.on("data", (b: Buffer) => out.push(b));
    s.stderr.on("data", (b: Buffer) => err.push(b));
    s.stdout.on("end", () => out.end());
    s.stderr.on("end", () => err.end());
    const exited = s.result.then(
      (r) => `the ${language} runtime exited with code ${r.exit_code}${stderrTail.trim() ? `: ${stderrTail.trim().split("\n").slice(-3).join(" ")}` : ""}`,
      (e: Error) => `the ${language} runtime stopped: ${e.message}`,
    );
    void exited.then((reason) => {
      this.exitReason = reason;
      this.session = null;
      const c = this.current;
      if (c) {
        c.onEvent({ type: "error", name: "ContextRestarting", value: `${reason}; the context starts afresh on its next execution`, traceback: "" });
        c.ended = c.synced = true;
        c.done();
      }
    });
    if (language === "bash") {
      await this.write(`__fvm_mark=$FVM_RUNTIME_MARK; unset FVM_RUNTIME_MARK; trap 'true' INT; printf '%s {"type":"ready"}\\n' "$__fvm_mark"\n`);
    }
    let timer: NodeJS.Timeout | undefined;
    const outcome = await Promise.race([
      ready.then(() => null),
      exited,
      new Promise<string>((r) => (timer = setTimeout(() => r(`the ${language} runtime did not start within ${READY_TIMEOUT_MS / 1000} s`), READY_TIMEOUT_MS))),
    ]);
    clearTimeout(timer);
    if (outcome !== null) {
      void s.signal(9).catch(ignore("the process may have exited"));
      const missing = /not found|No such file|ENOENT|exited with code 127/.test(outcome);
      throw new ForgevmError("BAD_REQUEST", missing ? `this sandbox's image cannot run ${language} code (${argvOf(language)[0]} is not installed): ${outcome}` : outcome);
    }
  }

  private finishPart(part: "ended" | "synced"): void {
    const c = this.current;
    if (!c) return;
    c[part] = true;
    if (c.ended && c.synced) c.done();
  }

  private write(text: string): Promise<void> {
    const stdin = this.session?.stdin;
    if (!stdin || stdin.writableEnded) return Promise.reject(new ForgevmError("UNAVAILABLE", this.exitReason ?? "the code context is not running"));
    return new Promise((resolve, reject) => stdin.write(text, (e) => (e ? reject(e) : resolve())));
  }

  /**
   * Runs code to its end, one execution at a time per context; events arrive as they happen.
   * When `signal` aborts (a timeout, a client that left), the code is interrupted; the context
   * survives unless the code ignores the interrupt, when it is restarted.
   */
  run(code: string, env: Record<string, string> | undefined, onEvent: (e: CodeEvent) => void, signal?: AbortSignal): Promise<void> {
    const end = this.sandbox.busy();
    const turn = this.queue.then(() => this.runNow(code, env, onEvent, signal)).finally(end);
    this.queue = turn.catch(ignore("the run's failure is its caller's; the queue goes on"));
    return turn;
  }

  private async runNow(code: string, env: Record<string, string> | undefined, onEvent: (e: CodeEvent) => void, signal?: AbortSignal): Promise<void> {
    if (signal?.aborted) return;
    await this.start();
    let done!: () => void;
    const finished = new Promise<void>((r) => (done = r));
    this.current = { onEvent, ended: false, synced: false, done };
    const onAbort = () => void this.interrupt(finished);
    signal?.addEventListener("abort", onAbort, { once: true });
    try {
      this.executions++;
      await this.write(this.spec.language === "bash" ? this.bashRequest(code, env) : `${JSON.stringify({ code, env: env ?? {} })}\n`);
      await finished;
    } finally {
      signal?.removeEventListener("abort", onAbort);
      this.current = null;
    }
  }

  /** Interrupts the running code (SIGINT); code that does not stop soon costs the context its state. */
  private async interrupt(finished: Promise<void>): Promise<void> {
    const s = this.session;
    if (!s) return;
    // The whole group: a bash context's running command gets it too (bash itself traps it).
    await s.signal(2, true).catch(ignore("the process may have exited"));
    let timer: NodeJS.Timeout | undefined;
    const stopped = await Promise.race([finished.then(() => true), new Promise<boolean>((r) => (timer = setTimeout(() => r(false), INTERRUPT_GRACE_MS)))]);
    clearTimeout(timer);
    if (!stopped) await s.signal(9).catch(ignore("the process may have exited"));
  }

  /** One execution for bash: the code evaluated as written, then the messages a runtime would send. */
  private bashRequest(code: string, env: Record<string, string> | undefined): string {
    const eof = `FVM_EOF_${randomBytes(6).toString("hex")}`;
    if (code.split("\n").includes(eof)) throw badRequest("code contains this execution's end-of-code line; run it again");
    const set: string[] = [];
    const restore: string[] = [];
    for (const [k, v] of Object.entries(env ?? {})) {
      if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(k)) throw badRequest(`env_vars: "${k}" is not a shell variable name`);
      set.push(`__fvm_old_${k}=\${${k}-__fvm_unset}; export ${k}=${quote(v)}`);
      restore.push(`if [ "$__fvm_old_${k}" = __fvm_unset ]; then unset ${k}; else export ${k}="$__fvm_old_${k}"; fi`);
    }
    const n = this.executions;
    return [
      ...set,
      `eval "$(cat <<'${eof}'`,
      code,
      eof,
      `)" </dev/null`,
      `__fvm_rc=$?`,
      ...restore,
      `[ $__fvm_rc -ne 0 ] && printf '%s {"type":"error","name":"ExitCode","value":"%d","traceback":""}\\n' "$__fvm_mark" $__fvm_rc`,
      `printf '%s {"type":"number_of_executions","execution_count":${n}}\\n' "$__fvm_mark"`,
      `printf '%s sync\\n' "$__fvm_mark" >&2`,
      `printf '%s {"type":"end"}\\n' "$__fvm_mark"`,
      "",
    ].join("\n");
  }

  /** Stops the runtime (its state is gone). */
  async stop(): Promise<void> {
    const s = this.session;
    this.session = null;
    this.ready = null;
    if (s) await s.signal(9).catch(ignore("the process may have exited"));
  }
}

const EVENT_TYPES = new Set(["stdout", "stderr", "result", "error", "number_of_executions"]);

/** What a runtime may send on to callers (anything else it says is ignored). */
function isCodeEvent(m: { type: string }): m is CodeEvent {
  return EVENT_TYPES.has(m.type);
}
