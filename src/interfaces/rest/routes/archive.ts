// Directory trees as tar streams: GET packs a guest path (a file, a link or a tree), PUT unpacks
// an uploaded tar into a guest directory. `cp` and the SDKs' archive methods use these.
import type { FastifyPluginAsyncTypebox } from "@fastify/type-provider-typebox";
import { Type } from "typebox";
import { packArchive, unpackArchive } from "../../../core/guest/archive.js";
import type { Forge } from "../../../core/forge.js";
import { IdParams, PathQuery, RawBody } from "../../../schemas/rest.js";
import { STREAM_TYPES, uploadStream } from "../uploads.js";
import { absPath } from "./files.js";

const ArchiveResult = Type.Object({
  status: Type.Literal("extracted"),
  entries: Type.Integer({ description: "Files, directories and links written" }),
  bytes: Type.Integer({ description: "Bytes of file content written" }),
});

export const archiveRoutes: FastifyPluginAsyncTypebox<{ forge: Forge }> = async (app, { forge }) => {
  // The tar body streams into the guest instead of being buffered.
  app.addContentTypeParser(STREAM_TYPES, (_req, payload, done) => done(null, payload));

  app.get(
    "/sandboxes/:id/archive",
    {
      schema: {
        tags: ["files"],
        summary: "Download a file or directory tree as a tar archive",
        params: IdParams,
        querystring: PathQuery,
        response: { 200: Type.Unsafe<unknown>({ type: "string", format: "binary", description: "application/x-tar" }) },
      },
    },
    async (req, reply) => {
      const tar = await packArchive(await forge.sandboxes.use(req.params.id, "rest"), absPath(req.query.path));
      reply.header("Content-Type", "application/x-tar");
      return reply.send(tar);
    },
  );

  app.put(
    "/sandboxes/:id/archive",
    {
      schema: {
        tags: ["files"],
        summary: "Extract a tar archive into a directory (created if missing)",
        params: IdParams,
        querystring: PathQuery,
        body: RawBody("application/x-tar"),
        response: { 200: ArchiveResult },
      },
    },
    async (req) => {
      const dir = absPath(req.query.path, "path (query)");
      const sb = await forge.sandboxes.use(req.params.id, "rest");
      const fed = uploadStream(req, "a tar archive");
      try {
        return { status: "extracted" as const, ...(await unpackArchive(sb, dir, fed.stream)) };
      } finally {
        fed.release(); // whatever follows the archive's end (or an error) is read and dropped, not reset
      }
    },
  );
};
