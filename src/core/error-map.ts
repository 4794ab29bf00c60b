// What failures below core mean to a caller: every interface reports errors through this one
// mapping, so a guest's errno or a dead VM reads the same from REST, the CLI and the library.
import { AgentError, AgentTimeoutError, ChannelClosedError } from "../agent-client/index.js";
import { BootError } from "../providers/provider.js";
import { DigestMismatchError } from "../images/blobs.js";
import { LayerError } from "../images/flatten.js";
import { ImageReferenceError } from "../images/reference.js";
import { BodyError } from "../util/detachable.js";
import { ForgevmError, type ErrorCode } from "./errors.js";

// A guest errno is about the caller's request inside the sandbox (a missing file, a full disk,
// a read the kernel refuses), so it is a 4xx unless it says the thing is not there or is in use.
const GUEST_ERRNO: Record<string, ErrorCode> = {
  ENOENT: "NOT_FOUND",
  EEXIST: "CONFLICT",
  ENOTEMPTY: "CONFLICT",
  EBUSY: "CONFLICT",
  ETXTBSY: "CONFLICT",
  E2BIG: "PAYLOAD_TOO_LARGE",
};

/** The ForgevmError a failure stands for (ForgevmErrors pass through unchanged). */
export function toForgevmError(err: unknown): ForgevmError {
  if (err instanceof ForgevmError) return err;
  // The errno goes along, for interfaces whose protocol tells some apart (E2B: a full disk is 507).
  if (err instanceof AgentError) return new ForgevmError(GUEST_ERRNO[err.code] ?? "BAD_REQUEST", err.message, { errno: err.code });
  if (err instanceof ChannelClosedError) return new ForgevmError("UNAVAILABLE", `the sandbox's VM is not answering: ${err.message}`);
  if (err instanceof AgentTimeoutError) return new ForgevmError("UNAVAILABLE", err.message);
  if (err instanceof BootError) return new ForgevmError("UNAVAILABLE", `the VM did not start: ${err.message.split("\n")[0]}`);
  if (err instanceof RangeError || err instanceof BodyError) return new ForgevmError("BAD_REQUEST", err.message);
  // An image whose content does not match its digest, or whose layer cannot be unpacked, is the sender's.
  if (err instanceof DigestMismatchError || err instanceof LayerError || err instanceof ImageReferenceError) return new ForgevmError("BAD_REQUEST", err.message);
  return new ForgevmError("INTERNAL_ERROR", (err as Error)?.message ?? String(err));
}
