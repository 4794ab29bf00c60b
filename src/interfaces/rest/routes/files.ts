// File routes: write (JSON text/base64, or a raw streamed body), read (streamed), delete, list,
// stat, glob, move, chmod.
import type { FastifyPluginAsyncTypebox } from "@fastify/type-provider-typebox";
import { absoluteGuestPath } from "../../../core/guest/session.js";
import type { Readable } from "node:stream";
import { posix } from "node:path";
import { Type } from "typebox";
import { badRequest } from "../../../http/errors.js";
import type { Forge } from "../../../core/forge.js";
import { ChmodRequest, FileInfo, FileWrite, IdParams, MoveRequest, PathQuery, RAW_BODY, Status } from "../../../schemas/rest.js";
import { decodeBase64, fileInfoView } from "../views.js";
import { suggest } from "../../../http/error-body.js";
import { detachable } from "../../../util/detachable.js";

/** An absolute guest path from a request field, or a 400 naming the field. */
export const absPath = absoluteGuestPath;

function parseMode(m: string | undefined): number {
  if (m === undefined) return 0o644;
  if (!/^0?[0-7]{3,4}$/.test(m)) throw badRequest(`mode must be an octal string such as "0644", got "${m}"`);
  return parseInt(m, 8);
}

export const fileRoutes: FastifyPluginAsyncTypebox<{ forge: Forge }> = async (app, { forge }) => {
  // Raw uploads stream straight through to the guest instead of being buffered.
  app.addContentTypeParser("application/octet-stream", (_req, payload, done) => done(null, payload));

  app.post(
    "/sandboxes/:id/files",
    {
      schema: {
        tags: ["files"],
        params: IdParams,
        querystring: Type.Object({ path: Type.Optional(Type.String()), mode: Type.Optional(Type.String()) }),
        // The union cannot validate a stream; JSON bodies are checked by hand below.
        body: Type.Union([FileWrite, Type.Unsafe<unknown>({ type: "string", format: "binary" })], { [RAW_BODY]: true }),
        response: { 200: Status("written") },
      },
    },
    async (req) => {
      const sb = await forge.sandboxes.use(req.params.id, "rest");
      const ct = String(req.headers["content-type"] ?? "");
      if (ct.startsWith("application/octet-stream")) {
        const path = absPath(req.query.path ?? "", "path (query)");
        const fed = detachable(req.body as Readable);
        try {
          await sb.writeFile(path, fed.stream, { mode: parseMode(req.query.mode) });
        } catch (e) {
          fed.release();
          throw e;
        }
        return { status: "written" as const };
      }
      const b = req.body as Record<string, unknown> | null;
      if (!b || typeof b !== "object" || Array.isArray(b)) throw badRequest("body must be a JSON object with path and content");
      const extra = Object.keys(b).filter((k) => !(k in FileWrite.properties));
      if (extra.length) throw badRequest(`${extra[0]} is not a field of this request${suggest(extra[0], Object.keys(FileWrite.properties))}`);
      if (typeof b.path !== "string") throw badRequest("path is required (a string)");
      if (typeof b.content !== "string") throw badRequest("content is required (a string)");
      if (b.mode !== undefined && typeof b.mode !== "string") throw badRequest('mode must be an octal string such as "0644"');
      const enc = b.encoding ?? "utf8";
      if (enc !== "utf8" && enc !== "utf-8" && enc !== "base64") throw badRequest('encoding must be "utf8" or "base64"');
      const data = enc === "base64" ? decodeBase64(b.content, "content") : Buffer.from(b.content, "utf8");
      await sb.writeFile(absPath(b.path), data, { mode: parseMode(b.mode as string | undefined) });
      return { status: "written" as const };
    },
  );

  app.get("/sandboxes/:id/files", { schema: { tags: ["files"], params: IdParams, querystring: PathQuery } }, async (req, reply) => {
    const sb = await forge.sandboxes.use(req.params.id, "rest");
    const r = await sb.openRead(absPath(req.query.path));
    reply.header("Content-Type", "application/octet-stream");
    if (r.length !== undefined) reply.header("Content-Length", String(r.length));
    return reply.send(r.stream);
  });

  app.delete(
    "/sandboxes/:id/files",
    {
      schema: {
        tags: ["files"],
        params: IdParams,
        querystring: Type.Object({
          path: Type.String(),
          recursive: Type.Optional(Type.Union([Type.Literal("true"), Type.Literal("false"), Type.Literal("1"), Type.Literal("0")])),
        }),
        response: { 200: Status("deleted") },
      },
    },
    async (req) => {
      const path = absPath(req.query.path);
      if (posix.normalize(path) === "/") throw badRequest("path must not be /");
      await (await forge.sandboxes.use(req.params.id, "rest")).remove(path, req.query.recursive === "true" || req.query.recursive === "1");
      return { status: "deleted" as const };
    },
  );

  app.get(
    "/sandboxes/:id/files/list",
    { schema: { tags: ["files"], params: IdParams, querystring: Type.Object({ path: Type.Optional(Type.String()) }), response: { 200: Type.Array(FileInfo) } } },
    async (req) => {
      const dir = absPath(req.query.path ?? "/");
      const entries = await (await forge.sandboxes.use(req.params.id, "rest")).listFiles(dir);
      return entries.sort((a, b) => a.name.localeCompare(b.name)).map((e) => fileInfoView(posix.join(dir, e.name), e.name, e));
    },
  );

  app.get("/sandboxes/:id/files/stat", { schema: { tags: ["files"], params: IdParams, querystring: PathQuery, response: { 200: FileInfo } } }, async (req) => {
    const path = absPath(req.query.path);
    const st = await (await forge.sandboxes.use(req.params.id, "rest")).stat(path);
    return fileInfoView(path, posix.basename(path) || "/", st);
  });

  app.get(
    "/sandboxes/:id/files/glob",
    { schema: { tags: ["files"], params: IdParams, querystring: Type.Object({ pattern: Type.String() }), response: { 200: Type.Array(Type.String()) } } },
    async (req) => (await forge.sandboxes.use(req.params.id, "rest")).glob(absPath(req.query.pattern, "pattern")),
  );

  app.post("/sandboxes/:id/files/move", { schema: { tags: ["files"], params: IdParams, body: MoveRequest, response: { 200: Status("moved") } } }, async (req) => {
    await (await forge.sandboxes.use(req.params.id, "rest")).move(absPath(req.body.old_path, "old_path"), absPath(req.body.new_path, "new_path"));
    return { status: "moved" as const };
  });

  app.post("/sandboxes/:id/files/chmod", { schema: { tags: ["files"], params: IdParams, body: ChmodRequest, response: { 200: Status("chmod applied") } } }, async (req) => {
    await (await forge.sandboxes.use(req.params.id, "rest")).chmod(absPath(req.body.path), parseMode(req.body.mode));
    return { status: "chmod applied" as const };
  });
};
