// Checks of values every interface and core share, where a schema cannot say it all: environment
// variables an exec can take, a sandbox's metadata, an owner id. Each fails with a 400 naming the
// field, so what one path accepts another does not refuse later.
import { badRequest } from "../http/errors.js";

/** The longest variable name, and the most one variable and all of them may take (Linux refuses an exec past MAX_ARG_STRLEN, 128 KiB, per string). */
const MAX_ENV_NAME = 256;
const MAX_ENV_ENTRY = 128 * 1024 - 1;
const MAX_ENV_TOTAL = 1024 * 1024;

/**
 * Names the agent can set: not empty, no "=", no NUL, at most 256 bytes; values without NUL; each
 * variable and all of them within what an exec can take, so that none a spawn accepts breaks its
 * later execs.
 */
export function checkEnv(env: Record<string, string> | undefined | null, field: string): void {
  if (!env) return;
  const names = Object.keys(env);
  if (names.length > 4096) throw badRequest(`${field}: at most 4096 variables`);
  let total = 0;
  for (const [k, v] of Object.entries(env)) {
    const shown = k.length > 40 ? `${k.slice(0, 40)}…` : k;
    if (!k || k.includes("=") || k.includes("\0")) throw badRequest(`${field}: "${shown}" is not a valid variable name (it must not be empty or contain "=" or NUL)`);
    if (Buffer.byteLength(k) > MAX_ENV_NAME) throw badRequest(`${field}: the name "${shown}" is longer than ${MAX_ENV_NAME} bytes`);
    if (typeof v !== "string" || v.includes("\0")) throw badRequest(`${field}: the value of ${shown} must be a string without NUL bytes`);
    const size = Buffer.byteLength(k) + 1 + Buffer.byteLength(v);
    if (size > MAX_ENV_ENTRY) throw badRequest(`${field}: ${shown} is ${size} bytes; a variable may have at most ${MAX_ENV_ENTRY} (the kernel's limit for one)`);
    total += size + 1;
  }
  if (total > MAX_ENV_TOTAL) throw badRequest(`${field}: the variables take ${total} bytes; at most ${MAX_ENV_TOTAL} in all`);
}

/** A sandbox's metadata: at most 64 entries, keys of 1-128 characters and values of at most 1024, none holding NUL or invalid text. */
export function checkMetadata(metadata: Record<string, string> | undefined | null, field = "metadata"): void {
  if (!metadata) return;
  const entries = Object.entries(metadata);
  if (entries.length > 64) throw badRequest(`${field}: at most 64 entries, got ${entries.length}`);
  for (const [k, v] of entries) {
    const shown = k.length > 40 ? `${k.slice(0, 40)}…` : k;
    if (!k || k.length > 128) throw badRequest(`${field}: a key must be 1-128 characters, got "${shown}"`);
    if (/[\0\uFFFD]/.test(k)) throw badRequest(`${field}: the key "${shown}" holds NUL or bytes that are not UTF-8`);
    if (typeof v !== "string" || v.length > 1024) throw badRequest(`${field}.${shown} must be a string of at most 1024 characters`);
    if (/[\0\uFFFD]/.test(v)) throw badRequest(`${field}.${shown} holds NUL or bytes that are not UTF-8`);
  }
}

/** An owner id: 1-256 characters without NUL or control characters. */
export function checkOwner(owner: string | null | undefined, field = "owner_id"): void {
  if (owner === undefined || owner === null) return;
  // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what is refused
  if (!owner || owner.length > 256 || /[\u0000-\u001f\u007f\uFFFD]/.test(owner)) throw badRequest(`${field} must be 1-256 printable characters`);
}
