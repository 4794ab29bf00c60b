// The Fastify application: built apart from listen() so tests can inject requests.
import swagger from "@fastify/swagger";
import websocket from "@fastify/websocket";
import type { TypeBoxTypeProvider } from "@fastify/type-provider-typebox";
import { createHash, randomUUID, timingSafeEqual } from "node:crypto";
import Fastify, { type FastifyInstance } from "fastify";
import type { Forge } from "../core/forge.js";
import { clientErrorHandler, frameworkErrors, installErrorHandling } from "./errors.js";
import { eventRoutes } from "./routes/events.js";
import { execRoutes } from "./routes/exec.js";
import { execWsRoutes } from "./routes/exec-ws.js";
import { fileRoutes } from "./routes/files.js";
import { imageRoutes } from "./routes/images.js";
import { sandboxRoutes } from "./routes/sandboxes.js";
import { networkRoutes } from "./routes/network.js";
import { snapshotRoutes } from "./routes/snapshots.js";
import { systemRoutes } from "./routes/system.js";
import { templateRoutes } from "./routes/templates.js";

export const API_PREFIX = "/api/v1";
const BROWSER_STREAM_ROUTE = /^\/api\/v1\/(events|sandboxes\/[^/]+\/exec\/ws)$/;

export interface AppOptions {
  forge: Forge;
  version: string;
  apiKey?: string;
  bodyLimitBytes?: number;
  maxOutputBytes?: number;
  logger?: boolean;
  /** Gets one line per request answered: time, method, path (secrets removed), status, duration, request id. */
  requestLog?: (line: string) => void;
}

function keyMatches(given: string, expected: string): boolean {
  // Hash both so the comparison takes the same time whatever the lengths.
  const a = createHash("sha256").update(given).digest();
  const b = createHash("sha256").update(expected).digest();
  return timingSafeEqual(a, b);
}

/** A request's URL for the log: an api_key query parameter is never written down. */
function loggedUrl(url: string): string {
  return url.replace(/([?&]api_key=)[^&]*/g, "$1…");
}

/** A cookie value as sent, percent-decoded when it can be (a malformed one is taken as it is). */
function decodeCookie(v: string): string {
  try {
    return decodeURIComponent(v);
  } catch {
    return v;
  }
}

export async function buildApp(opts: AppOptions): Promise<FastifyInstance> {
  const app = Fastify({
    logger: opts.logger ?? false,
    bodyLimit: opts.bodyLimitBytes ?? 256 * 1024 * 1024,
    requestIdHeader: "x-request-id",
    genReqId: () => randomUUID(),
    // Reject wrong types instead of coercing them; keep unknown body fields (ignored).
    ajv: { customOptions: { coerceTypes: false, removeAdditional: false, allErrors: false } },
    frameworkErrors,
    clientErrorHandler,
  }).withTypeProvider<TypeBoxTypeProvider>();

  // An empty body sent as JSON means an empty object (clients send the header on every
  // request); a route that needs fields then names the first one missing.
  app.removeContentTypeParser("application/json");
  app.addContentTypeParser("application/json", { parseAs: "string" }, (_req, text, done) => {
    if ((text as string).trim() === "") return done(null, {});
    try {
      done(null, JSON.parse(text as string));
    } catch (e) {
      const err = e as Error & { statusCode?: number };
      err.statusCode = 400;
      done(err, undefined);
    }
  });

  const routePatterns: { method: string; re: RegExp }[] = [];
  app.addHook("onRoute", (r) => {
    const methods = Array.isArray(r.method) ? r.method : [r.method];
    const re = new RegExp(`^${r.url.replace(/:[^/]+/g, "[^/]+")}/?$`);
    for (const m of methods) if (m !== "HEAD") routePatterns.push({ method: m, re });
  });

  // CORS preflight is answered before authentication; then every request needs the key.
  app.addHook("onRequest", async (req, reply) => {
    reply.header("X-Request-ID", req.id);
    reply.header("Access-Control-Allow-Origin", "*");
    if (req.method === "OPTIONS") {
      reply
        .header("Access-Control-Allow-Methods", "GET, POST, PUT, DELETE, OPTIONS")
        .header("Access-Control-Allow-Headers", "Content-Type, X-API-Key, X-User-ID, X-Request-ID")
        .header("Access-Control-Max-Age", "600")
        .status(204)
        .send();
      return reply;
    }
    if (!opts.apiKey) return;
    if (typeof req.headers["x-api-key"] === "string" && keyMatches(req.headers["x-api-key"], opts.apiKey)) return;
    // Browsers cannot set headers on EventSource and WebSocket: those routes alone also take
    // the key as a cookie or an api_key query parameter.
    if (BROWSER_STREAM_ROUTE.test(req.url.split("?")[0])) {
      const fromQuery = new URL(req.url, "http://x").searchParams.get("api_key");
      const fromCookie = /(?:^|;\s*)forgevm_api_key=([^;]+)/.exec(req.headers.cookie ?? "")?.[1];
      for (const k of [fromQuery, fromCookie ? decodeCookie(fromCookie) : null]) if (k && keyMatches(k, opts.apiKey)) return;
    }
    reply.status(401).send({ code: "UNAUTHORIZED", message: "missing or invalid API key: send it in the X-API-Key header" });
    return reply;
  });

  if (opts.requestLog) {
    const log = opts.requestLog;
    app.addHook("onResponse", async (req, reply) => {
      log(`${new Date().toISOString()} ${req.method} ${loggedUrl(req.url)} ${reply.statusCode} ${Math.round(reply.elapsedTime)}ms ${req.id}`);
    });
  }

  // A WebSocket upgrade answered with a plain HTTP response (401, 404, 403…) owns a raw socket
  // that nothing else will ever close: close it once the answer is out.
  app.addHook("onResponse", async (req) => {
    if (req.headers.upgrade && !req.raw.socket.destroyed) req.raw.socket.destroy();
  });

  await app.register(swagger, {
    openapi: {
      openapi: "3.0.3",
      info: { title: "ForgeVM API", version: opts.version, description: "Disposable microVM sandboxes" },
      components: { securitySchemes: { apiKey: { type: "apiKey", in: "header", name: "X-API-Key" } } },
      security: [{ apiKey: [] }],
    },
  });

  installErrorHandling(app, routePatterns);
  await app.register(websocket, { options: { maxPayload: 2 * 1024 * 1024 } });

  await app.register(
    async (api) => {
      await api.register(sandboxRoutes, { forge: opts.forge });
      await api.register(execRoutes, { forge: opts.forge, maxOutputBytes: opts.maxOutputBytes ?? 16 * 1024 * 1024 });
      await api.register(execWsRoutes, { forge: opts.forge });
      await api.register(fileRoutes, { forge: opts.forge });
      await api.register(eventRoutes, { forge: opts.forge });
      await api.register(templateRoutes, { forge: opts.forge });
      await api.register(snapshotRoutes, { forge: opts.forge });
      await api.register(networkRoutes, { forge: opts.forge });
      await api.register(imageRoutes, { forge: opts.forge });
      await api.register(systemRoutes, { forge: opts.forge, version: opts.version, startedAt: Date.now() });
      api.get("/openapi.json", { schema: { hide: true } }, async () => app.swagger());
    },
    { prefix: API_PREFIX },
  );

  // Prometheus text format, for scrapers; the JSON form is /api/v1/metrics.
  app.get("/metrics", { schema: { tags: ["system"], produces: ["text/plain"] } }, async (_req, reply) => {
    const c = opts.forge.counts();
    reply.type("text/plain; version=0.0.4");
    return [
      "# HELP forgevm_sandboxes_active Sandboxes creating or running.",
      "# TYPE forgevm_sandboxes_active gauge",
      `forgevm_sandboxes_active ${c.live}`,
      "# HELP forgevm_sandboxes_total Sandboxes in the store, history included.",
      "# TYPE forgevm_sandboxes_total gauge",
      `forgevm_sandboxes_total ${c.total}`,
      "",
    ].join("\n");
  });
  return app;
}
