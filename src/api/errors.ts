// Errors → HTTP, in one place: every failure leaves as {"code","message"} with the right status.
import type { FastifyError, FastifyInstance } from "fastify";
import { AgentError, ChannelClosedError } from "../agent-client/index.js";
import { BootError } from "../providers/provider.js";
import { ForgevmError, type ErrorCode } from "../core/errors.js";

export const STATUS: Record<ErrorCode, number> = {
  BAD_REQUEST: 400,
  UNAUTHORIZED: 401,
  NOT_FOUND: 404,
  METHOD_NOT_ALLOWED: 405,
  CONFLICT: 409,
  PAYLOAD_TOO_LARGE: 413,
  UNAVAILABLE: 503,
  INTERNAL_ERROR: 500,
};

// What a guest errno means to an API caller.
const AGENT_CODES: Record<string, ErrorCode> = {
  ENOENT: "NOT_FOUND",
  EINVAL: "BAD_REQUEST",
  EISDIR: "BAD_REQUEST",
  ENOTDIR: "BAD_REQUEST",
  ENAMETOOLONG: "BAD_REQUEST",
  ELOOP: "BAD_REQUEST",
  EACCES: "BAD_REQUEST",
  EPERM: "BAD_REQUEST",
  ENOSPC: "BAD_REQUEST",
  EFBIG: "BAD_REQUEST",
  EROFS: "BAD_REQUEST",
  EEXIST: "CONFLICT",
  ENOTEMPTY: "CONFLICT",
  EBUSY: "CONFLICT",
};

/** The API error for anything thrown while handling a request. */
export function toApiError(err: unknown): { status: number; code: ErrorCode; message: string } {
  if (err instanceof ForgevmError) return { status: STATUS[err.code], code: err.code, message: err.message };
  if (err instanceof AgentError) {
    const code = AGENT_CODES[err.code] ?? "INTERNAL_ERROR";
    return { status: STATUS[code], code, message: err.message };
  }
  if (err instanceof ChannelClosedError) return { status: 503, code: "UNAVAILABLE", message: `the sandbox's VM is not answering: ${err.message}` };
  if (err instanceof BootError) return { status: 500, code: "INTERNAL_ERROR", message: err.message.split("\n")[0] };
  const fe = err as FastifyError & { validation?: { instancePath: string; message?: string; params?: Record<string, unknown> }[]; validationContext?: string };
  if (fe?.validation?.length) {
    const v = fe.validation[0];
    const missing = v.params?.missingProperty as string | undefined;
    const field = [v.instancePath.replace(/^\//, "").replace(/\//g, "."), missing].filter(Boolean).join(".") || fe.validationContext || "body";
    const what = missing ? "is required" : v.message ?? "is invalid";
    return { status: 400, code: "BAD_REQUEST", message: `${field} ${what}` };
  }
  if (fe?.code === "FST_ERR_CTP_INVALID_JSON_BODY" || fe?.code === "FST_ERR_CTP_EMPTY_JSON_BODY" || (fe instanceof SyntaxError && fe.statusCode === 400)) {
    return { status: 400, code: "BAD_REQUEST", message: `the request body is not valid JSON: ${fe.message}` };
  }
  if (fe?.code === "FST_ERR_CTP_BODY_TOO_LARGE") return { status: 413, code: "PAYLOAD_TOO_LARGE", message: "the request body is larger than server.body_limit_mb allows" };
  if (fe?.code === "FST_ERR_CTP_INVALID_MEDIA_TYPE") return { status: 400, code: "BAD_REQUEST", message: `unsupported Content-Type: send application/json${fe.message ? ` (${fe.message})` : ""}` };
  if (typeof fe?.statusCode === "number" && fe.statusCode >= 400 && fe.statusCode < 500) {
    return { status: fe.statusCode, code: "BAD_REQUEST", message: fe.message };
  }
  if (err instanceof RangeError) return { status: 400, code: "BAD_REQUEST", message: err.message };
  return { status: 500, code: "INTERNAL_ERROR", message: (err as Error)?.message ?? String(err) };
}

/** Installs the error handler and the JSON 404 / 405 handler. */
export function installErrorHandling(app: FastifyInstance, routePatterns: { method: string; re: RegExp }[]): void {
  app.setErrorHandler((err, req, reply) => {
    const e = toApiError(err);
    if (e.status >= 500) req.log.error({ err }, "request failed");
    reply.status(e.status).send({ code: e.code, message: e.message });
  });
  app.setNotFoundHandler((req, reply) => {
    const path = req.url.split("?")[0];
    const methods = routePatterns.filter((r) => r.re.test(path)).map((r) => r.method);
    if (methods.length) {
      reply.header("Allow", [...new Set(methods)].join(", "));
      return reply.status(405).send({ code: "METHOD_NOT_ALLOWED", message: `${req.method} is not allowed on ${path}; use ${[...new Set(methods)].join(" or ")}` });
    }
    reply.status(404).send({ code: "NOT_FOUND", message: `no route ${req.method} ${path}` });
  });
}
