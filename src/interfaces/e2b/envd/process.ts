// envd's process.Process service: Start and Connect stream a process's events; List, SendInput,
// SendSignal, CloseStdin and Update act on it by pid or tag. Processes live in the sandbox's
// process table (core/guest/processes.ts), so they outlive the stream that started them.
import type { FastifyInstance, FastifyRequest } from "fastify";
import type { Forge } from "../../../core/forge.js";
import type { ProcessEnd, ProcessListener, ProcessSpec, TrackedProcess } from "../../../core/guest/processes.js";
import type { Sandbox } from "../../../core/guest/sandbox.js";
import { ConnectError, deadlineMs, serverStreaming, unary, type ServerStream } from "../connect.js";
import { keepaliveMs, quietTicker } from "../keepalive.js";
import { templateIdOf } from "../templates.js";
import { envdContext, resolvePath, type EnvdContext } from "./context.js";

const SERVICE = "process.Process";
const SIGNALS: Record<string, number> = { SIGNAL_SIGTERM: 15, SIGNAL_SIGKILL: 9 };
const SIGNAL_NAMES: Record<number, string> = {
  1: "hangup",
  2: "interrupt",
  6: "aborted",
  9: "killed",
  11: "segmentation fault",
  13: "broken pipe",
  14: "alarm clock",
  15: "terminated",
};

/** `ProcessEvent.EndEvent` in envd's words: Go's "exit status N" or "signal: killed". */
export function endEvent(e: ProcessEnd) {
  if (e.error) return { exitCode: -1, exited: false, status: "error", error: e.error };
  if (e.signal) return { exitCode: -1, exited: false, status: `signal: ${SIGNAL_NAMES[e.signal] ?? `signal ${e.signal}`}` };
  return { exitCode: e.exitCode, exited: true, status: `exit status ${e.exitCode}` };
}

function b64(v: unknown, field: string): Buffer {
  if (typeof v !== "string") throw new ConnectError("invalid_argument", `${field} must be base64 bytes`);
  return Buffer.from(v, "base64");
}

/** A ProcessSelector: {pid} or {tag}. */
function selector(v: unknown): { pid?: number; tag?: string } {
  const s = (v ?? {}) as { pid?: unknown; tag?: unknown };
  if (typeof s !== "object") throw new ConnectError("invalid_argument", "process must be {pid} or {tag}");
  if (s.pid !== undefined) {
    const pid = Number(s.pid);
    if (!Number.isInteger(pid) || pid <= 0) throw new ConnectError("invalid_argument", "process.pid must be a positive integer");
    return { pid };
  }
  if (typeof s.tag === "string" && s.tag) return { tag: s.tag };
  throw new ConnectError("invalid_argument", "process must be {pid} or {tag}");
}

function stringMap(v: unknown, field: string): Record<string, string> {
  if (v === undefined || v === null) return {};
  if (typeof v !== "object" || Array.isArray(v)) throw new ConnectError("invalid_argument", `${field} must be a map of strings`);
  for (const [k, x] of Object.entries(v)) if (typeof x !== "string") throw new ConnectError("invalid_argument", `${field}.${k} must be a string`);
  return v as Record<string, string>;
}

/** The program to run: the sandbox's shell where the SDK asks for bash (it always does), which is sh on an image without bash. */
async function shell(sb: Sandbox, cmd: string): Promise<string> {
  return cmd === "/bin/bash" ? sb.shell() : cmd;
}

/** Streams a process's events to a Connect stream until it ends or the client leaves. */
function relay(stream: ServerStream, req: FastifyRequest): ProcessListener & { done: Promise<ProcessEnd | null> } {
  let finish!: (e: ProcessEnd | null) => void;
  const done = new Promise<ProcessEnd | null>((r) => (finish = r));
  const quiet = quietTicker(keepaliveMs(req), () => stream.send({ event: { keepalive: {} } }));
  void stream.closed.then(() => {
    quiet.stop();
    finish(null);
  });
  return {
    done,
    start: (pid) => {
      stream.send({ event: { start: { pid } } });
    },
    output: (o) => {
      quiet.touch();
      return stream.send({ event: { data: { [o.stream]: o.data.toString("base64") } } });
    },
    drained: () => stream.drained(),
    end: (e) => {
      quiet.stop();
      stream.send({ event: { end: endEvent(e) } });
      finish(e);
    },
  };
}

/** Follows a process on a stream: returns when it ended or the client went away (the process keeps running). */
async function follow(p: TrackedProcess, listener: ReturnType<typeof relay>, subscribed = false): Promise<void> {
  if (!subscribed) p.subscribe(listener);
  const end = await listener.done;
  p.unsubscribe(listener);
  if (end?.timedOut) throw new ConnectError("deadline_exceeded", "the process ran past its deadline (Connect-Timeout-Ms) and was killed");
}

export async function processService(app: FastifyInstance, { forge }: { forge: Forge }): Promise<void> {
  serverStreaming(app, SERVICE, "Start", async (msg, stream, req) => {
    const ctx = await envdContext(forge, req);
    const cfg = (msg.process ?? {}) as { cmd?: unknown; args?: unknown; envs?: unknown; cwd?: unknown };
    if (typeof cfg.cmd !== "string" || !cfg.cmd) throw new ConnectError("invalid_argument", "process.cmd is required");
    const args = cfg.args ?? [];
    if (!Array.isArray(args) || args.some((a) => typeof a !== "string")) throw new ConnectError("invalid_argument", "process.args must be a list of strings");
    const cwd = await workdir(ctx, cfg.cwd);
    const size = msg.pty?.size as { cols?: number; rows?: number } | undefined;
    const row = forge.sandboxes.get(ctx.sandbox.id);
    const spec: ProcessSpec = {
      cmd: await shell(ctx.sandbox, cfg.cmd),
      args: args as string[],
      env: { E2B_SANDBOX: "true", E2B_SANDBOX_ID: row.id, E2B_TEMPLATE_ID: templateIdOf(forge, row), ...stringMap(cfg.envs, "process.envs") },
      cwd,
      user: ctx.user.name,
      tag: typeof msg.tag === "string" && msg.tag ? msg.tag : undefined,
      stdin: msg.stdin === true,
      pty: msg.pty ? { cols: Number(size?.cols) || 80, rows: Number(size?.rows) || 24 } : undefined,
      timeoutMs: deadlineMs(req),
    };
    const listener = relay(stream, req);
    const p = await ctx.sandbox.startProcess(spec, listener);
    await follow(p, listener, true);
  });

  serverStreaming(app, SERVICE, "Connect", async (msg, stream, req) => {
    const ctx = await envdContext(forge, req);
    const p = ctx.sandbox.processes.find(selector(msg.process));
    const listener = relay(stream, req);
    listener.start?.(p.pid);
    await follow(p, listener);
  });

  unary(app, SERVICE, "List", async (_msg, req) => {
    const ctx = await envdContext(forge, req);
    return {
      processes: ctx.sandbox.processes.list().map((p) => ({
        config: { cmd: p.spec.cmd, args: p.spec.args, envs: p.spec.env, ...(p.spec.cwd ? { cwd: p.spec.cwd } : {}) },
        pid: p.pid,
        ...(p.spec.tag ? { tag: p.spec.tag } : {}),
      })),
    };
  });

  unary(app, SERVICE, "SendInput", async (msg, req) => {
    const ctx = await envdContext(forge, req);
    const p = ctx.sandbox.processes.find(selector(msg.process));
    const input = (msg.input ?? {}) as { stdin?: unknown; pty?: unknown };
    const data = input.pty !== undefined ? b64(input.pty, "input.pty") : b64(input.stdin, "input.stdin");
    await p.sendInput(data);
    return {};
  });

  unary(app, SERVICE, "SendSignal", async (msg, req) => {
    const ctx = await envdContext(forge, req);
    const sel = selector(msg.process);
    const sig = typeof msg.signal === "number" ? msg.signal : SIGNALS[String(msg.signal)];
    if (sig !== 9 && sig !== 15) throw new ConnectError("invalid_argument", `signal must be SIGNAL_SIGTERM or SIGNAL_SIGKILL, got ${JSON.stringify(msg.signal)}`);
    const p = ctx.sandbox.processes.list().find((x) => (sel.pid !== undefined ? x.pid === sel.pid : x.spec.tag === sel.tag));
    if (p) {
      await p.signal(sig);
      return {};
    }
    // A process this table does not follow (started before a pause, or by a shell) is signalled
    // by pid, as the caller: the guest's kernel decides whether it may.
    if (sel.pid === undefined) throw new ConnectError("not_found", `no running process with tag "${sel.tag}"`);
    const r = await ctx.sandbox.exec(["kill", `-${sig}`, String(sel.pid)], { user: ctx.user.name });
    if (r.exitCode !== 0) throw new ConnectError("not_found", `no process ${sel.pid} this user may signal: ${r.stderr.trim()}`);
    return {};
  });

  unary(app, SERVICE, "CloseStdin", async (msg, req) => {
    const ctx = await envdContext(forge, req);
    ctx.sandbox.processes.find(selector(msg.process)).closeStdin();
    return {};
  });

  unary(app, SERVICE, "Update", async (msg, req) => {
    const ctx = await envdContext(forge, req);
    const p = ctx.sandbox.processes.find(selector(msg.process));
    const size = msg.pty?.size as { cols?: unknown; rows?: unknown } | undefined;
    const cols = Number(size?.cols);
    const rows = Number(size?.rows);
    if (!Number.isInteger(cols) || !Number.isInteger(rows) || cols < 1 || rows < 1 || cols > 9999 || rows > 9999) {
      throw new ConnectError("invalid_argument", "pty.size needs cols and rows between 1 and 9999");
    }
    await p.resize(rows, cols);
    return {};
  });

  serverStreaming(app, SERVICE, "StreamInput", async () => {
    throw new ConnectError("unimplemented", "StreamInput (client streaming) is not served over HTTP/1.1: use SendInput");
  });
}

/** The working directory of a new process: the user's home unless one is given, which must exist. */
async function workdir(ctx: EnvdContext, cwd: unknown): Promise<string> {
  if (cwd === undefined || cwd === null || cwd === "") return ctx.cwd;
  const path = resolvePath(ctx, cwd, "process.cwd");
  const st = await ctx.sandbox.stat(path, ctx.as).catch(() => null);
  if (st?.type !== "dir") throw new ConnectError("invalid_argument", `process.cwd ${path} is not a directory in the sandbox`);
  return path;
}
