// Go-style durations ("90s", "30m", "1h30m", "250ms"), as the ForgeVM API uses them.
import { badRequest } from "./errors.js";

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
  if (ms > 365 * 86_400_000) throw badRequest(`${field} "${s}" is longer than a year`);
  return Math.round(ms);
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
