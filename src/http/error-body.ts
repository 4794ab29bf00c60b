// What every HTTP interface (REST, E2B, the exec stream) shares about errors: the JSON body an
// error leaves as, the errors Fastify's own checks and Node's HTTP parser raise, said in our
// codes, and the "did you mean" a misspelt field gets. Ground floor: it knows no core.
import type { Socket } from "node:net";
import type { FastifyError } from "fastify";
import { ForgevmError, type ErrorCode } from "./errors.js";

/** The JSON body of an error response (and of the error message ending an exec stream). */
export interface ErrorBody {
  code: ErrorCode;
  message: string;
  retryable: boolean;
  [detail: string]: string | boolean;
}

/** Longest message an error body carries: messages quote what was sent, which may be megabytes. */
const MAX_MESSAGE = 2000;

/** An error message as every interface sends it: at most MAX_MESSAGE characters, saying how many more there were. */
export function capMessage(message: string): string {
  return message.length > MAX_MESSAGE ? `${message.slice(0, MAX_MESSAGE)}… (${message.length - MAX_MESSAGE} more characters)` : message;
}

export function errorBody(e: ForgevmError): ErrorBody {
  return { ...e.detail, code: e.code, message: capMessage(e.message), retryable: e.retryable };
}

/** What a request's route takes: its own body limit, and the server's (which server.body_limit_mb sets). */
export interface BodyLimits {
  route: number;
  server: number;
}

/**
 * The error for what Fastify or the HTTP layer refused (validation, JSON, body size, other 4xx),
 * or null. With `limits`, a body too large is said in bytes, and names server.body_limit_mb only
 * where that setting governs the route (MCP's and the uploads' limits are their own).
 */
export function requestError(err: unknown, limits?: BodyLimits): ForgevmError | null {
  const fe = err as FastifyError & {
    validation?: { instancePath: string; message?: string; params?: Record<string, unknown>; parentSchema?: { properties?: object } }[];
    validationContext?: string;
  };
  if (fe?.validation?.length) {
    const v = fe.validation[0];
    const missing = v.params?.missingProperty as string | undefined;
    const extra = v.params?.additionalProperty as string | undefined;
    const field = [v.instancePath.replace(/^\//, "").replace(/\//g, "."), missing ?? extra].filter(Boolean).join(".") || fe.validationContext || "body";
    const what = missing ? "is required" : extra ? `is not a field of this request${suggest(extra, Object.keys(v.parentSchema?.properties ?? {}))}` : (v.message ?? "is invalid");
    return new ForgevmError("BAD_REQUEST", `${field} ${what}`);
  }
  if (fe?.code === "FST_ERR_CTP_INVALID_JSON_BODY" || (fe instanceof SyntaxError && fe.statusCode === 400)) {
    return new ForgevmError("BAD_REQUEST", `the request body is not valid JSON: ${fe.message}`);
  }
  if (fe?.code === "FST_ERR_CTP_BODY_TOO_LARGE") {
    if (!limits) return new ForgevmError("PAYLOAD_TOO_LARGE", "the request body is larger than this route takes");
    const size = limits.route < 1024 * 1024 ? `${Math.round(limits.route / 1024)} KiB` : `${Math.round((limits.route / 1024 / 1024) * 10) / 10} MiB`;
    const setting = limits.route === limits.server ? " (server.body_limit_mb)" : ", a limit of its own that no setting changes";
    return new ForgevmError("PAYLOAD_TOO_LARGE", `the request body is larger than the ${size} this route takes${setting}`);
  }
  if (fe?.code === "FST_ERR_CTP_INVALID_MEDIA_TYPE")
    return new ForgevmError("BAD_REQUEST", `unsupported Content-Type: send application/json${fe.message ? ` (${fe.message})` : ""}`);
  if (!(err instanceof ForgevmError) && typeof fe?.statusCode === "number" && fe.statusCode >= 400 && fe.statusCode < 500) {
    return new ForgevmError(fe.statusCode === 413 ? "PAYLOAD_TOO_LARGE" : fe.statusCode === 431 ? "HEADERS_TOO_LARGE" : "BAD_REQUEST", fe.message);
  }
  return null;
}

/** `; did you mean "x"?` when one of `known` is close to `given` (a typo), else "". */
export function suggest(given: string, known: string[]): string {
  const close = known
    .map((k) => ({ k, d: distance(given.toLowerCase(), k.toLowerCase()) }))
    .filter((c) => c.d <= Math.max(1, Math.floor(c.k.length / 3)))
    .sort((a, b) => a.d - b.d)[0];
  return close ? `; did you mean "${close.k}"?` : "";
}

/** Edit distance (insertions, deletions, substitutions, adjacent swaps). */
function distance(a: string, b: string): number {
  const d = Array.from({ length: a.length + 1 }, (_, i) => Array.from({ length: b.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)));
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      d[i][j] = Math.min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1));
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) d[i][j] = Math.min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.length][b.length];
}

/** Fastify's `clientErrorHandler`: a request Node's HTTP parser refused (bad bytes, headers too large). */
export function clientErrorHandler(err: Error & { code?: string }, socket: Socket): void {
  if (!socket.writable) return void socket.destroy();
  const e =
    err.code === "HPE_HEADER_OVERFLOW"
      ? new ForgevmError("HEADERS_TOO_LARGE", "the request's headers are larger than the server accepts (16 KiB)")
      : err.code === "ERR_HTTP_REQUEST_TIMEOUT"
        ? new ForgevmError("BAD_REQUEST", "the request did not arrive in time")
        : new ForgevmError("BAD_REQUEST", `the request is not valid HTTP (${err.code ?? err.message})`);
  const body = JSON.stringify(errorBody(e));
  socket.end(
    `HTTP/1.1 ${e.status} ${statusText(e.code)}\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
  );
}

function statusText(code: ErrorCode): string {
  return code === "HEADERS_TOO_LARGE" ? "Request Header Fields Too Large" : code === "BAD_REQUEST" ? "Bad Request" : "Error";
}
