// How an exec stream ends, one definition for both transports: NDJSON lines carry it under
// `"stream": "exit" | "error"`, WebSocket messages under `"type": "done" | "error"`, with the same
// fields after that — the exit code, whether it timed out and how long it ran; or the error's
// code, message and whether to retry, as in every error response.
import type { ServerResponse } from "node:http";
import type { ExecResult } from "../../core/types.js";
import { formatDuration } from "../../schemas/durations.js";
import { toApiError } from "../../core/error-map.js";
import { errorBody, type ErrorBody } from "../../http/error-body.js";

export interface ExitFields {
  exit_code: number;
  timed_out: boolean;
  duration: string;
}

export function exitFields(r: ExecResult, durationMs: number): ExitFields {
  return { exit_code: r.exit_code, timed_out: r.timed_out, duration: formatDuration(durationMs) };
}

export function errorFields(err: unknown): ErrorBody {
  return errorBody(toApiError(err));
}

/** The NDJSON line that ends a streamed exec. */
export function ndjsonEnd(end: { ok: ExitFields } | { error: ErrorBody }): string {
  return JSON.stringify("ok" in end ? { stream: "exit", data: "", ...end.ok } : { stream: "error", data: end.error.message, ...end.error });
}

/** The WebSocket message that ends an exec. */
export function wsEnd(end: { ok: ExitFields } | { error: ErrorBody }): string {
  return JSON.stringify("ok" in end ? { type: "done", ...end.ok } : { type: "error", ...end.error });
}

/**
 * Streams NDJSON on a hijacked reply: the lines already kept, then each new one `subscribe`
 * delivers until it calls its `end` (or the client goes); `last` may write a closing line.
 */
export async function followNdjson<T>(
  out: ServerResponse,
  requestId: string,
  past: T[],
  subscribe: (write: (v: T) => void, end: () => void) => () => void,
  last?: () => unknown,
): Promise<void> {
  out.writeHead(200, { "Content-Type": "application/x-ndjson", "Cache-Control": "no-store", "X-Request-ID": requestId });
  for (const v of past) out.write(`${JSON.stringify(v)}\n`);
  await new Promise<void>((resolve) => {
    let ended = false;
    let off: (() => void) | undefined;
    const end = () => {
      ended = true;
      off?.();
      resolve();
    };
    // `end` may come at once (the thing followed is over), before subscribe returns.
    off = subscribe((v) => out.write(`${JSON.stringify(v)}\n`), end);
    if (ended) off();
    out.once("close", end);
  });
  if (!out.writableEnded) out.end(last ? `${JSON.stringify(last())}\n` : undefined);
}
