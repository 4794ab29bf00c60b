// One HTTP request relayed to a server inside a sandbox over a connection its agent opened:
// method, path, headers and both bodies streamed, hop-by-hop headers dropped. E2B's port traffic
// and Daytona's preview URLs both go through here.
import { request as httpRequest } from "node:http";
import type { Duplex } from "node:stream";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { FastifyReply, FastifyRequest } from "fastify";

/** Headers of the hop to this server, never passed to the guest. */
const HOP = new Set(["connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade", "host"]);

/** Proxies `req` to `path` over `conn` with this Host, leaving out the headers named in `drop` (lower case). */
export function forwardRequest(req: FastifyRequest, reply: FastifyReply, conn: Duplex, path: string, host: string, drop: string[] = []): void {
  reply.hijack();
  forwardRaw(req.raw, reply.raw, conn, path, host, drop);
}

/** forwardRequest for a plain Node request; a Set-Cookie already on `res` is kept beside the guest's. */
export function forwardRaw(req: IncomingMessage, res: ServerResponse, conn: Duplex, path: string, host: string, drop: string[] = []): void {
  const headers: Record<string, string | string[]> = {};
  for (const [k, v] of Object.entries(req.headers)) {
    if (v === undefined || HOP.has(k) || drop.includes(k)) continue;
    headers[k] = v;
  }
  headers.host = host;
  const upstream = httpRequest({ method: req.method, path, headers, createConnection: () => conn });
  upstream.on("response", (r) => {
    const out: Record<string, string | string[]> = {};
    for (const [k, v] of Object.entries(r.headers)) if (v !== undefined && !HOP.has(k)) out[k] = v;
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
