// Running code in a sandbox's stateful code contexts: buffered, or streamed as NDJSON events
// when the caller wants output as it comes (callbacks).
import { durationMs, durationString } from "./durations.js";
import { errorFromBody, ProviderError } from "./errors.js";
import type { Transport } from "./http.js";
import { ndjson } from "./ndjson.js";
import type { CodeContext, CodeError, CodeResult, Execution, RunCodeOptions } from "./types.js";

/** How long a run may take over HTTP beyond the code's own timeout. */
const CODE_SLACK_MS = 15_000;

type Event =
  | { type: "stdout" | "stderr"; text: string }
  | ({ type: "result" } & CodeResult)
  | ({ type: "error" } & CodeError)
  | { type: "number_of_executions"; execution_count: number }
  | { type: "end"; execution_count: number; context: string; duration: string }
  | { type: "api_error"; code: string; message: string; retryable: boolean };

/** Runs code in a sandbox (path: the sandbox's URL path) and returns what it produced. */
export async function runCode(http: Transport, sandboxId: string, path: string, code: string, opts: RunCodeOptions = {}): Promise<Execution> {
  const context = typeof opts.context === "object" ? opts.context.id : opts.context;
  const timeout = durationString(opts.timeout);
  const stream = !!(opts.onStdout || opts.onStderr || opts.onResult || opts.onError);
  const body = { code, language: opts.language, context, env: opts.env, timeout, stream: stream || undefined };
  if (!stream) {
    const limit = durationMs(opts.timeout);
    return http.json<Execution>("POST", `${path}/code`, { body, sandboxId, timeoutMs: limit === undefined ? null : Math.max(http.timeoutMs, limit + CODE_SLACK_MS) });
  }
  const res = await http.send("POST", `${path}/code`, { body, sandboxId, timeoutMs: null });
  const ex: Execution = { results: [], stdout: "", stderr: "", error: null, execution_count: 0, context: context ?? "", duration: "" };
  let ended = false;
  for await (const e of ndjson<Event>(res)) {
    if (e.type === "stdout") {
      ex.stdout += e.text;
      opts.onStdout?.(e.text);
    } else if (e.type === "stderr") {
      ex.stderr += e.text;
      opts.onStderr?.(e.text);
    } else if (e.type === "result") {
      const { type: _t, ...r } = e;
      ex.results.push(r);
      opts.onResult?.(r);
    } else if (e.type === "error") {
      ex.error = { name: e.name, value: e.value, traceback: e.traceback };
      opts.onError?.(ex.error);
    } else if (e.type === "end") {
      Object.assign(ex, { execution_count: e.execution_count, context: e.context, duration: e.duration });
      ended = true;
    } else if (e.type === "api_error") throw errorFromBody(e);
  }
  if (!ended) throw new ProviderError("the code stream ended before the run did", "INTERNAL_ERROR");
  return ex;
}

/** The id of a context given as itself or its id. */
export const contextId = (c: string | CodeContext) => (typeof c === "string" ? c : c.id);
