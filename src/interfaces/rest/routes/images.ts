// Image routes: list, pull (as a job with progress), import an uploaded archive, export one as
// an OCI archive, push to a registry, remove.
import type { FastifyPluginAsyncTypebox } from "@fastify/type-provider-typebox";
import { Type } from "typebox";
import type { Forge, ImageInfo } from "../../../core/forge.js";
import { familiarName } from "../../../core/images/image-reference.js";
import { PushRequest, PushResult } from "../../../schemas/images.js";
import { Image as ImageView, PullJob as Job, PullRequest, RawBody } from "../../../schemas/rest.js";
import { STREAM_TYPES, uploadStream } from "../uploads.js";

/** An image as the API shows it. */
export const imageView = (i: ImageInfo) => ({
  name: familiarName(i.name),
  ...(i.digest ? { digest: i.digest } : {}),
  size: i.size,
  created_at: i.createdAt,
  source: i.source,
  in_use: i.inUse,
  ...(i.layers ? { layers: i.layers.length } : {}),
  ...(i.parent ? { parent: familiarName(i.parent) } : {}),
});
const view = imageView;
const NameParam = Type.Object({ name: Type.String({ minLength: 1, maxLength: 512 }) });

export const imageRoutes: FastifyPluginAsyncTypebox<{ forge: Forge }> = async (app, { forge }) => {
  // Uploaded archives stream to disk rather than being buffered.
  app.addContentTypeParser(STREAM_TYPES, (_req, payload, done) => done(null, payload));

  app.get("/images", { schema: { tags: ["images"], response: { 200: Type.Array(ImageView) } } }, async () => (await forge.images.list()).map(view));

  app.post("/images/pull", { schema: { tags: ["images"], body: PullRequest, response: { 202: Job } } }, async (req, reply) => {
    reply.status(202);
    return forge.images.startPull(req.body.image);
  });

  app.get("/images/pulls/:id", { schema: { tags: ["images"], params: Type.Object({ id: Type.String({ minLength: 1, maxLength: 64 }) }), response: { 200: Job } } }, async (req) =>
    forge.images.pullJob(req.params.id),
  );

  app.post(
    "/images/import",
    {
      schema: {
        tags: ["images"],
        querystring: Type.Object({
          name: Type.Optional(Type.String({ minLength: 1, maxLength: 512 })),
          tag: Type.Optional(Type.String({ pattern: "^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$" })),
          ref: Type.Optional(Type.String({ minLength: 1, maxLength: 512 })),
        }),
        // The body is a stream, checked as an archive while it is read.
        body: RawBody("an OCI archive, docker save tarball or docker-archive"),
        response: { 201: ImageView },
      },
    },
    async (req, reply) => {
      const q = req.query as { name?: string; tag?: string; ref?: string };
      const img = await forge.images.importStream(uploadStream(req, "an image archive (docker save, OCI)").stream, { name: q.name, tag: q.tag, ref: q.ref });
      reply.status(201);
      return view(
        (await forge.images.list()).find((i) => i.name === img.name) ?? {
          name: img.name,
          size: img.size,
          createdAt: img.createdAt,
          source: img.source,
          digest: img.digest,
          inUse: false,
        },
      );
    },
  );

  app.get("/images/:name/export", { schema: { tags: ["images"], params: NameParam, produces: ["application/x-tar"] } }, async (req, reply) => {
    const { stream, filename, digest } = await forge.images.export(req.params.name);
    reply.header("content-type", "application/x-tar");
    reply.header("content-disposition", `attachment; filename="${filename}"`);
    reply.header("docker-content-digest", digest);
    return reply.send(stream);
  });

  app.post("/images/:name/push", { schema: { tags: ["images"], params: NameParam, body: Type.Optional(PushRequest), response: { 200: PushResult } } }, async (req) => {
    const r = await forge.images.push(req.params.name, req.body?.reference);
    return { reference: r.reference, digest: r.digest, uploaded_bytes: r.uploaded, blobs: r.blobs };
  });

  app.delete(
    "/images/:name",
    {
      schema: {
        tags: ["images"],
        params: Type.Object({ name: Type.String({ minLength: 1, maxLength: 512 }) }),
        response: { 200: Type.Object({ status: Type.Literal("deleted"), pruned_blobs: Type.Integer() }) },
      },
    },
    async (req) => {
      await forge.images.remove(req.params.name);
      return { status: "deleted" as const, pruned_blobs: await forge.images.pruneBlobs() };
    },
  );
};
