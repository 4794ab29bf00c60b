// The Daytona interface, a peer of e2b/ over the same core: everything lives under one prefix
// (`/daytona`, so nothing collides with E2B's routes at the root or our /api/v1): the control
// plane (`/sandbox…`), socket.io's handshake, the toolbox (`/toolbox/<id>/…`) and previews
// (`/preview/<id>/<port>/…`). Daytona's SDK sends the API key as a bearer token to the control
// plane and the toolbox; with no key configured, any non-empty one is taken. Errors are
// Daytona-shaped (errors.ts); call by call in docs/daytona.md.
import type { IncomingMessage } from "node:http";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { sandboxHostOf } from "../../http/sandbox-host.js";
import type { Forge } from "../../core/forge.js";
import { ForgevmError } from "../../http/errors.js";
import { keyMatches } from "../../http/api-key.js";
import { controlPlaneRoutes } from "./control-plane.js";
import { apiError, toolboxError } from "./errors.js";
import { hasPreviewToken, previewRoutes } from "./preview.js";
import { SignedPreviews } from "./signed-preview.js";
import { socketIoRoutes } from "./socket-io.js";
import { computerUseRoutes } from "./toolbox/computer-use.js";
import { fileRoutes } from "./toolbox/files.js";
import { processRoutes } from "./toolbox/process.js";
import { ptyRoutes } from "./toolbox/pty.js";
import { sessionRoutes } from "./toolbox/sessions.js";
import { transferRoutes } from "./toolbox/transfer.js";
import type { ServerInterface } from "../../server/interface.js";

export const DAYTONA_PREFIX = "/daytona";

/** Whether a URL is the Daytona interface's, which checks its callers itself. */
export function isDaytonaUrl(url: string): boolean {
  return url === DAYTONA_PREFIX || url.startsWith(`${DAYTONA_PREFIX}/`) || url.startsWith(`${DAYTONA_PREFIX}?`);
}

/**
 * A request for a wildcard preview (`<port>-<id>.<previewDomain>`) moved under the path-based
 * preview route, or null when its Host is no such name (or no preview domain is configured).
 */
export function previewByHost(req: IncomingMessage, previewDomain: string | undefined): string | null {
  if (!previewDomain) return null;
  const named = sandboxHostOf(req.headers.host, previewDomain);
  return named ? `${DAYTONA_PREFIX}/preview/${named.id}/${named.port}${req.url ?? "/"}` : null;
}

/** Whether a request carries the API key as Daytona sends it (any non-empty one when the server has none). */
function hasKey(req: FastifyRequest, apiKey: string | undefined): boolean {
  const bearer = /^Bearer\s+(.+)$/i.exec(String(req.headers.authorization ?? ""))?.[1]?.trim();
  return !!bearer && (!apiKey || keyMatches(bearer, apiKey));
}

/** A refused call's answer closes its connection (see the hooks below), so a body that follows is never read. */
const unauthorized = () => new ForgevmError("UNAUTHORIZED", "missing or invalid API key: set DAYTONA_API_KEY to this server's API key (sent as Authorization: Bearer KEY)");

export async function daytonaRoutes(
  app: FastifyInstance,
  { forge, apiKey, previewDomain, listenHost }: { forge: Forge; apiKey?: string; previewDomain?: string; listenHost?: string },
): Promise<void> {
  const signed = new SignedPreviews(forge, listenHost ?? "127.0.0.1");
  app.addHook("onClose", async () => signed.closeAll());
  app.setNotFoundHandler((req, reply) =>
    apiError(req, reply, new ForgevmError("NOT_FOUND", `Cannot ${req.method} ${req.url.split("?")[0]}: this server does not serve it (docs/daytona.md)`)),
  );
  app.setErrorHandler((err, req, reply) => apiError(req, reply, err));
  // The SDK posts bodiless calls (stop, createFolder) with whatever Content-Type its HTTP client
  // picks: a body that is not JSON (nor an upload's multipart) means nothing here, and is dropped.
  app.addContentTypeParser("*", { parseAs: "string", bodyLimit: 64 * 1024 }, (_req, _body, done) => done(null, undefined));
  await app.register(socketIoRoutes, { apiKey });
  await app.register(previewRoutes, { forge, apiKey });
  await app.register(async (api) => {
    api.addHook("onRequest", async (req: FastifyRequest, reply: FastifyReply) => {
      if (!hasKey(req, apiKey)) return apiError(req, reply.header("connection", "close"), unauthorized());
    });
    await api.register(controlPlaneRoutes, { forge, urlBase: DAYTONA_PREFIX, previewDomain, signed });
  });
  await app.register(
    async (toolbox) => {
      toolbox.addHook("onRequest", async (req: FastifyRequest, reply: FastifyReply) => {
        // Daytona's proxy also lets the sandbox's preview token into its toolbox.
        const id = (req.params as { sandboxId?: string }).sandboxId ?? "";
        if (!hasKey(req, apiKey) && !hasPreviewToken(forge, id, req)) return toolboxError(req, reply.header("connection", "close"), unauthorized());
      });
      toolbox.setErrorHandler((err, req, reply) => toolboxError(req, reply, err));
      toolbox.setNotFoundHandler((req, reply) =>
        toolboxError(req, reply, new ForgevmError("NOT_FOUND", `the toolbox has no ${req.method} ${req.url.split("?")[0]} (docs/daytona.md)`)),
      );
      await toolbox.register(processRoutes, { forge });
      await toolbox.register(sessionRoutes, { forge });
      await toolbox.register(ptyRoutes, { forge });
      await toolbox.register(computerUseRoutes, { forge });
      await toolbox.register(async (files) => {
        files.setErrorHandler((err, req, reply) => toolboxError(req, reply, err, "FILE_NOT_FOUND"));
        await files.register(fileRoutes, { forge });
        await files.register(transferRoutes, { forge });
      });
    },
    { prefix: "/toolbox/:sandboxId" },
  );
}

export interface DaytonaOptions {
  forge: Forge;
  apiKey?: string;
  /** The domain previews are served under as `<port>-<id>.<domain>` (daytona.preview_domain); absent, previews are paths only. */
  previewDomain?: string;
  listenHost?: string;
}

/** Daytona as one of the server's interfaces: it checks its callers itself, under its own prefix. */
export function daytonaInterface(o: DaytonaOptions): ServerInterface {
  return {
    name: "daytona",
    admits: (req) => isDaytonaUrl(req.url),
    rewriteUrl: (req) => previewByHost(req, o.previewDomain) ?? undefined,
    servesHost: (host) => !!o.previewDomain && sandboxHostOf(host, o.previewDomain) !== null,
    async register(app) {
      await app.register(daytonaRoutes, { prefix: DAYTONA_PREFIX, ...o });
    },
  };
}
