// The Fastify application: built apart from listen() so tests can inject requests.
import { AjvCompiler } from "@fastify/ajv-compiler";
import swagger from "@fastify/swagger";
import websocket from "@fastify/websocket";
import type { TypeBoxTypeProvider } from "@fastify/type-provider-typebox";
import { randomUUID } from "node:crypto";
import Fastify, { type FastifyInstance } from "fastify";
import type { Forge } from "../core/forge.js";
import { ForgevmError } from "../http/errors.js";
import { e2bRoutes, e2bUrlRewriter } from "../e2b/index.js";
import { DAYTONA_PREFIX, daytonaRoutes, previewByHost } from "../daytona/index.js";
import { sandboxHostOf } from "../http/sandbox-host.js";
import { CUSTOM_HTTP_PREFIX, customHttpRoutes } from "../custom-http/server.js";
import { isSandboxHostName } from "../e2b/ports.js";
import { mcpRoutes } from "../mcp/http.js";
import type { McpPolicy } from "../mcp/policy.js";
import { installAccessControl } from "./access.js";
import { installConnectionLimits, serverOptions, type ConnectionLimits } from "./connection-limits.js";
import { metricRoutes } from "./routes/metrics.js";
import { consoleRoutes } from "./console.js";
import { clientErrorHandler } from "../http/error-body.js";
import { frameworkErrors, installErrorHandling } from "./errors.js";
import { RAW_BODY } from "../schemas/rest.js";
import { archiveRoutes } from "./routes/archive.js";
import { auditRoutes } from "./routes/audit.js";
import { codeRoutes } from "./routes/code.js";
import { eventRoutes } from "./routes/events.js";
import { execRoutes } from "./routes/exec.js";
import { processRoutes } from "./routes/processes.js";
import { execWsRoutes } from "./routes/exec-ws.js";
import { fileRoutes } from "./routes/files.js";
import { commitRoutes } from "./routes/commit.js";
import { secretRoutes } from "./routes/secrets.js";
import { volumeRoutes } from "./routes/volumes.js";
import { buildRoutes } from "./routes/builds.js";
import { environmentRoutes } from "./routes/environments.js";
import { imageRoutes } from "./routes/images.js";
import { sandboxRoutes } from "./routes/sandboxes.js";
import { networkRoutes } from "./routes/network.js";
import { snapshotRoutes } from "./routes/snapshots.js";
import { systemRoutes } from "./routes/system.js";
import { templateRoutes } from "./routes/templates.js";
import { workloadRoutes } from "./routes/workloads.js";

export const API_PREFIX = "/api/v1";

export interface AppOptions {
  forge: Forge;
  version: string;
  apiKey?: string;
  bodyLimitBytes?: number;
  maxOutputBytes?: number;
  logger?: boolean;
  /** Web origins whose pages may call the API (server.allowed_origins). */
  allowedOrigins?: string[];
  /** Host names a loopback server answers to besides loopback names (server.allowed_hosts). */
  allowedHosts?: string[];
  /** The address the server listens on (a loopback one checks Host headers). */
  listenHost?: string;
  /** The domain sandboxes' ports are served under for E2B's getHost (e2b.domain); absent, localhost with the server's port. */
  e2bDomain?: string;
  /** The domain Daytona's previews are served under as `<port>-<id>.<domain>` (daytona.preview_domain); absent, previews are paths only. */
  daytonaPreviewDomain?: string;
  /** Serve MCP at /mcp under this policy (absent: no /mcp). */
  mcp?: McpPolicy;
  /** Gets one line per request answered: time, method, path (secrets removed), status, duration, request id. */
  requestLog?: (line: string) => void;
  /** Deadlines of arriving requests and the bound on connections waiting for headers (default DEFAULT_LIMITS). */
  connectionLimits?: ConnectionLimits;
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

export async function buildApp(opts: AppOptions): Promise<FastifyInstance> {
  const limits = opts.connectionLimits ?? DEFAULT_LIMITS;
  if (opts.daytonaPreviewDomain && opts.daytonaPreviewDomain.toLowerCase() === opts.e2bDomain?.toLowerCase()) {
    throw new Error("daytona.preview_domain must differ from e2b.domain: both name sandbox ports by Host, and one Host can mean only one of them");
  }
  // Calls E2B's SDKs address to a sandbox, and Daytona's wildcard previews, share this port: they move under prefixes of their own.
  const e2bRoute = e2bUrlRewriter(opts.e2bDomain);
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
    rewriteUrl: (req) => previewByHost(req, opts.daytonaPreviewDomain) ?? e2bRoute(req),
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
    sandboxHost: (host) => isSandboxHostName(host, opts.e2bDomain) || (!!opts.daytonaPreviewDomain && sandboxHostOf(host, opts.daytonaPreviewDomain) !== null),
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

  installErrorHandling(app, routePatterns, (code) => opts.forge.metrics.countError?.(code));
  await app.register(websocket, { options: { maxPayload: 2 * 1024 * 1024 } });

  await app.register(
    async (api) => {
      await api.register(sandboxRoutes, { forge: opts.forge });
      await api.register(workloadRoutes, { forge: opts.forge });
      await api.register(execRoutes, { forge: opts.forge, maxOutputBytes: opts.maxOutputBytes ?? 16 * 1024 * 1024 });
      await api.register(processRoutes, { forge: opts.forge });
      await api.register(execWsRoutes, { forge: opts.forge });
      await api.register(codeRoutes, { forge: opts.forge });
      await api.register(fileRoutes, { forge: opts.forge });
      await api.register(archiveRoutes, { forge: opts.forge });
      await api.register(eventRoutes, { forge: opts.forge });
      await api.register(templateRoutes, { forge: opts.forge });
      await api.register(snapshotRoutes, { forge: opts.forge });
      await api.register(networkRoutes, { forge: opts.forge });
      await api.register(imageRoutes, { forge: opts.forge });
      await api.register(commitRoutes, { forge: opts.forge });
      await api.register(volumeRoutes, { forge: opts.forge });
      await api.register(secretRoutes, { forge: opts.forge });
      await api.register(buildRoutes, { forge: opts.forge });
      await api.register(environmentRoutes, { forge: opts.forge });
      await api.register(auditRoutes, { forge: opts.forge });
      await api.register(metricRoutes, { forge: opts.forge });
      await api.register(systemRoutes, { forge: opts.forge, version: opts.version, startedAt: Date.now() });
      api.get("/openapi.json", { schema: { hide: true } }, async () => app.swagger());
    },
    { prefix: API_PREFIX },
  );

  // The web console at / (console.ts); its pages call the API above.
  await app.register(consoleRoutes);

  // E2B's control plane at the root, and the calls its SDKs make to a sandbox (e2b/).
  await app.register(e2bRoutes, { forge: opts.forge, domain: opts.e2bDomain, apiKey: opts.apiKey });

  // Daytona's control plane, toolbox and previews under /daytona (daytona/).
  await app.register(daytonaRoutes, { prefix: DAYTONA_PREFIX, forge: opts.forge, apiKey: opts.apiKey, previewDomain: opts.daytonaPreviewDomain, listenHost: opts.listenHost });

  // The ForgeVM Custom HTTP provider protocol, served (custom-http/): another ForgeVM API server's `custom` provider can use this one.
  await app.register(customHttpRoutes, { prefix: CUSTOM_HTTP_PREFIX, forge: opts.forge });

  // MCP for coding agents (mcp/), under the operator's policy.
  if (opts.mcp) await app.register(mcpRoutes, { forge: opts.forge, policy: opts.mcp, version: opts.version });

  // Prometheus text format, for scrapers (behind the API key like the rest); the JSON form is /api/v1/metrics.
  app.get("/metrics", { schema: { tags: ["metrics"], produces: ["text/plain"] } }, async (_req, reply) => {
    const { text, contentType } = await opts.forge.metrics.prometheus();
    reply.type(contentType);
    return text;
  });
  return app;
}
