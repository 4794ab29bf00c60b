// Sandbox ports over HTTP, as E2B's proxy serves them: a request whose Host is
// `<port>-<sandboxId>.<domain>` (what the SDK's getHost(port) names), or that carries the
// E2b-Sandbox-Id and E2b-Sandbox-Port headers, goes to that port inside the sandbox through its
// agent. Port 49983 is envd and 49999 the code interpreter (served here, not in the guest); any
// other port is proxied. A sandbox made with `allowPublicTraffic: false` needs its traffic access
// token in `e2b-traffic-access-token`; `maskRequestHost` is the Host the guest's server sees. A
// sandbox paused with auto-resume wakes for the request; a closed port is a 502. WebSocket upgrades
// are relayed as they are (http/forward.ts forwardUpgrade).
import type { IncomingMessage } from "node:http";
import type { Duplex } from "node:stream";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import type { Forge } from "../../core/forge.js";
import { PORT_PLACEHOLDER } from "../../core/network.js";
import { badRequest } from "../../http/errors.js";
import { forwardRequest, forwardUpgrade } from "../../http/forward.js";
import { LOCALHOST, sandboxHostOf } from "../../http/sandbox-host.js";
import { ignore } from "../../util/ignore.js";
import { PORT_HEADER, SANDBOX_HEADER } from "./envd/context.js";
import { TRAFFIC_TOKEN } from "./views.js";

export const TRAFFIC_TOKEN_HEADER = "e2b-traffic-access-token";

/** The domain create and connect answer for a request: the configured one, else localhost with the port it came in on. */
export function domainFor(req: FastifyRequest, configured: string | undefined): string {
  return configured || `${LOCALHOST}:${req.socket.localPort}`;
}

/** A host name the server answers to for sandbox ports (its Host check lets these through). */
export function isSandboxHostName(host: string, domain: string | undefined): boolean {
  return sandboxHostOf(host, domain) !== null;
}

/**
 * Turns a Host-routed request into the header form (E2b-Sandbox-Id, E2b-Sandbox-Port), which the
 * rest of the routing reads. A request that already has the headers keeps them.
 */
export function routeByHost(req: IncomingMessage, domain: string | undefined): void {
  if (typeof req.headers[SANDBOX_HEADER] === "string") return;
  const named = sandboxHostOf(req.headers.host, domain);
  if (!named) return;
  req.headers[SANDBOX_HEADER] = named.id;
  req.headers[PORT_HEADER] = String(named.port);
}

/** The Host a sandbox's server sees: its mask with ${PORT} filled in, else the one the client sent. */
function guestHost(mask: string | undefined, port: number, sent: string | undefined): string {
  return mask ? mask.replaceAll(PORT_PLACEHOLDER, String(port)) : (sent ?? `localhost:${port}`);
}

/** E2B's proxy answer for a sandbox or port it cannot reach; the connection closes, so a body that follows is never read. */
function unreachable(reply: FastifyReply, id: string, status: number, message: string) {
  return reply.status(status).header("connection", "close").send({ sandboxId: id, message, code: status });
}

/** The route sandbox port traffic is rewritten to (/_e2b/port/<port>/<path>). */
export async function portRoutes(app: FastifyInstance, { forge }: { forge: Forge }): Promise<void> {
  // The body is the guest server's to read: passed on as it arrives, never parsed here.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser("*", (_req, _payload, done) => done(null));
  // A WebSocket upgrade is relayed before the WebSocket plugin's handler would answer it itself.
  const relayUpgrade = async (req: FastifyRequest, reply: FastifyReply) => {
    if (req.ws) return serve(req, reply);
  };
  const serve = async (req: FastifyRequest, reply: FastifyReply) => {
    const port = Number((req.params as { port: string }).port);
    const id = String(req.headers[SANDBOX_HEADER]);
    if (!Number.isInteger(port) || port < 1 || port > 65535) throw badRequest(`E2b-Sandbox-Port must be a port number, got "${(req.params as { port: string }).port}"`);
    let row: ReturnType<Forge["sandboxes"]["get"]>;
    try {
      row = forge.sandboxes.get(id);
    } catch {
      return unreachable(reply, id, 502, "The sandbox was not found");
    }
    const net = row.network;
    if (net?.private_ports) {
      const token = req.headers[TRAFFIC_TOKEN_HEADER];
      if (typeof token !== "string" || !forge.sandboxes.checkAccessToken(row.id, TRAFFIC_TOKEN, token)) {
        return reply
          .status(403)
          .header("connection", "close")
          .send({ sandboxId: row.id, message: `missing or wrong ${TRAFFIC_TOKEN_HEADER}: use the trafficAccessToken create returned`, code: 403 });
      }
    }
    // A pause still under way is waited for; a sandbox paused with auto-resume (or idle) wakes.
    await forge.sandboxes.wake(row.id, "port").catch(ignore("a sandbox that cannot wake is answered as not found below"));
    let conn: Duplex | null;
    try {
      conn = await forge.network.openPort(row.id, port);
    } catch {
      return unreachable(reply, row.id, 502, "The sandbox was not found");
    }
    if (!conn) return unreachable(reply, row.id, 502, `port ${port} of sandbox ${row.id} is closed: nothing listens on it`);
    const path = req.url.slice(`/_e2b/port/${port}`.length) || "/";
    const forward = req.ws ? forwardUpgrade : forwardRequest;
    forward(req, reply, conn, path, guestHost(net?.mask_host, port, req.headers.host), [SANDBOX_HEADER, PORT_HEADER, TRAFFIC_TOKEN_HEADER]);
    return reply;
  };
  app.all("/_e2b/port/:port/*", { schema: { hide: true }, preHandler: relayUpgrade }, serve);
}
