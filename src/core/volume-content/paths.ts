// Paths inside a volume, as the content operations take them: absolute, clean, and free of what
// would end a debugfs request (quotes, backslashes, control characters).
import { posix } from "node:path";
import { badRequest } from "../../http/errors.js";

/** Throws a 400 naming `path` unless it is an absolute, clean path of at most 4096 bytes. */
export function checkPath(path: string): void {
  if (typeof path !== "string" || !path.startsWith("/")) throw badRequest(`path must be absolute (start with "/"), got "${String(path).slice(0, 100)}"`);
  if (Buffer.byteLength(path) > 4096) throw badRequest("path is longer than 4096 bytes");
  if ([...path].some((c) => c === '"' || c === "\\" || c.charCodeAt(0) < 0x20 || c.charCodeAt(0) === 0x7f)) {
    throw badRequest("path holds a quote, a backslash or a control character");
  }
  if (path !== "/" && (posix.normalize(path) !== path || path.endsWith("/") || path.split("/").includes(".."))) {
    throw badRequest(`path: "${path.slice(0, 100)}" is not clean (no ".", "..", "//" or trailing "/")`);
  }
}

/** The directory holding `path` ("/" for a top-level entry). */
export function parentOf(path: string): string {
  return posix.dirname(path);
}

/** The last part of `path`. */
export function basename(path: string): string {
  return posix.basename(path);
}
