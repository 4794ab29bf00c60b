// envd's plain HTTP endpoints: GET /health, GET /files (a file's bytes), POST /files (multipart
// with the target path as each part's filename, or a raw octet-stream body, gzip allowed), and
// GET /envs. Errors are envd's {code, message} with the HTTP status as the code.
import { capMessage } from "../../../http/error-body.js";
import { createHash } from "node:crypto";
import { posix } from "node:path";
import type { Readable } from "node:stream";
import { Busboy, type BusboyInstance } from "@fastify/busboy";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { toApiError } from "../../../core/error-map.js";
import { ForgevmError, badRequest } from "../../../http/errors.js";
import type { Forge } from "../../../core/forge.js";
import { ConnectError } from "../connect.js";
import { ENVD_TOKEN } from "../views.js";
import { detachable } from "../../../util/detachable.js";
import { FileParts } from "../../../util/file-parts.js";
import { checkToken, envdContext, resolvePath, SandboxUnavailable, sandboxIdOf, sandboxOf, type EnvdContext } from "./context.js";

/** Most files one multipart upload may carry. */
const MAX_PARTS = 1000;

/** envd's error body; a sandbox that is not running is a 502, as E2B's proxy answers. */
export function envdError(reply: FastifyReply, err: unknown): FastifyReply {
  if (err instanceof SandboxUnavailable)
    return reply
      .status(502)
      .type("application/json")
      .send({ code: 502, message: capMessage(err.message) });
  if (err instanceof ConnectError)
    return reply.status(err.code === "not_found" ? 404 : err.code === "unauthenticated" ? 401 : 400).send({ code: 400, message: capMessage(err.message) });
  const e = toApiError(err);
  // envd's answer for a full disk, which the SDK reports as such.
  const status = e.detail.errno === "ENOSPC" || e.detail.errno === "EDQUOT" ? 507 : e.status;
  // A caller without the token gets its answer and the connection closes: its body is never read.
  if (status === 401) reply.header("Connection", "close");
  return reply
    .status(status)
    .type("application/json")
    .send({ code: status, message: capMessage(e.message) });
}

/** `v1_` + base64(sha256("path:operation:user:token[:expiration]")) without padding: a pre-signed URL's signature. */
function signature(path: string, operation: "read" | "write", user: string, token: string, expiration?: string): string {
  const raw = `${path}:${operation}:${user}:${token}${expiration ? `:${expiration}` : ""}`;
  return `v1_${createHash("sha256").update(raw).digest("base64").replace(/=+$/, "")}`;
}

interface FilesQuery {
  path?: string;
  username?: string;
  signature?: string;
  signature_expiration?: string;
}

/** The context of a /files call: the access token, or a valid signature for this path and user. */
async function filesContext(forge: Forge, req: FastifyRequest<{ Querystring: FilesQuery }>, operation: "read" | "write"): Promise<EnvdContext> {
  const q = req.query;
  if (q.signature && typeof req.headers["x-access-token"] !== "string") {
    const id = sandboxIdOf(req);
    if (q.signature_expiration && Number(q.signature_expiration) * 1000 < Date.now()) throw new ForgevmError("UNAUTHORIZED", "the signed URL has expired");
    const expected = signature(q.path ?? "", operation, q.username ?? "", forge.sandboxes.accessToken(id, ENVD_TOKEN), q.signature_expiration);
    if (expected !== q.signature) throw new ForgevmError("UNAUTHORIZED", "the URL's signature does not match its path, user and expiry");
    req.headers["x-access-token"] = forge.sandboxes.accessToken(id, ENVD_TOKEN);
  }
  return envdContext(forge, req, q.username);
}

/** What POST /files answers for one written file. */
const written = (path: string) => ({ path, name: posix.basename(path), type: "file" });

export async function envdHttpRoutes(app: FastifyInstance, { forge }: { forge: Forge }): Promise<void> {
  // Uploads stream through to the guest; nothing is buffered whole.
  app.addContentTypeParser("application/octet-stream", (_req, payload, done) => done(null, payload));
  app.addContentTypeParser("multipart/form-data", (_req, payload, done) => done(null, payload));

  app.get("/health", { schema: { hide: true } }, async (req, reply) => {
    try {
      // Only with its token: an id that does not exist, or is gone or paused, answers as a wrong
      // token does, so a caller without one learns nothing of which ids exist. With it, a health
      // check wakes a sandbox paused with auto-resume, as E2B's does.
      const id = sandboxIdOf(req);
      checkToken(forge, id, req);
      await forge.sandboxes.wake(id, "envd");
      sandboxOf(forge, req);
      return reply.status(204).send();
    } catch (e) {
      return envdError(reply, e);
    }
  });

  app.get("/envs", { schema: { hide: true } }, async (req, reply) => {
    try {
      const ctx = await envdContext(forge, req);
      const row = forge.sandboxes.get(ctx.sandbox.id);
      return reply.send({ ...row.env, E2B_SANDBOX: "true", E2B_SANDBOX_ID: row.id });
    } catch (e) {
      return envdError(reply, e);
    }
  });

  app.get("/files", { schema: { hide: true } }, async (req: FastifyRequest<{ Querystring: FilesQuery }>, reply) => {
    try {
      const ctx = await filesContext(forge, req, "read");
      const path = resolvePath(ctx, req.query.path);
      const r = await ctx.sandbox.openRead(path, ctx.as);
      reply.header("Content-Type", "application/octet-stream");
      if (r.length !== undefined) reply.header("Content-Length", String(r.length));
      return reply.send(r.stream);
    } catch (e) {
      return envdError(reply, e);
    }
  });

  app.post("/files", { schema: { hide: true } }, async (req: FastifyRequest<{ Querystring: FilesQuery }>, reply) => {
    const body = req.body as Readable;
    try {
      const ctx = await filesContext(forge, req, "write");
      const type = String(req.headers["content-type"] ?? "")
        .split(";")[0]
        .trim();
      if (type === "application/octet-stream") {
        if (!req.query.path) throw badRequest("path (query) is required for an octet-stream upload");
        const path = resolvePath(ctx, req.query.path);
        const encoding = String(req.headers["content-encoding"] ?? "identity").toLowerCase();
        if (encoding !== "identity" && encoding !== "gzip") throw badRequest(`Content-Encoding ${encoding} is not supported: send gzip or nothing`);
        const fed = detachable(body, { gzip: encoding === "gzip" });
        try {
          await ctx.sandbox.writeFile(path, fed.stream, { owner: ctx.as });
        } catch (e) {
          fed.release();
          throw e;
        }
        return reply.send([written(path)]);
      }
      if (type === "multipart/form-data") return reply.send(await multipart(ctx, req, body));
      throw badRequest(`Content-Type ${type || "(none)"}: upload multipart/form-data (part "file", its filename the target path) or application/octet-stream`);
    } catch (e) {
      envdError(reply, e);
      // The rest of an upload the guest refused is read and dropped, so the client can read the answer.
      if (reply.getHeader("connection") !== "close") body?.resume?.();
      return reply;
    }
  });
}

/** Writes each `file` part of a multipart body to its path (the `path` query wins for a single file). */
async function multipart(ctx: EnvdContext, req: FastifyRequest<{ Querystring: FilesQuery }>, body: Readable): Promise<ReturnType<typeof written>[]> {
  const results: ReturnType<typeof written>[] = [];
  let busboy: BusboyInstance;
  try {
    busboy = Busboy({ headers: req.headers as { "content-type": string }, preservePath: true, limits: { files: MAX_PARTS, fields: 100 } });
  } catch (e) {
    throw badRequest(`Content-Type: ${(e as Error).message} (a multipart upload needs its boundary)`);
  }
  const files = new FileParts(body, busboy, (m) => new ConnectError("invalid_argument", m));
  busboy.on("file", (field: string, file: Readable, filename: string) => {
    if (field !== "file") {
      file.resume();
      return;
    }
    files.add(req.query.path ?? filename, file, `the multipart part "${filename}"`);
  });
  await files.each(async (asked, stream) => {
    if (!asked) throw badRequest("a file part has no filename: name the target path in it, or in the path query");
    const path = resolvePath(ctx, asked);
    await ctx.sandbox.writeFile(path, stream, { owner: ctx.as });
    results.push(written(path));
  });
  if (!results.length) throw badRequest('the upload holds no file: send parts named "file"');
  return results;
}
