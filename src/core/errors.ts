// One error hierarchy for every interface. The REST layer maps `code` to a status in one table
// (api/errors.ts); the CLI prints the message, which says what happened and what to do.

export const ERROR_CODES = ["BAD_REQUEST", "UNAUTHORIZED", "NOT_FOUND", "METHOD_NOT_ALLOWED", "CONFLICT", "PAYLOAD_TOO_LARGE", "UNAVAILABLE", "INTERNAL_ERROR"] as const;
export type ErrorCode = (typeof ERROR_CODES)[number];

export class ForgevmError extends Error {
  override name = "ForgevmError";
  constructor(
    readonly code: ErrorCode,
    message: string,
  ) {
    super(message);
  }
}

export const badRequest = (m: string) => new ForgevmError("BAD_REQUEST", m);
export const notFound = (m: string) => new ForgevmError("NOT_FOUND", m);
export const conflict = (m: string) => new ForgevmError("CONFLICT", m);
