// What the audit log keeps of a call's arguments: everything needed to see what an agent did,
// nothing that would make the log itself a leak. Values under secret-looking names, credentials
// inside strings (Bearer tokens, key=value, user:password@ in URLs) and bulky contents (files,
// code, stdin, which are kept as sizes) are replaced before anything is written.

const SECRET_NAME = /secret|passw|token|api[_-]?key|credential|auth|private[_-]?key/i;
const IN_STRING: [RegExp, string][] = [
  [/\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]+/gi, "$1 [redacted]"],
  [/\b((?:[A-Za-z_]*(?:secret|passw(?:or)?d?|token|api[_-]?key|credential)[A-Za-z_]*)\s*[=:]\s*)("[^"]*"|'[^']*'|[^\s;&|]+)/gi, "$1[redacted]"],
  [/(\/\/[^/\s:@]+:)[^@\s/]+@/g, "$1[redacted]@"],
];
const MAX_STRING = 2000;

function scrub(s: string): string {
  let out = s;
  for (const [re, by] of IN_STRING) out = out.replace(re, by);
  return out.length > MAX_STRING ? `${out.slice(0, MAX_STRING)}… (${Buffer.byteLength(s)} bytes)` : out;
}

function clean(value: unknown, depth: number): unknown {
  if (typeof value === "string") return scrub(value);
  if (depth > 4 || value === null || typeof value !== "object") return value;
  if (Array.isArray(value)) return value.slice(0, 100).map((v) => clean(v, depth + 1));
  return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, SECRET_NAME.test(k) ? "[redacted]" : clean(v, depth + 1)]));
}

/** A call's arguments as the audit log keeps them. */
export function redactArguments(args: unknown, bulky: string[] = []): Record<string, unknown> | null {
  if (args === null || typeof args !== "object" || Array.isArray(args)) return args === undefined ? null : { value: clean(args, 0) };
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(args)) {
    if (bulky.includes(k) && typeof v === "string") out[k] = `<${Buffer.byteLength(v)} bytes>`;
    else out[k] = SECRET_NAME.test(k) ? "[redacted]" : clean(v, 1);
  }
  return out;
}
