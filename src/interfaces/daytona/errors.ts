// Daytona's error bodies: the control plane answers as its API does (Nest's filter: path,
// timestamp, statusCode, error, message), the toolbox as its daemon does (statusCode, message,
// code, source DAYTONA_DAEMON), so the unmodified SDK raises its own classes (not-found, auth,
// timeout, file-not-found). Our errors keep their status; a toolbox error may name its code.
import { capMessage } from "../../http/error-body.js";
import type { FastifyReply, FastifyRequest } from "fastify";
import { toApiError } from "../../core/error-map.js";
import { ForgevmError, type ErrorCode } from "../../http/errors.js";

/** A failure with one of the daemon's codes (FILE_NOT_FOUND, PROCESS_EXECUTION_TIMEOUT, …) and its status. */
export class DaemonError extends ForgevmError {
  constructor(
    code: ErrorCode,
    message: string,
    readonly daemonCode: string,
    readonly statusOverride?: number,
  ) {
    super(code, message);
  }

  override get status(): number {
    return this.statusOverride ?? super.status;
  }
}

const REASONS: Record<number, string> = {
  400: "Bad Request",
  401: "Unauthorized",
  403: "Forbidden",
  404: "Not Found",
  405: "Method Not Allowed",
  408: "Request Timeout",
  409: "Conflict",
  410: "Gone",
  413: "Payload Too Large",
  500: "Internal Server Error",
  501: "Not Implemented",
  503: "Service Unavailable",
  507: "Insufficient Storage",
};

const DAEMON_CODES: Record<number, string> = {
  400: "BAD_REQUEST",
  401: "UNAUTHORIZED",
  403: "FORBIDDEN",
  404: "NOT_FOUND",
  408: "REQUEST_TIMEOUT",
  409: "CONFLICT",
  410: "GONE",
  422: "UNPROCESSABLE_ENTITY",
};

/** Fastify's own errors (a body that fails its schema, JSON that does not parse) keep their 4xx. */
function statusOf(err: unknown): { status: number; message: string; daemonCode?: string } {
  const fastify = err as { statusCode?: number; validation?: unknown; message?: string };
  if (!(err instanceof ForgevmError) && typeof fastify.statusCode === "number" && fastify.statusCode < 500) {
    return { status: fastify.statusCode, message: capMessage(fastify.message ?? "bad request") };
  }
  const e = toApiError(err);
  return { status: e.status, message: capMessage(e.message), daemonCode: e instanceof DaemonError ? e.daemonCode : undefined };
}

/** The control plane's error answer. */
export function apiError(req: FastifyRequest, reply: FastifyReply, err: unknown): FastifyReply {
  const { status, message } = statusOf(err);
  return reply
    .status(status)
    .type("application/json")
    .send({ path: req.url.split("?")[0], timestamp: new Date().toISOString(), statusCode: status, error: REASONS[status] ?? "Error", message });
}

/** The toolbox's error answer; `notFoundCode` names what a 404 means on this route (FILE_NOT_FOUND on file routes). */
export function toolboxError(req: FastifyRequest, reply: FastifyReply, err: unknown, notFoundCode = "NOT_FOUND"): FastifyReply {
  const { status, message, daemonCode } = statusOf(err);
  const code = daemonCode ?? (status === 404 ? notFoundCode : (DAEMON_CODES[status] ?? "INTERNAL_SERVER_ERROR"));
  return reply
    .status(status)
    .type("application/json")
    .send(toolboxErrorBody(status, message, code, req.url.split("?")[0], req.method));
}

/** The daemon's error body (also the JSON of a bulk download's error part). */
export function toolboxErrorBody(status: number, message: string, code: string, path: string, method: string) {
  return { statusCode: status, message, code, timestamp: new Date().toISOString(), path, method, source: "DAYTONA_DAEMON" };
}
