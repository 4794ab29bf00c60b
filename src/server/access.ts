// Who may talk to the server. A web page the user happens to open can send requests to a server on
// localhost, so the browser is treated as an attacker by default: a request that carries an
// Origin other than the server's own (or one the config allows) is refused, CORS headers go
// only to allowed origins, and a server listening on loopback answers only to loopback host
// names (a DNS-rebound name pointing at 127.0.0.1 gets nothing). Then the API key: the X-API-Key
// header, or whatever an interface admits by its own means (interface.ts).
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { ForgevmError } from "../http/errors.js";
import { errorBody } from "../http/error-body.js";
import { keyMatches } from "../http/api-key.js";
import type { ServerInterface } from "./interface.js";

export interface AccessOptions {
  apiKey?: string;
  /** Web origins ("https://console.example:8443") whose pages may call the API. */
  allowedOrigins?: string[];
  /** Host names (with or without port) besides loopback names that a loopback server answers to. */
  allowedHosts?: string[];
  /** The address the server listens on; a loopback one turns the Host check on. */
  listenHost?: string;
  /** The interfaces served: the requests each admits without the header, and the hosts each serves. */
  interfaces: readonly ServerInterface[];
}

const LOOPBACK_HOSTS = new Set(["localhost", "127.0.0.1", "::1", "[::1]"]);

/** The host name of a Host header, without its port. */
function hostName(host: string): string {
  if (host.startsWith("[")) return host.slice(0, host.indexOf("]") + 1);
  const colon = host.lastIndexOf(":");
  return (colon >= 0 ? host.slice(0, colon) : host).toLowerCase();
}

export function isLoopback(listenHost: string | undefined): boolean {
  return !!listenHost && (LOOPBACK_HOSTS.has(listenHost) || listenHost.startsWith("127."));
}

/** A refused request's answer; its connection closes after it, so a body that follows is never read. */
function refuse(reply: FastifyReply, e: ForgevmError): FastifyReply {
  return reply.status(e.status).header("Connection", "close").type("application/json; charset=utf-8").send(errorBody(e));
}

/** Installs the origin, host and API key checks, and CORS for allowed origins. */
export function installAccessControl(app: FastifyInstance, o: AccessOptions): void {
  const origins = new Set((o.allowedOrigins ?? []).map((x) => x.replace(/\/+$/, "").toLowerCase()));
  const hosts = new Set((o.allowedHosts ?? []).map((h) => h.toLowerCase()));
  const checkHost = isLoopback(o.listenHost);
  const served = (host: string) => o.interfaces.some((i) => i.servesHost?.(host));
  const hints = o.interfaces.flatMap((i) => (i.keyHint ? [i.keyHint] : []));
  const missingKey = `missing or invalid API key: send it in the X-API-Key header${hints.length ? ` (or, ${hints.join("; ")})` : ""}`;

  app.addHook("onRequest", async (req: FastifyRequest, reply: FastifyReply) => {
    reply.header("X-Request-ID", req.id);
    const host = String(req.headers.host ?? "");
    if (checkHost && !LOOPBACK_HOSTS.has(hostName(host)) && !hosts.has(host.toLowerCase()) && !hosts.has(hostName(host)) && !served(host)) {
      return refuse(
        reply,
        new ForgevmError("FORBIDDEN", `this server listens on loopback and answers only to loopback host names, not "${hostName(host)}" (add it to server.allowed_hosts)`),
      );
    }
    const origin = typeof req.headers.origin === "string" ? req.headers.origin.toLowerCase() : null;
    const sandboxedPage = origin === "null" && o.interfaces.some((i) => i.fromSandboxedPage?.(req));
    if (origin !== null && !sandboxedPage) {
      const own = origin === `http://${host.toLowerCase()}` || origin === `https://${host.toLowerCase()}`;
      if (!own && !origins.has(origin)) {
        return refuse(reply, new ForgevmError("FORBIDDEN", `requests from web pages at ${origin} are not allowed (add the origin to server.allowed_origins)`));
      }
      if (!own) {
        reply.header("Access-Control-Allow-Origin", req.headers.origin).header("Vary", "Origin").header("Access-Control-Allow-Credentials", "true");
      }
    }
    // A CORS preflight is answered before authentication (it carries no key).
    if (req.method === "OPTIONS") {
      reply
        .header("Access-Control-Allow-Methods", "GET, POST, PUT, DELETE, OPTIONS")
        .header("Access-Control-Allow-Headers", "Content-Type, X-API-Key, X-User-ID, X-Request-ID, Last-Event-ID")
        .header("Access-Control-Max-Age", "600")
        .status(204)
        .send();
      return reply;
    }
    const key = o.apiKey;
    if (!key) return;
    if (typeof req.headers["x-api-key"] === "string" && keyMatches(req.headers["x-api-key"], key)) return;
    if (o.interfaces.some((i) => i.admits?.(req, key))) return;
    return refuse(reply, new ForgevmError("UNAUTHORIZED", missingKey));
  });
}
