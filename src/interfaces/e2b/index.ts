// The E2B interface: the control plane at the root (/sandboxes, /v2/sandboxes), and the calls
// E2B's SDKs send to a sandbox itself (envd on port 49983, the code interpreter on 49999, and
// any other port of it: ports.ts). Those share one server port with everything else; they are
// told apart by the E2b-Sandbox-Id header, or a Host of `<port>-<id>.<domain>`, and moved
// (e2bUrlRewriter) under prefixes of their own, where nothing else is reachable.
import type { IncomingMessage } from "node:http";
import type { FastifyInstance } from "fastify";
import type { Forge } from "../../core/forge.js";
import { codeInterpreterRoutes } from "./code-interpreter.js";
import { installConnect, isRpcUrl, sendConnectError } from "./connect.js";
import { controlPlaneRoutes } from "./control-plane.js";
import { PORT_HEADER, SANDBOX_HEADER } from "./envd/context.js";
import { envdError, envdHttpRoutes } from "./envd/files.js";
import { filesystemService } from "./envd/filesystem.js";
import { processService } from "./envd/process.js";
import { isSandboxHostName, portRoutes, routeByHost } from "./ports.js";
import type { ServerInterface } from "../../server/interface.js";
import { TEMPLATE_FILES_PREFIX } from "./template-builds.js";
import { CONTENT_PREFIX, volumeContentRoutes } from "./volumes.js";

export const ENVD_PORT = 49983;
export const CODE_INTERPRETER_PORT = 49999;
/** Where calls to a sandbox's envd and code interpreter are routed (they carry E2b-Sandbox-Id). */
export const ENVD_PREFIX = "/_e2b/envd";
export const INTERPRETER_PREFIX = "/_e2b/interpreter";

/** Moves a request that names a sandbox (by header or by Host under `domain`) under the prefix of the sandbox port it is for. */
export function e2bUrlRewriter(domain: string | undefined): (req: IncomingMessage) => string {
  return (req) => {
    routeByHost(req, domain);
    return rewriteE2bUrl(req);
  };
}

/** Moves a request that names a sandbox in its headers under the prefix of the sandbox port it is for. */
export function rewriteE2bUrl(req: IncomingMessage): string {
  const url = req.url ?? "/";
  if (typeof req.headers[SANDBOX_HEADER] !== "string") return url;
  const port = Number(req.headers[PORT_HEADER] ?? ENVD_PORT);
  if (port === CODE_INTERPRETER_PORT) return `${INTERPRETER_PREFIX}${url}`;
  if (port === ENVD_PORT) return `${ENVD_PREFIX}${url}`;
  return `/_e2b/port/${port}${url}`;
}

/**
 * Whether a (rewritten) URL is authenticated by a token of its own instead of the API key: a call
 * to a sandbox (its access token, or none for its public ports), to a volume's content (its token)
 * or a template build's file upload (the token of its URL).
 */
export function hasOwnToken(url: string): boolean {
  return (
    url.startsWith(`${ENVD_PREFIX}/`) ||
    url.startsWith(`${INTERPRETER_PREFIX}/`) ||
    url.startsWith("/_e2b/port/") ||
    url.startsWith(CONTENT_PREFIX) ||
    url.startsWith(TEMPLATE_FILES_PREFIX)
  );
}

export async function e2bRoutes(app: FastifyInstance, { forge, domain, apiKey }: { forge: Forge; domain?: string; apiKey?: string }): Promise<void> {
  await app.register(controlPlaneRoutes, { forge, domain, apiKey });
  await app.register(
    async (envd) => {
      installConnect(envd);
      envd.setErrorHandler((err, req, reply) => (isRpcUrl(req.url) ? sendConnectError(reply, err) : envdError(reply, err)));
      envd.setNotFoundHandler((req, reply) => reply.status(404).send({ code: 404, message: `envd has no ${req.method} ${req.url.slice(ENVD_PREFIX.length).split("?")[0]}` }));
      await envd.register(processService, { forge });
      await envd.register(filesystemService, { forge });
      await envd.register(envdHttpRoutes, { forge });
    },
    { prefix: ENVD_PREFIX },
  );
  await app.register(
    async (interpreter) => {
      interpreter.setErrorHandler((err, _req, reply) => envdError(reply, err));
      interpreter.setNotFoundHandler((req, reply) =>
        reply.status(404).send({ code: 404, message: `the code interpreter has no ${req.method} ${req.url.slice(INTERPRETER_PREFIX.length).split("?")[0]}` }),
      );
      await interpreter.register(codeInterpreterRoutes, { forge });
    },
    { prefix: INTERPRETER_PREFIX },
  );
  await app.register(portRoutes, { forge });
  await app.register(volumeContentRoutes, { forge });
}

/**
 * E2B as one of the server's interfaces: calls to a sandbox, to a volume's content or a build's
 * upload carry tokens of their own (checked in their routes); the control plane takes the key.
 */
export function e2bInterface({ forge, domain, apiKey }: { forge: Forge; domain?: string; apiKey?: string }): ServerInterface {
  const rewrite = e2bUrlRewriter(domain);
  return {
    name: "e2b",
    admits: (req) => hasOwnToken(req.url),
    rewriteUrl: (req) => {
      const before = req.url;
      const url = rewrite(req);
      return url === before ? undefined : url;
    },
    servesHost: (host) => isSandboxHostName(host, domain),
    async register(app) {
      await app.register(e2bRoutes, { forge, domain, apiKey });
    },
  };
}
