// The Fastify application every interface is served by: validation, body parsing, connection
// limits, origin, host and key checks, the request log, the error fallback and the OpenAPI document;
// then each interface it is given registers its routes. Built apart from listen() so tests can
// inject requests. It names no interface: compose/app.ts hands it the list.
import { AjvCompiler } from "@fastify/ajv-compiler";
import swagger from "@fastify/swagger";
import websocket from "@fastify/websocket";
import type { TypeBoxTypeProvider } from "@fastify/type-provider-typebox";
import { randomUUID } from "node:crypto";
import type { IncomingMessage } from "node:http";
import Fastify, { type FastifyInstance } from "fastify";
import { ForgevmError } from "../http/errors.js";
import { clientErrorHandler } from "../http/error-body.js";
import { RAW_BODY } from "../schemas/rest.js";
import { installAccessControl } from "./access.js";
import { installConnectionLimits, serverOptions, type ConnectionLimits } from "./connection-limits.js";
import { frameworkErrors, installErrorHandling } from "./errors.js";
import type { ServerInterface } from "./interface.js";

export interface ServerOptions {
  /** The interfaces served, in the order their Host routing is tried. */
  interfaces: readonly ServerInterface[];
  /** The version the OpenAPI document names. */
  version: string;
  apiKey?: string;
  bodyLimitBytes?: number;
  logger?: boolean;
  /** Web origins whose pages may call the API (server.allowed_origins). */
  allowedOrigins?: string[];
  /** Host names a loopback server answers to besides loopback names (server.allowed_hosts). */
  allowedHosts?: string[];
  /** The address the server listens on (a loopback one checks Host headers). */
  listenHost?: string;
  /** Gets one line per request answered: time, method, path (secrets removed), status, duration, request id. */
  requestLog?: (line: string) => void;
  /** Deadlines of arriving requests and the bound on connections waiting for headers (default DEFAULT_LIMITS). */
  connectionLimits?: ConnectionLimits;
  /** Hears the code of each error answered (the server's metrics). */
  countError?: (code: string) => void;
}

/** server.headers_timeout, server.body_idle_timeout and server.max_pending_connections as the config's defaults. */
export const DEFAULT_LIMITS: ConnectionLimits = { headersTimeoutMs: 10_000, bodyIdleMs: 60_000, maxPending: 256 };

/** A request's URL for the log: an api_key query parameter is never written down. */
function loggedUrl(url: string): string {
  return url.replace(/([?&]api_key=)[^&]*/g, "$1…");
}

/** Every route an app has, and whether the OpenAPI document shows it (for the drift test). */
const ROUTES = new WeakMap<object, { method: string; url: string; documented: boolean }[]>();
export const routesOf = (app: FastifyInstance) => ROUTES.get(app) ?? [];

const ajvCompilers = AjvCompiler();

/** Fastify's own validator compilers, except that a body schema marked RAW_BODY accepts the stream it gets. */
const skippingRawBodies = ((externalSchemas: Parameters<typeof ajvCompilers>[0], options: Parameters<typeof ajvCompilers>[1]) => {
  const compile = ajvCompilers(externalSchemas, options);
  const accept = Object.assign(() => true, { errors: null });
  return (route: Parameters<typeof compile>[0]) =>
    (route as { httpPart?: string }).httpPart === "body" && (route.schema as Record<string, unknown>)?.[RAW_BODY] ? accept : compile(route);
}) as unknown as typeof ajvCompilers;

export async function createServer(opts: ServerOptions): Promise<FastifyInstance> {
  const limits = opts.connectionLimits ?? DEFAULT_LIMITS;
  // Calls addressed by Host (a sandbox's port under a domain) share this port: an interface moves them under prefixes of its own.
  const rewriteUrl = (req: IncomingMessage) => {
    for (const i of opts.interfaces) {
      const url = i.rewriteUrl?.(req);
      if (url !== undefined) return url;
    }
    return req.url ?? "/";
  };
  const app = Fastify({
    logger: opts.logger ?? false,
    http: serverOptions(limits),
    // Params, query strings and headers are validated on every route; a body marked RAW_BODY (a
    // stream the route reads) is the one thing that is not.
    schemaController: { compilersFactory: { buildValidator: skippingRawBodies } },
    bodyLimit: opts.bodyLimitBytes ?? 256 * 1024 * 1024,
    requestIdHeader: "x-request-id",
    genReqId: () => randomUUID(),
    // Reject wrong types instead of coercing them, and unknown body fields instead of dropping
    // them (schemas.ts); verbose errors carry the schema, so a typo can be matched to its field.
    ajv: { customOptions: { coerceTypes: false, removeAdditional: false, allErrors: false, verbose: true } },
    frameworkErrors,
    clientErrorHandler,
    rewriteUrl,
  }).withTypeProvider<TypeBoxTypeProvider>();

  // An empty body sent as JSON means an empty object (clients send the header on every
  // request); a route that needs fields then names the first one missing.
  app.removeContentTypeParser("application/json");
  app.addContentTypeParser("application/json", { parseAs: "string" }, (req, text, done) => {
    // JSON is UTF-8 (RFC 8259); a body declared in another charset would be misread.
    const charset = /;\s*charset\s*=\s*"?([^;"\s]+)/i.exec(String(req.headers["content-type"]))?.[1]?.toLowerCase();
    if (charset && charset !== "utf-8" && charset !== "utf8") {
      return done(new ForgevmError("BAD_REQUEST", `Content-Type: JSON bodies must be UTF-8, not ${charset}`), undefined);
    }
    if ((text as string).trim() === "") return done(null, {});
    try {
      done(null, JSON.parse(text as string));
    } catch (e) {
      const err = e as Error & { statusCode?: number };
      err.statusCode = 400;
      done(err, undefined);
    }
  });

  // A request without a body (no Content-Type either: the original Python SDK's spawn_template
  // sends such a POST) is an empty object to a route whose body is JSON, so a body whose fields
  // are all optional may be left out, and one that needs fields names the first one missing.
  app.addHook("preValidation", async (req) => {
    const schema = req.routeOptions.schema?.body as Record<string, unknown> | undefined;
    if (req.body === undefined && schema && !schema[RAW_BODY]) req.body = {};
  });

  ROUTES.set(app, []);
  const routePatterns: { method: string; re: RegExp }[] = [];
  app.addHook("onRoute", (r) => {
    const methods = Array.isArray(r.method) ? r.method : [r.method];
    const re = new RegExp(`^${r.url.replace(/:[^/]+/g, "[^/]+")}/?$`);
    for (const m of methods) {
      if (m === "HEAD") continue;
      routePatterns.push({ method: m, re });
      // Read later: plugins may still hide the route (the WebSocket one does) after this hook.
      const schema = r.schema as { hide?: boolean } | undefined;
      ROUTES.get(app)?.push({
        method: m,
        url: r.url,
        get documented() {
          return !schema?.hide;
        },
      });
    }
  });

  installConnectionLimits(app, limits);
  installAccessControl(app, {
    apiKey: opts.apiKey,
    allowedOrigins: opts.allowedOrigins,
    allowedHosts: opts.allowedHosts,
    listenHost: opts.listenHost,
    interfaces: opts.interfaces,
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
    // Components are named after the schemas' $id (schemas.ts), so the document reads as the contract does.
    refResolver: { buildLocalReference: (json, _base, _fragment, i) => String(json.$id ?? `def-${i}`) },
  });

  installErrorHandling(app, routePatterns, opts.countError);
  await app.register(websocket, { options: { maxPayload: 2 * 1024 * 1024 } });

  for (const i of opts.interfaces) await i.register(app);
  return app;
}
