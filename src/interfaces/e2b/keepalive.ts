// Keepalives on E2B's streams: a message whenever a stream has been quiet for a while, so the
// client (and any proxy between) knows it is alive. One timer per stream, however much flows.
import type { FastifyRequest } from "fastify";

/** envd's keepalive period when the client names none, in seconds. */
const DEFAULT_S = 90;

/** A stream's keepalive period in ms: the client's Keepalive-Ping-Interval (seconds), else envd's. */
export function keepaliveMs(req: FastifyRequest): number {
  const header = Number(req.headers["keepalive-ping-interval"]);
  return (Number.isFinite(header) && header > 0 ? Math.min(header, 3600) : DEFAULT_S) * 1000;
}

/** Calls `ping` whenever `everyMs` passed without a `touch`; `stop` ends it. */
export function quietTicker(everyMs: number, ping: () => void): { touch(): void; stop(): void } {
  let last = Date.now();
  const timer = setInterval(
    () => {
      if (Date.now() - last < everyMs) return;
      last = Date.now();
      ping();
    },
    Math.max(50, everyMs / 2),
  );
  return { touch: () => void (last = Date.now()), stop: () => clearInterval(timer) };
}
