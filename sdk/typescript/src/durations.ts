// Durations as the server takes them ("30s", "1h30m") and as milliseconds.

/** A duration for the server: strings as they are, numbers as milliseconds. */
export function durationString(t: string | number | undefined): string | undefined {
  return typeof t === "number" ? `${Math.max(1, Math.round(t))}ms` : t;
}

/** A duration in milliseconds (undefined for none). */
export function durationMs(t: string | number | undefined): number | undefined {
  if (typeof t === "number") return t;
  if (!t) return undefined;
  let ms = 0;
  for (const [, n, u] of t.matchAll(/([0-9.]+)(ms|h|m|s)/g)) ms += Number(n) * { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }[u as "ms"];
  return ms || undefined;
}
