// Who may talk to the API. A web page the user happens to open can send requests to a server on
// localhost, so the browser is treated as an attacker by default: a request that carries an
// Origin other than the server's own (or one the config allows) is refused, CORS headers go
// only to allowed origins, and a server listening on loopback answers only to loopback host
// names (a DNS-rebound name pointing at 127.0.0.1 gets nothing). Then the API key, if one is set.
import { isConsoleFile } from "./console.js";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { ForgevmError } from "../http/errors.js";
import { hasOwnToken } from "../e2b/index.js";
import { isDaytonaUrl } from "../daytona/index.js";
import { MCP_PATH } from "../mcp/http.js";
import { errorBody } from "../http/error-body.js";
import { keyMatches } from "../http/api-key.js";

export { keyMatches };

export interface AccessOptions {
  apiKey?: string;
  /** Web origins ("https://console.example:8443") whose pages may call the API. */
  allowedOrigins?: string[];
  /** Host names (with or without port) besides loopback names that a loopback server answers to. */
  allowedHosts?: string[];
  /** The address the server listens on; a loopback one turns the Host check on. */
  listenHost?: string;
  /** Host names of sandbox ports this server serves (`<port>-<id>.<domain>`), which it answers to as well. */
  sandboxHost?: (host: string) => boolean;
}

const BROWSER_STREAM_ROUTE = /^\/api\/v1\/(events|sandboxes\/[^/]+\/exec\/ws)$/;
const LOOPBACK_HOSTS = new Set(["localhost", "127.0.0.1", "::1", "[::1]"]);

/** The keys a browser stream route (SSE, the exec WebSocket) carries as an api_key query parameter or cookie. */
export function browserStreamKeys(url: string, cookie: string | undefined): string[] {
  if (!BROWSER_STREAM_ROUTE.test(url.split("?")[0])) return [];
  const fromQuery = new URL(url, "http://x").searchParams.get("api_key");
  const fromCookie = /(?:^|;\s*)forgevm_api_key=([^;]+)/.exec(cookie ?? "")?.[1];
  return [fromQuery, fromCookie ? decodeCookie(fromCookie) : null].filter((k): k is string => !!k);
}

/** Whether a browser stream route carries the key as an api_key query parameter or cookie. */
export function browserStreamKeyMatches(url: string, cookie: string | undefined, apiKey: string): boolean {
  return browserStreamKeys(url, cookie).some((k) => keyMatches(k, apiKey));
}

/** A cookie value as sent, percent-decoded when it can be (a malformed one is taken as it is). */
function decodeCookie(v: string): string {
  try {
    return decodeURIComponent(v);
  } catch {
    return v;
  }
}

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

  app.addHook("onRequest", async (req: FastifyRequest, reply: FastifyReply) => {
    reply.header("X-Request-ID", req.id);
    const host = String(req.headers.host ?? "");
    if (checkHost && !LOOPBACK_HOSTS.has(hostName(host)) && !hosts.has(host.toLowerCase()) && !hosts.has(hostName(host)) && !o.sandboxHost?.(host)) {
      return refuse(
        reply,
        new ForgevmError("FORBIDDEN", `this server listens on loopback and answers only to loopback host names, not "${hostName(host)}" (add it to server.allowed_hosts)`),
      );
    }
    const origin = typeof req.headers.origin === "string" ? req.headers.origin.toLowerCase() : null;
    if (origin !== null) {
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
    if (!o.apiKey) return;
    // The console's page and bundle hold no data: the page asks for the key itself.
    if (isConsoleFile(req.method, req.url.split("?")[0])) return;
    // A call E2B's SDKs make to a sandbox itself, or to a volume's content, carries a token of its own instead (e2b/).
    if (hasOwnToken(req.url)) return;
    // Daytona's SDK sends the key as a bearer token, and its previews carry tokens of their own: daytona/ checks them.
    if (isDaytonaUrl(req.url)) return;
    if (typeof req.headers["x-api-key"] === "string" && keyMatches(req.headers["x-api-key"], o.apiKey)) return;
    // MCP clients are configured with an Authorization header; /mcp takes the key as a bearer token too.
    const bearer = /^Bearer\s+(.+)$/i.exec(String(req.headers.authorization ?? ""))?.[1];
    if (bearer && req.url.split("?")[0] === MCP_PATH && keyMatches(bearer, o.apiKey)) return;
    // Browsers cannot set headers on EventSource and WebSocket: those routes alone also take
    // the key as a cookie or an api_key query parameter.
    if (browserStreamKeyMatches(req.url, req.headers.cookie, o.apiKey)) return;
    return refuse(reply, new ForgevmError("UNAUTHORIZED", "missing or invalid API key: send it in the X-API-Key header (or, on /mcp, as Authorization: Bearer KEY)"));
  });
}
