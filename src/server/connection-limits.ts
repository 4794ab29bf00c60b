// What a client can hold before it has sent a whole request. HTTP lets a client take its time,
// so the server sets the pace: headers within a deadline (slow loris), a body that keeps moving
// (slow body), and a bounded number of connections still waiting for their first headers — past
// that the longest-waiting one is closed, so a client that sends whole requests is always served,
// whatever others hold open. A refused request (401, 403) closes its connection instead of
// reading the body that follows (access.ts), so an unauthenticated client holds no more than its
// headers. The numbers are server.headers_timeout, server.body_idle_timeout and
// server.max_pending_connections (docs/security.md).
import type { Socket } from "node:net";
import type { FastifyInstance } from "fastify";

export interface ConnectionLimits {
  /** A request's headers must all arrive within this. */
  headersTimeoutMs: number;
  /** While a request is arriving, its connection may go this long without a byte. */
  bodyIdleMs: number;
  /** Connections that have not sent their first request's headers yet, at most. */
  maxPending: number;
}

/** The http.ServerOptions these limits need at construction (the headers deadline is checked this often). */
export function serverOptions(l: ConnectionLimits): { headersTimeout: number; requestTimeout: number; connectionsCheckingInterval: number } {
  return { headersTimeout: l.headersTimeoutMs, requestTimeout: 0, connectionsCheckingInterval: Math.min(1000, l.headersTimeoutMs) };
}

/** Installs the idle deadline of arriving requests and the bound on connections that wait for headers. */
export function installConnectionLimits(app: FastifyInstance, l: ConnectionLimits): void {
  const server = app.server;
  // Node's own: a connection idle this long is closed. It guards a request while it arrives and
  // is lifted once the request is whole (a long exec then waits without a byte on the wire).
  server.setTimeout(l.bodyIdleMs);
  const pending = new Set<Socket>();
  server.on("connection", (socket: Socket) => {
    pending.add(socket);
    socket.once("close", () => pending.delete(socket));
    if (pending.size > l.maxPending) {
      const oldest = pending.values().next().value as Socket;
      pending.delete(oldest);
      oldest.destroy();
    }
  });
  server.on("request", (req: { socket: Socket }) => pending.delete(req.socket));
  server.on("upgrade", (req: { socket: Socket }) => pending.delete(req.socket));

  app.addHook("preHandler", async (req) => {
    const socket = req.raw.socket;
    if (req.raw.complete) socket.setTimeout(0);
    else req.raw.once("end", () => socket.setTimeout(0)); // a body the route streams: guarded until its end
  });
  // The next request on a kept-alive connection is guarded again (an upgraded one is not HTTP any more).
  app.addHook("onResponse", async (req) => {
    if (!req.headers.upgrade && !req.raw.socket.destroyed) req.raw.socket.setTimeout(l.bodyIdleMs);
  });
}
