// Typed errors. Every error the SDK throws is a ForgevmError carrying the server's code and
// message; the class comes from the code (one table, the server's: docs/errors.md), never from
// the wording of a message.

/** Base class: `code` is the server's error code (or the SDK's own), `statusCode` the HTTP status. */
export class ForgevmError extends Error {
  override name = "ForgevmError";
  constructor(
    message: string,
    readonly code: string = "",
    readonly statusCode?: number,
    /** Whether the same request may succeed later (the server is busy, a VM is not answering). */
    readonly retryable = false,
  ) {
    super(message);
  }
}

/** BAD_REQUEST, PAYLOAD_TOO_LARGE, HEADERS_TOO_LARGE: the request was refused; the message names the field. */
export class BadRequestError extends ForgevmError {
  override name = "BadRequestError";
}

/** UNAUTHORIZED: missing or wrong API key. */
export class AuthenticationError extends ForgevmError {
  override name = "AuthenticationError";
}

/** FORBIDDEN: the server does not take requests from this origin or host name, or its policy for agents refuses the call. */
export class ForbiddenError extends ForgevmError {
  override name = "ForbiddenError";
}

/** NOT_FOUND: no such thing (template, snapshot, file…). */
export class NotFoundError extends ForgevmError {
  override name = "NotFoundError";
}

/** NOT_FOUND for the sandbox itself: unknown, destroyed or expired. */
export class SandboxNotFoundError extends NotFoundError {
  override name = "SandboxNotFoundError";
  constructor(
    readonly sandboxId: string,
    message = `sandbox ${sandboxId} not found`,
  ) {
    super(message, "NOT_FOUND", 404);
  }
}

/** CONFLICT (and METHOD_NOT_ALLOWED): conflicts with the current state (duplicate name, still starting…). */
export class ConflictError extends ForgevmError {
  override name = "ConflictError";
}

/** UNAVAILABLE, INTERNAL_ERROR: the server or its VM provider failed (503: a full pool, shutting down, registry unreachable). */
export class ProviderError extends ForgevmError {
  override name = "ProviderError";
}

/** INSUFFICIENT_STORAGE: a disk is full (the server's, whose sandboxes wait for space, or the sandbox's own); retry once there is room. */
export class StorageFullError extends ForgevmError {
  override name = "StorageFullError";
}

/** The server could not be reached at all, or did not answer within the timeout. */
export class ConnectionError extends ForgevmError {
  override name = "ConnectionError";
  constructor(message: string) {
    super(message, "CONNECTION_ERROR", undefined, true);
  }
}

type ErrorClass = new (message: string, code?: string, statusCode?: number, retryable?: boolean) => ForgevmError;

/** Every code the server sends, and the class it becomes (the server's table: src/http/errors.ts). */
export const ERROR_CLASSES: Record<string, ErrorClass> = {
  BAD_REQUEST: BadRequestError,
  UNAUTHORIZED: AuthenticationError,
  FORBIDDEN: ForbiddenError,
  NOT_FOUND: NotFoundError,
  METHOD_NOT_ALLOWED: ConflictError,
  CONFLICT: ConflictError,
  PAYLOAD_TOO_LARGE: BadRequestError,
  HEADERS_TOO_LARGE: BadRequestError,
  UNAVAILABLE: ProviderError,
  INSUFFICIENT_STORAGE: StorageFullError,
  INTERNAL_ERROR: ProviderError,
};

/** The error a server's error body (or stream error message) stands for. */
export function errorFromBody(body: { code?: string; message?: string; retryable?: boolean; sandbox_id?: string }, status?: number): ForgevmError {
  const code = body.code ?? "";
  const message = body.message ?? `HTTP ${status ?? "error"}`;
  if (code === "NOT_FOUND" && body.sandbox_id) return new SandboxNotFoundError(body.sandbox_id, message);
  const Class = ERROR_CLASSES[code] ?? (status && status >= 500 ? ProviderError : ForgevmError);
  return new Class(message, code, status, body.retryable ?? false);
}

/** The error a failed response stands for. */
export async function errorFrom(res: Response): Promise<ForgevmError> {
  const text = await res.text().catch(() => "");
  let body: { code?: string; message?: string; retryable?: boolean; sandbox_id?: string } = {};
  try {
    body = JSON.parse(text);
  } catch {
    body = { message: text || res.statusText };
  }
  return errorFromBody(body, res.status);
}
