// The least of socket.io that Daytona's SDK needs: it opens `<prefix>/socket.io/` (engine.io 4
// over a WebSocket) as soon as it is constructed and, unanswered, keeps reconnecting with timers
// that hold a Node script open for minutes after its work is done. So: the engine.io open
// packet, the namespace CONNECT answered (with the API key from its payload), pings. No events
// are sent: the SDK's waits then read GET /sandbox/{id}, which answers at once.
import { randomBytes } from "node:crypto";
import type { FastifyInstance } from "fastify";
import { keyMatches } from "../../http/api-key.js";

const PING_MS = 25_000;

export async function socketIoRoutes(app: FastifyInstance, { apiKey }: { apiKey?: string }): Promise<void> {
  const handler = (ws: import("ws").WebSocket) => {
    ws.send(`0${JSON.stringify({ sid: randomBytes(10).toString("base64url"), upgrades: [], pingInterval: PING_MS, pingTimeout: 20_000, maxPayload: 1_000_000 })}`);
    const ping = setInterval(() => ws.send("2"), PING_MS);
    ping.unref();
    ws.on("message", (raw) => {
      const text = raw.toString();
      if (!text.startsWith("40")) return; // "3" (pong) and anything else need no answer
      let token: unknown;
      try {
        token = (JSON.parse(text.slice(2) || "{}") as { token?: unknown }).token;
      } catch {
        token = undefined;
      }
      const ok = typeof token === "string" && token !== "" && (!apiKey || keyMatches(token, apiKey));
      ws.send(ok ? `40${JSON.stringify({ sid: randomBytes(10).toString("base64url") })}` : `44${JSON.stringify({ message: "Unauthorized" })}`);
    });
    ws.on("close", () => clearInterval(ping));
    ws.on("error", () => clearInterval(ping));
  };
  app.get("/socket.io/", { websocket: true, schema: { hide: true } }, handler);
  app.get("/socket.io", { websocket: true, schema: { hide: true } }, handler);
}
