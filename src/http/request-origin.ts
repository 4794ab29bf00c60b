// The origin a client reached this server at (`http://host:port`), for URLs handed back to it:
// the Host it sent, and https when a proxy in front says so (X-Forwarded-Proto).
import type { FastifyRequest } from "fastify";

export function requestOrigin(req: FastifyRequest): string {
  const proto =
    String(req.headers["x-forwarded-proto"] ?? "http")
      .split(",")[0]
      .trim() === "https"
      ? "https"
      : "http";
  return `${proto}://${req.headers.host ?? `127.0.0.1:${req.socket.localPort}`}`;
}
