// Image routes: list, pull (as a job with progress), remove.
import type { FastifyPluginAsyncTypebox } from "@fastify/type-provider-typebox";
import { Type } from "typebox";
import type { Forge } from "../../core/forge.js";
import { PullJobs } from "../../core/pull-jobs.js";

const ImageView = Type.Object({
  name: Type.String(),
  digest: Type.Optional(Type.String()),
  size: Type.Integer(),
  created_at: Type.String(),
  source: Type.String(),
  in_use: Type.Boolean(),
});

const Job = Type.Object({
  id: Type.String(),
  image: Type.String(),
  state: Type.Union([Type.Literal("running"), Type.Literal("done"), Type.Literal("error")]),
  progress: Type.Array(Type.String()),
  error: Type.Optional(Type.String()),
  digest: Type.Optional(Type.String()),
  started_at: Type.String(),
  finished_at: Type.Optional(Type.String()),
});

export const imageRoutes: FastifyPluginAsyncTypebox<{ forge: Forge }> = async (app, { forge }) => {
  const jobs = new PullJobs((ref, log) => forge.pullImage(ref, log));

  app.get("/images", { schema: { tags: ["images"], response: { 200: Type.Array(ImageView) } } }, async () =>
    (await forge.listImages()).map((i) => ({
      name: i.name,
      ...(i.digest ? { digest: i.digest } : {}),
      size: i.size,
      created_at: i.createdAt,
      source: i.source,
      in_use: i.inUse,
    })),
  );

  app.post("/images/pull", { schema: { tags: ["images"], body: Type.Object({ image: Type.String({ minLength: 1 }) }), response: { 202: Job } } }, async (req, reply) => {
    reply.status(202);
    return jobs.start(req.body.image);
  });

  app.get("/images/pulls/:id", { schema: { tags: ["images"], params: Type.Object({ id: Type.String() }), response: { 200: Job } } }, async (req) => jobs.get(req.params.id));

  app.delete("/images/:name", { schema: { tags: ["images"], params: Type.Object({ name: Type.String({ minLength: 1 }) }), response: { 200: Type.Object({ status: Type.Literal("deleted") }) } } }, async (req) => {
    await forge.removeImage(decodeURIComponent(req.params.name));
    return { status: "deleted" as const };
  });
};
