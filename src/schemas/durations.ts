// Go-style durations ("90s", "30m", "1h30m", "250ms"), as the ForgeVM API uses them.
import { badRequest } from "../http/errors.js";

const UNITS: Record<string, number> = { ns: 1e-6, us: 1e-3, µs: 1e-3, ms: 1, s: 1000, m: 60_000, h: 3_600_000 };
const TERM = /(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)/y;

/** Milliseconds in a positive duration string; a 400 naming `field` for anything else. */
export function parseDuration(value: unknown, field: string): number {
  if (typeof value !== "string" || value.trim() === "") throw badRequest(`${field} must be a duration such as "30m", "1h" or "90s"`);
  const s = value.trim();
  if (s.startsWith("-")) throw badRequest(`${field} must be positive, got "${s}"`);
  let ms = 0;
  TERM.lastIndex = 0;
  while (TERM.lastIndex < s.length) {
    const at = TERM.lastIndex;
    const m = TERM.exec(s);
    if (!m || m.index !== at) throw badRequest(`${field} "${s}" is not a duration (use forms like "30m", "1h30m", "90s")`);
    ms += Number(m[1]) * UNITS[m[2]];
  }
  if (!(ms > 0)) throw badRequest(`${field} must be greater than zero, got "${s}"`);
  if (ms > MAX_TTL_MS) throw badRequest(`${field} "${s}" is longer than a year`);
  return Math.round(ms);
}

/** The longest TTL a sandbox or template may have (one check everywhere). */
export const MAX_TTL_MS = 365 * 86_400_000;

/** A TTL of none: the sandbox lives until it is destroyed (services with a restart policy, "ttl": "0"). */
export const NO_TTL = Number.POSITIVE_INFINITY;

/**
 * A lifetime as core takes it: milliseconds from now, NO_TTL for none. Zero is a lifetime that has
 * run out (the sandbox ends at the reaper's next pass, as E2B's setTimeout(0) asks). A wire that
 * spells "none" as zero (REST's "0", a template's ttl_seconds, Daytona's minutes) says so where
 * it is read, with noneIfZero: "never" is spelled NO_TTL in core and nowhere else.
 */
export type Ttl = number;

/** A wire's lifetime in ms where zero means none, as core's Ttl. */
export const noneIfZero = (ms: number): Ttl => (ms === 0 ? NO_TTL : ms);

/** The expiry stored for a sandbox that has none: later than any real time, so no reaper query matches it. */
export const NO_EXPIRY = "9999-12-31T23:59:59.999Z";

/** An idle policy from its wire form, or a 400 naming `field`. */
export function parseIdle(value: { after?: unknown; action?: unknown }, field: string): { afterMs: number; action: "pause" | "stop" | "none" } {
  const action = value.action ?? "pause";
  if (action !== "pause" && action !== "stop" && action !== "none") throw badRequest(`${field}.action must be "pause", "stop" or "none"`);
  const afterMs = parseDuration(value.after, `${field}.after`);
  if (afterMs < 1000) throw badRequest(`${field}.after must be at least 1s`);
  return { afterMs, action };
}

/** A TTL: a positive duration up to a year, or "0" (or 0) for none (NO_TTL); a 400 naming `field` for anything else. */
export function parseTtl(value: unknown, field: string): Ttl {
  // The ForgeVM API spells none "0".
  if (value === 0 || (typeof value === "string" && /^\s*0+(\.0+)?\s*$/.test(value))) return NO_TTL;
  return parseDuration(value, field);
}

/** A TTL in whole seconds (a template's ttl_seconds): 0 for none, else 1 s up to a year. */
export function ttlSeconds(value: unknown, field: string): number {
  if (value === 0) return 0;
  if (typeof value !== "number" || !Number.isInteger(value) || value < 0 || value * 1000 > MAX_TTL_MS)
    throw badRequest(`${field} must be a whole number of seconds from 1 to ${MAX_TTL_MS / 1000} (a year), or 0 for none`);
  return value;
}

/** When something with this TTL expires, counted from `now`: NO_EXPIRY for none. */
export function expiryAfter(ttlMs: Ttl, now = Date.now()): string {
  return ttlMs === NO_TTL ? NO_EXPIRY : new Date(now + ttlMs).toISOString();
}

/** What is left of a stored expiry, in ms (NO_TTL for none). */
export function ttlLeft(expiresAt: string, now = Date.now()): Ttl {
  return expiresAt === NO_EXPIRY ? NO_TTL : Date.parse(expiresAt) - now;
}

/** A Go-style rendering of milliseconds: "1.234s", "2m3s", "15ms". */
export function formatDuration(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)}ms`;
  if (ms < 60_000) return `${+(ms / 1000).toFixed(3)}s`;
  const h = Math.floor(ms / 3_600_000);
  const m = Math.floor((ms % 3_600_000) / 60_000);
  const s = +((ms % 60_000) / 1000).toFixed(3);
  return `${h ? `${h}h` : ""}${m || h ? `${m}m` : ""}${s}s`;
}
