// Quoting for /bin/sh, shared by the REST layer (exec's args) and generated build steps.

/** Quotes one argument for /bin/sh. */
export function shellQuote(s: string): string {
  return /^[A-Za-z0-9_\-+=.,/:@%]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`;
}
