// One HTTP request relayed to a server inside a sandbox over a connection its agent opened:
// method, path, headers and both bodies streamed, hop-by-hop headers dropped. E2B's port traffic
// and Daytona's preview URLs both go through here. An upgrade (a WebSocket: noVNC's live view, a
// dev server's reload channel) is relayed as bytes, so the guest's server makes the handshake.
import { request as httpRequest } from "node:http";
import type { Duplex } from "node:stream";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { FastifyReply, FastifyRequest } from "fastify";

/** Headers of the hop to this server, never passed to the guest. */
const HOP = new Set(["connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade", "host"]);

/**
 * Response headers the host sets whatever the guest answered: each replaces the guest's header of
 * that name (lower case), and null removes it.
 */
export type FixedHeaders = Record<string, string | null>;

/** Proxies `req` to `path` over `conn` with this Host, leaving out the headers named in `drop` (lower case). */
export function forwardRequest(req: FastifyRequest, reply: FastifyReply, conn: Duplex, path: string, host: string, drop: string[] = [], fixed: FixedHeaders = {}): void {
  reply.hijack();
  forwardRaw(req.raw, reply.raw, conn, path, host, drop, fixed);
}

/** forwardRequest for a plain Node request; a Set-Cookie already on `res` is kept beside the guest's. */
export function forwardRaw(req: IncomingMessage, res: ServerResponse, conn: Duplex, path: string, host: string, drop: string[] = [], fixed: FixedHeaders = {}): void {
  const headers: Record<string, string | string[]> = {};
  for (const [k, v] of Object.entries(req.headers)) {
    if (v === undefined || HOP.has(k) || drop.includes(k)) continue;
    headers[k] = v;
  }
  headers.host = host;
  const upstream = httpRequest({ method: req.method, path, headers, createConnection: () => conn });
  upstream.on("response", (r) => {
    const out: Record<string, string | string[]> = {};
    for (const [k, v] of Object.entries(r.headers)) if (v !== undefined && !HOP.has(k) && !(k in fixed)) out[k] = v;
    for (const [k, v] of Object.entries(fixed)) if (v !== null) out[k] = v;
    const mine = res.getHeader("set-cookie");
    if (mine !== undefined && out["set-cookie"]) out["set-cookie"] = [...[mine].flat().map(String), ...[out["set-cookie"]].flat()];
    res.writeHead(r.statusCode ?? 502, r.statusMessage, out);
    r.pipe(res);
    r.on("error", () => res.destroy());
  });
  upstream.on("error", (e) => {
    if (res.headersSent) return void res.destroy();
    res.writeHead(502, { "content-type": "application/json" });
    res.end(JSON.stringify({ code: 502, message: `port traffic failed: ${e.message}` }));
  });
  res.on("close", () => upstream.destroy());
  req.pipe(upstream);
}

/**
 * Relays an upgrade request (`req.ws`: the server's WebSocket plugin routed it here) as bytes: its
 * head, with this Host and without the headers in `drop`, written to `conn`, then the two sockets
 * piped both ways. The guest's server answers the handshake itself, so subprotocols, extensions
 * and frames pass as they are; a client sends nothing before that answer, so no bytes are behind.
 */
export function forwardUpgrade(req: FastifyRequest, reply: FastifyReply, conn: Duplex, path: string, host: string, drop: string[] = []): void {
  reply.hijack();
  const socket = req.raw.socket;
  const head = [`${req.method} ${path} HTTP/1.1`, `Host: ${host}`];
  const raw = req.raw.rawHeaders;
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = raw[i].toLowerCase();
    if (name === "host" || drop.includes(name) || /[\r\n]/.test(raw[i + 1])) continue;
    head.push(`${raw[i]}: ${raw[i + 1]}`);
  }
  const end = () => {
    socket.destroy();
    conn.destroy();
  };
  socket.setTimeout(0);
  socket.on("error", end).on("close", end);
  conn.on("error", end).on("close", end);
  conn.write(`${head.join("\r\n")}\r\n\r\n`);
  conn.pipe(socket);
  socket.pipe(conn);
}
