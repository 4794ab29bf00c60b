// Typed errors. Every error the SDK throws is a ForgevmError carrying the server's code and
// message, so callers can catch the base class or one case.

/** Base class: `code` is the server's error code (or the SDK's own), `statusCode` the HTTP status. */
export class ForgevmError extends Error {
  override name = "ForgevmError";
  constructor(
    message: string,
    readonly code: string = "",
    readonly statusCode?: number,
  ) {
    super(message);
  }
}

/** 400: the request was refused; the message names the field. */
export class BadRequestError extends ForgevmError {
  override name = "BadRequestError";
}

/** 401: missing or wrong API key. */
export class AuthenticationError extends ForgevmError {
  override name = "AuthenticationError";
}

/** 404: no such thing (template, snapshot, file…). */
export class NotFoundError extends ForgevmError {
  override name = "NotFoundError";
}

/** 404 for a sandbox: unknown, destroyed or expired. */
export class SandboxNotFoundError extends NotFoundError {
  override name = "SandboxNotFoundError";
  constructor(
    readonly sandboxId: string,
    message = `sandbox ${sandboxId} not found`,
  ) {
    super(message, "NOT_FOUND", 404);
  }
}

/** 409: conflicts with the current state (duplicate name, still starting…). */
export class ConflictError extends ForgevmError {
  override name = "ConflictError";
}

/** 5xx: the server or its VM provider failed (503: a full pool, shutting down, registry unreachable). */
export class ProviderError extends ForgevmError {
  override name = "ProviderError";
}

/** The server could not be reached at all, or did not answer within the timeout. */
export class ConnectionError extends ForgevmError {
  override name = "ConnectionError";
  constructor(message: string) {
    super(message, "CONNECTION_ERROR");
  }
}

/** The error a failed response stands for. `sandboxId` turns a 404 into SandboxNotFoundError. */
export async function errorFrom(res: Response, sandboxId?: string): Promise<ForgevmError> {
  const text = await res.text().catch(() => "");
  let code = "";
  let message = text || res.statusText;
  try {
    const body = JSON.parse(text) as { code?: string; message?: string };
    code = body.code ?? "";
    message = body.message ?? message;
  } catch {
    // not JSON: keep the text
  }
  const s = res.status;
  if (s === 404 && sandboxId && /sandbox/i.test(message)) return new SandboxNotFoundError(sandboxId, message);
  if (s === 404) return new NotFoundError(message, code || "NOT_FOUND", s);
  if (s === 401) return new AuthenticationError(message, code || "UNAUTHORIZED", s);
  if (s === 400 || s === 413) return new BadRequestError(message, code || "BAD_REQUEST", s);
  if (s === 409) return new ConflictError(message, code || "CONFLICT", s);
  if (s >= 500) return new ProviderError(message, code || "INTERNAL_ERROR", s);
  return new ForgevmError(message, code, s);
}
