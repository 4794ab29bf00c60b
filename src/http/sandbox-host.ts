// Sandbox ports named by Host, `<port>-<sandboxId>.<domain>`: E2B's getHost form, and Daytona's
// wildcard previews under a domain of their own. One parser for both, so they read a Host alike.

/** The loopback domain every Host under which browsers and curl resolve to this machine (RFC 6761). */
export const LOCALHOST = "localhost";

/**
 * The sandbox and port a Host header names (`<port>-<id>.<domain>`), or null. With a configured
 * domain the rest must be it; without one, any `*.localhost` (with any port) is taken.
 */
export function sandboxHostOf(host: string | undefined, domain: string | undefined): { id: string; port: number } | null {
  if (!host) return null;
  const h = host.toLowerCase();
  const dot = h.indexOf(".");
  if (dot < 0) return null;
  const m = /^(\d{1,5})-([a-z0-9][a-z0-9_-]{0,127})$/.exec(h.slice(0, dot));
  if (!m) return null;
  const rest = h.slice(dot + 1);
  const ok = domain ? rest === domain.toLowerCase() || rest.split(":")[0] === domain.toLowerCase() : rest === LOCALHOST || rest.startsWith(`${LOCALHOST}:`);
  const port = Number(m[1]);
  return ok && port >= 1 && port <= 65535 ? { id: m[2], port } : null;
}
