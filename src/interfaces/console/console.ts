// The web console's files (built by ./setup.sh into dist/web): index.html at / and the bundle
// under /assets/. They hold no data and need no key; every call the page makes goes through the
// REST API behind the key. Served with a policy that lets the page reach only this server.
import { readFile } from "node:fs/promises";
import { extname, join } from "node:path";
import { fileURLToPath } from "node:url";
import type { FastifyPluginAsync } from "fastify";
import type { ServerInterface } from "../../server/interface.js";

const WEB_DIR = fileURLToPath(new URL("../../../web/", import.meta.url));
const TYPES: Record<string, string> = {
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".html": "text/html; charset=utf-8",
  ".svg": "image/svg+xml",
  ".woff2": "font/woff2",
  ".json": "application/json",
};
const POLICY = [
  "default-src 'self'",
  "connect-src 'self'",
  "img-src 'self' data: blob:",
  "style-src 'self' 'unsafe-inline'",
  "script-src 'self'",
  "frame-ancestors 'none'",
  "base-uri 'none'",
  "form-action 'self'",
].join("; ");

/** Paths of the console's own files, which the API key does not guard. */
export function isConsoleFile(method: string, path: string): boolean {
  return (method === "GET" || method === "HEAD") && (path === "/" || /^\/assets\/[A-Za-z0-9._-]+$/.test(path));
}

export const consoleRoutes: FastifyPluginAsync<{ dir?: string }> = async (app, opts) => {
  const dir = opts.dir ?? WEB_DIR;
  app.get("/", { schema: { hide: true } }, async (_req, reply) => {
    const html = await readFile(join(dir, "index.html")).catch(() => null);
    reply.header("Content-Security-Policy", POLICY).header("X-Frame-Options", "DENY").header("Cache-Control", "no-cache");
    if (!html) {
      return reply
        .status(503)
        .type("text/html; charset=utf-8")
        .send("<!doctype html><title>ForgeVM</title><p>The web console is not built on this machine: run <code>./setup.sh</code>. The API is at <code>/api/v1</code>.</p>");
    }
    return reply.type("text/html; charset=utf-8").send(html);
  });
  app.get<{ Params: { file: string } }>("/assets/:file", { schema: { hide: true } }, async (req, reply) => {
    const file = req.params.file;
    const body = /^[A-Za-z0-9._-]+$/.test(file) && !file.startsWith(".") ? await readFile(join(dir, "assets", file)).catch(() => null) : null;
    if (!body)
      return reply
        .status(404)
        .type("application/json; charset=utf-8")
        .send({ code: "NOT_FOUND", message: `no console file ${file}`, retryable: false });
    // Bundled file names carry their content hash: they never change.
    reply.header("Cache-Control", "public, max-age=31536000, immutable").header("X-Content-Type-Options", "nosniff");
    return reply.type(TYPES[extname(file)] ?? "application/octet-stream").send(body);
  });
};

/** The console as one of the server's interfaces: its files need no key. */
export function consoleInterface(opts: { dir?: string } = {}): ServerInterface {
  return {
    name: "console",
    admits: (req) => isConsoleFile(req.method, req.url.split("?")[0]),
    async register(app) {
      await app.register(consoleRoutes, opts);
    },
  };
}
