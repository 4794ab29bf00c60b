// Dockerfile builds over REST: the context is uploaded as a tar (Docker's build API does the
// same), the build runs as a job with its steps and log, the log can be followed as NDJSON, and
// DELETE cancels it (core/build/).
import type { FastifyPluginAsyncTypebox } from "@fastify/type-provider-typebox";
import { MEMORY_MB } from "../../../schemas/bounds.js";
import { Type } from "typebox";
import { badRequest } from "../../../http/errors.js";
import type { Forge } from "../../../core/forge.js";
import { BuildJob } from "../../../schemas/images.js";
import { RawBody } from "../../../schemas/rest.js";
import { STREAM_TYPES, uploadStream } from "../uploads.js";
import { followNdjson } from "../stream-end.js";

const Many = Type.Union([Type.String({ maxLength: 4096 }), Type.Array(Type.String({ maxLength: 4096 }), { maxItems: 200 })]);
const list = (v: string | string[] | undefined) => (v === undefined ? undefined : Array.isArray(v) ? v : [v]);
const IdParam = Type.Object({ id: Type.String({ minLength: 1, maxLength: 64 }) });

/** "K=V" build arguments → a map, or a 400 naming the one that is not. */
function buildArgs(v: string[] | undefined): Record<string, string> | undefined {
  if (!v) return undefined;
  const out: Record<string, string> = {};
  for (const a of v) {
    const eq = a.indexOf("=");
    if (eq <= 0) throw badRequest(`build_arg: "${a}" is not NAME=VALUE`);
    out[a.slice(0, eq)] = a.slice(eq + 1);
  }
  return out;
}

/** The least memory a build VM gets: package managers in a Dockerfile's RUN steps are killed below it. */
const BUILD_MIN_MB = 128;

/** memory_mb of a build, or a 400 naming its range. */
function memoryMb(v: string | undefined): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isInteger(n) || n < BUILD_MIN_MB || n > MEMORY_MB.maximum) throw badRequest(`memory_mb must be from ${BUILD_MIN_MB} to ${MEMORY_MB.maximum} (MiB), got ${v}`);
  return n;
}

export const buildRoutes: FastifyPluginAsyncTypebox<{ forge: Forge }> = async (app, { forge }) => {
  app.addContentTypeParser(STREAM_TYPES, (_req, payload, done) => done(null, payload));

  app.post(
    "/builds",
    {
      schema: {
        tags: ["images"],
        description: "Builds an image from the Dockerfile in the uploaded context (a tar); returns the job at once.",
        querystring: Type.Object({
          tag: Type.String({ minLength: 1, maxLength: 512, description: "NAME[:TAG] of the result" }),
          dockerfile: Type.Optional(Type.String({ minLength: 1, maxLength: 4096 })),
          build_arg: Type.Optional(Many),
          network: Type.Optional(Type.Union([Type.Literal("none"), Type.Literal("allowlist"), Type.Literal("full")])),
          allow: Type.Optional(Many),
          no_cache: Type.Optional(Type.Union([Type.Literal("true"), Type.Literal("false")])),
          target: Type.Optional(Type.String({ minLength: 1, maxLength: 128 })),
          memory_mb: Type.Optional(Type.String({ pattern: "^[0-9]{1,6}$", description: `MiB for each build VM, ${BUILD_MIN_MB} to ${MEMORY_MB.maximum}` })),
        }),
        body: RawBody("the build context as a tar"),
        response: { 202: BuildJob },
      },
    },
    async (req, reply) => {
      const q = req.query as {
        tag: string;
        dockerfile?: string;
        build_arg?: string | string[];
        network?: string;
        allow?: string | string[];
        no_cache?: string;
        target?: string;
        memory_mb?: string;
      };
      if (!q.tag) throw badRequest("tag: the name of the image to build is required");
      const body = uploadStream(req, "the build context as a tar");
      const job = await forge.builds.start(body.stream, {
        tag: q.tag,
        dockerfile: q.dockerfile,
        buildArgs: buildArgs(list(q.build_arg)),
        network: q.network,
        allow: list(q.allow),
        noCache: q.no_cache === "true",
        target: q.target,
        memoryMb: memoryMb(q.memory_mb),
      });
      reply.status(202);
      return job;
    },
  );

  app.get("/builds/:id", { schema: { tags: ["images"], params: IdParam, response: { 200: BuildJob } } }, async (req) => forge.builds.job(req.params.id));

  app.delete("/builds/:id", { schema: { tags: ["images"], params: IdParam, response: { 200: BuildJob } } }, async (req) => forge.builds.cancel(req.params.id));

  app.get(
    "/builds/:id/log",
    {
      schema: {
        tags: ["images"],
        params: IdParam,
        description: 'The build log as NDJSON ({"line"} per line): the kept lines, then new ones as they come, then {"done", "state"}.',
      },
    },
    async (req, reply) => {
      const job = forge.builds.job(req.params.id);
      reply.hijack();
      await followNdjson<{ line: string }>(
        reply.raw,
        req.id,
        job.log.map((line) => ({ line })),
        (write, end) => forge.builds.follow(job.id, (line) => (line === null ? end() : write({ line }))),
        () => {
          const now = forge.builds.job(job.id);
          return { done: true, state: now.state, ...(now.digest ? { digest: now.digest } : {}), ...(now.error ? { error: now.error } : {}) };
        },
      );
    },
  );
};
