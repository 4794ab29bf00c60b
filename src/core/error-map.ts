// What failures below core mean to a caller: every interface reports errors through this one
// mapping, so a guest's errno or a dead VM reads the same from REST, the CLI and the library.
import { AgentError, AgentTimeoutError, ChannelClosedError, HostLeftError } from "../agent-client/index.js";
import { BootError, HostDiskFullError } from "../providers/provider.js";
import { DigestMismatchError } from "../images/blobs.js";
import { LayerError } from "../images/flatten.js";
import { ImageReferenceError } from "../images/reference.js";
import { BodyError } from "../util/detachable.js";
import { type BodyLimits, requestError } from "../http/error-body.js";
import { ForgevmError, type ErrorCode } from "../http/errors.js";

// A guest errno is about the caller's request inside the sandbox (a missing file, a full disk,
// a read the kernel refuses), so it is a 4xx unless it says the thing is not there or is in use.
const GUEST_ERRNO: Record<string, ErrorCode> = {
  ENOSPC: "INSUFFICIENT_STORAGE",
  EDQUOT: "INSUFFICIENT_STORAGE",
  ENOENT: "NOT_FOUND",
  EEXIST: "CONFLICT",
  ENOTEMPTY: "CONFLICT",
  EBUSY: "CONFLICT",
  ETXTBSY: "CONFLICT",
  E2BIG: "PAYLOAD_TOO_LARGE",
};

/** Whether a failure of the host's own (a file, the database, QEMU writing its disk or a snapshot) is a full disk. */
export function isHostDiskFull(err: unknown): boolean {
  const e = err as { code?: string; message?: string } | null;
  if (!e || err instanceof AgentError) return false;
  if (err instanceof HostDiskFullError) return true;
  return e.code === "ENOSPC" || e.code === "EDQUOT" || e.code === "SQLITE_FULL" || /No space left on device|database or disk is full/.test(e.message ?? "");
}

/** The error a full data directory stands for. */
export const hostDiskFull = (what: string) =>
  new ForgevmError(
    "INSUFFICIENT_STORAGE",
    `the server's disk is full (${what}): its sandboxes wait and go on when there is room again; free space in the data directory, then retry`,
  );

/** The ForgevmError a failure stands for (ForgevmErrors pass through unchanged). */
export function toForgevmError(err: unknown): ForgevmError {
  if (err instanceof ForgevmError) return err;
  if (isHostDiskFull(err)) return hostDiskFull((err as Error).message.split("\n")[0]);
  // The errno goes along, for interfaces whose protocol tells some apart (E2B: a full disk is 507).
  if (err instanceof AgentError) return new ForgevmError(GUEST_ERRNO[err.code] ?? "BAD_REQUEST", err.message, { errno: err.code });
  if (err instanceof HostLeftError) return new ForgevmError("UNAVAILABLE", err.message);
  if (err instanceof ChannelClosedError) return new ForgevmError("UNAVAILABLE", `the sandbox's VM is not answering: ${err.message}`);
  if (err instanceof AgentTimeoutError) return new ForgevmError("UNAVAILABLE", err.message);
  if (err instanceof BootError) return new ForgevmError("UNAVAILABLE", `the VM did not start: ${err.message.split("\n")[0]}`);
  if (err instanceof RangeError || err instanceof BodyError) return new ForgevmError("BAD_REQUEST", err.message);
  // An image whose content does not match its digest, or whose layer cannot be unpacked, is the sender's.
  if (err instanceof DigestMismatchError || err instanceof LayerError || err instanceof ImageReferenceError) return new ForgevmError("BAD_REQUEST", err.message);
  return new ForgevmError("INTERNAL_ERROR", (err as Error)?.message ?? String(err));
}

/** The error to answer with for anything thrown while an HTTP interface handled a request. */
export function toApiError(err: unknown, limits?: BodyLimits): ForgevmError {
  return requestError(err, limits) ?? toForgevmError(err);
}
