// Running things in a sandbox: commands (exec) and stateful code (run_code). Both report
// progress while they run and stop what they started when the client cancels the call.
import { Type } from "typebox";
import { ForgevmError } from "../../../http/errors.js";
import { HeadTail } from "../head-tail.js";
import { tool } from "../tool.js";
import { Duration, Env, SandboxId, ms } from "./common.js";
import { ignore } from "../../../util/ignore.js";

/** How often a running call reports progress. */
const PROGRESS_EVERY_MS = 1000;
/** An exec that names no timeout is stopped after this long. */
const DEFAULT_EXEC_TIMEOUT_MS = 10 * 60_000;

export const exec = tool({
  name: "exec",
  title: "Run a command",
  description: "Run a shell command (or an argv without a shell) in a sandbox and return its exit code, stdout and stderr.",
  input: Type.Object(
    {
      sandbox_id: SandboxId,
      command: Type.Optional(Type.String({ minLength: 1, maxLength: 131072, description: 'A shell command line, run with sh -c: "pip install x && python main.py"' })),
      argv: Type.Optional(
        Type.Array(Type.String({ maxLength: 131072 }), { minItems: 1, maxItems: 4096, description: "Program and arguments, run without a shell (instead of command)" }),
      ),
      workdir: Type.Optional(Type.String({ minLength: 1, maxLength: 4096, description: "Working directory (absolute)" })),
      env: Type.Optional(Env),
      user: Type.Optional(Type.String({ minLength: 1, maxLength: 64, description: "User name or uid to run as (default root)" })),
      timeout: Type.Optional(Duration("Kill the command after this long (default 10m); the exit code is then 124")),
      stdin: Type.Optional(Type.String({ maxLength: 16777216, description: "Text given to the command on stdin" })),
    },
    { additionalProperties: false },
  ),
  output: Type.Object({
    exit_code: Type.Integer(),
    stdout: Type.String(),
    stderr: Type.String(),
    timed_out: Type.Boolean(),
    truncated: Type.Boolean({ description: "Output beyond the limit was dropped from the middle (head and tail kept)" }),
    stdout_bytes: Type.Integer(),
    stderr_bytes: Type.Integer(),
    duration_ms: Type.Integer(),
  }),
  bulky: ["stdin"],
  async run(ctx, a) {
    ctx.agents.row(a.sandbox_id);
    if ((a.command === undefined) === (a.argv === undefined)) throw new ForgevmError("BAD_REQUEST", "exec: give exactly one of command and argv");
    const sb = await ctx.forge.sandboxes.use(a.sandbox_id, "mcp");
    const t0 = performance.now();
    const s = sb.execStream(a.command ?? (a.argv as string[]), {
      env: a.env,
      cwd: a.workdir,
      user: a.user,
      timeoutMs: ms(a.timeout, "timeout") ?? DEFAULT_EXEC_TIMEOUT_MS,
      stdin: a.stdin !== undefined,
    });
    if (s.stdin) s.stdin.end(a.stdin);
    const out = new HeadTail(ctx.policy.maxOutputBytes);
    const err = new HeadTail(ctx.policy.maxOutputBytes);
    // A cancelled call kills the whole process group: nothing it started runs on unobserved.
    const kill = () => void s.signal(9, true).catch(ignore("the process may have exited"));
    ctx.signal.addEventListener("abort", kill, { once: true });
    const ticker = setInterval(() => {
      const secs = Math.round((performance.now() - t0) / 1000);
      ctx.progress(secs, undefined, `running for ${secs}s, ${out.total + err.total} bytes of output`);
    }, PROGRESS_EVERY_MS);
    try {
      const drain = async (stream: NodeJS.ReadableStream, into: HeadTail) => {
        for await (const c of stream as AsyncIterable<Buffer>) into.push(c);
      };
      const [r] = await Promise.all([s.result, drain(s.stdout, out), drain(s.stderr, err)]);
      if (ctx.signal.aborted) throw new ForgevmError("BAD_REQUEST", "exec was cancelled; the command was killed");
      const result = {
        exit_code: r.exit_code,
        stdout: out.text(),
        stderr: err.text(),
        timed_out: r.timed_out,
        truncated: out.truncated || err.truncated,
        stdout_bytes: out.total,
        stderr_bytes: err.total,
        duration_ms: Math.round(performance.now() - t0),
      };
      const text = [
        `exit code ${r.exit_code}${r.timed_out ? " (timed out)" : ""}${result.truncated ? " (output truncated: head and tail kept)" : ""}`,
        result.stdout && `stdout:\n${result.stdout}`,
        result.stderr && `stderr:\n${result.stderr}`,
      ]
        .filter(Boolean)
        .join("\n");
      return { result, text, sandboxId: a.sandbox_id };
    } finally {
      clearInterval(ticker);
      ctx.signal.removeEventListener("abort", kill);
    }
  },
});

export const runCode = tool({
  name: "run_code",
  title: "Run code (stateful)",
  description: "Run Python, JavaScript or bash code in a persistent interpreter: variables and imports stay for the next run_code call.",
  input: Type.Object(
    {
      sandbox_id: SandboxId,
      code: Type.String({ maxLength: 4194304, description: "The code; the value of a last expression is returned as a result" }),
      language: Type.Optional(Type.Union([Type.Literal("python"), Type.Literal("javascript"), Type.Literal("bash")], { description: "Default python" })),
      context_id: Type.Optional(Type.String({ minLength: 1, maxLength: 64, description: "A context from an earlier result (default: the language's shared one)" })),
      new_context: Type.Optional(Type.Boolean({ description: "Start a fresh interpreter, with a context_id of its own" })),
      timeout: Type.Optional(Duration("Interrupt the code after this long (the interpreter survives)")),
    },
    { additionalProperties: false },
  ),
  output: Type.Object({
    context_id: Type.String(),
    language: Type.String(),
    stdout: Type.String(),
    stderr: Type.String(),
    results: Type.Array(Type.Object({ is_main_result: Type.Boolean(), text: Type.Optional(Type.String()), formats: Type.Array(Type.String()) })),
    error: Type.Union([Type.Object({ name: Type.String(), value: Type.String(), traceback: Type.String() }), Type.Null()]),
    execution_count: Type.Integer(),
  }),
  bulky: ["code"],
  async run(ctx, a) {
    ctx.agents.row(a.sandbox_id);
    const sb = await ctx.forge.sandboxes.use(a.sandbox_id, "mcp");
    if (a.new_context && a.context_id) throw new ForgevmError("BAD_REQUEST", "run_code: give context_id or new_context, not both");
    const info = a.context_id ? sb.code.get(a.context_id) : a.new_context ? await sb.code.create({ language: a.language }) : await sb.code.prepare(a.language);
    let events = 0;
    const ex = await sb.code.run(a.code, {
      contextId: info.id,
      language: a.context_id ? undefined : a.language,
      timeoutMs: ms(a.timeout, "timeout"),
      signal: ctx.signal,
      onEvent: (e) => {
        events++;
        if (e.type === "stdout" || e.type === "stderr") ctx.progress(events, undefined, e.text.slice(-200));
      },
    });
    if (ctx.signal.aborted) throw new ForgevmError("BAD_REQUEST", "run_code was cancelled; the code was interrupted");
    const cap = ctx.policy.maxOutputBytes;
    const capped = (parts: string[]) => {
      const h = new HeadTail(cap);
      for (const p of parts) h.push(Buffer.from(p));
      return h.text();
    };
    const results = ex.results.map((r) => ({
      is_main_result: r.is_main_result,
      ...(r.text !== undefined ? { text: r.text } : {}),
      formats: Object.keys(r).filter((k) => k !== "is_main_result" && (r as unknown as Record<string, unknown>)[k] !== undefined),
    }));
    const result = {
      context_id: info.id,
      language: info.language,
      stdout: capped(ex.stdout),
      stderr: capped(ex.stderr),
      results,
      error: ex.error,
      execution_count: ex.executionCount,
    };
    const main = ex.results.find((r) => r.is_main_result)?.text;
    const text =
      [
        result.stdout && `stdout:\n${result.stdout}`,
        result.stderr && `stderr:\n${result.stderr}`,
        main !== undefined && `result:\n${main}`,
        ex.error && `error: ${ex.error.name}: ${ex.error.value}\n${ex.error.traceback}`,
      ]
        .filter(Boolean)
        .join("\n") || "(no output)";
    const extra = ex.results.flatMap((r) => [
      ...(r.png ? [{ type: "image" as const, data: r.png, mimeType: "image/png" }] : []),
      ...(r.jpeg ? [{ type: "image" as const, data: r.jpeg, mimeType: "image/jpeg" }] : []),
    ]);
    return { result, text, extra, sandboxId: a.sandbox_id };
  },
});
