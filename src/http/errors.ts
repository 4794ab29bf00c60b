// One error hierarchy for every interface. Each error has a code; ERRORS gives each code its
// HTTP status and whether trying again later can help. The HTTP interfaces (http/error-body.ts), the SDKs
// (which map codes back to their error classes) and docs/errors.md all follow this table, and a
// test fails when one of them drifts from it. Messages say what happened and what to do.

export const ERRORS = {
  BAD_REQUEST: { status: 400, retryable: false, what: "The request is malformed or asks for something this server cannot do; the message names the field." },
  UNAUTHORIZED: { status: 401, retryable: false, what: "The API key is missing or wrong." },
  FORBIDDEN: {
    status: 403,
    retryable: false,
    what: "The request came from a web page (Origin) or a host name (Host) this server does not allow, or the operator's policy for agents refuses it (the message names the rule).",
  },
  NOT_FOUND: { status: 404, retryable: false, what: "No such sandbox, file, template, snapshot, image or route." },
  METHOD_NOT_ALLOWED: { status: 405, retryable: false, what: "The route exists, but not with this method; the Allow header lists the ones it has." },
  CONFLICT: { status: 409, retryable: false, what: "The thing is in a state that does not allow this (still starting, already exists, in use)." },
  PAYLOAD_TOO_LARGE: { status: 413, retryable: false, what: "The body, a command or a message is larger than its limit." },
  HEADERS_TOO_LARGE: { status: 431, retryable: false, what: "The request's headers are larger than the server accepts." },
  UNAVAILABLE: { status: 503, retryable: true, what: "Not now: the server is shutting down, a pool is full, a registry cannot be reached, or a VM is not answering." },
  INSUFFICIENT_STORAGE: {
    status: 507,
    retryable: true,
    what: "A disk is full: the server's data directory (its sandboxes wait, paused, and go on when space returns) or the sandbox's own; the message says which.",
  },
  INTERNAL_ERROR: { status: 500, retryable: false, what: "A fault of the server's; the message says what failed." },
} as const satisfies Record<string, { status: number; retryable: boolean; what: string }>;

export type ErrorCode = keyof typeof ERRORS;
export const ERROR_CODES = Object.keys(ERRORS) as ErrorCode[];

/** The root of every error ForgeVM reports to a caller. */
export class ForgevmError extends Error {
  override name = "ForgevmError";
  constructor(
    readonly code: ErrorCode,
    message: string,
    /** Structured facts for the caller (e.g. `sandbox_id` when the sandbox itself is what is missing). */
    readonly detail: Record<string, string> = {},
  ) {
    super(message);
  }

  get status(): number {
    return ERRORS[this.code].status;
  }

  get retryable(): boolean {
    return ERRORS[this.code].retryable;
  }
}

export const badRequest = (m: string) => new ForgevmError("BAD_REQUEST", m);
export const notFound = (m: string) => new ForgevmError("NOT_FOUND", m);
export const conflict = (m: string) => new ForgevmError("CONFLICT", m);

/** The sandbox itself is unknown or no longer running (as opposed to something inside it). */
export const sandboxGone = (id: string, m: string) => new ForgevmError("NOT_FOUND", m, { sandbox_id: id });
