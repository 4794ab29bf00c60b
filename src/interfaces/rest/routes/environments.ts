// The Environments API over REST (core/environments/): specs, builds of them into images (with
// the log as NDJSON while it runs), what to spawn from a build, and registry connections.
import type { FastifyPluginAsyncTypebox } from "@fastify/type-provider-typebox";
import { Type } from "typebox";
import type { EnvSpec as Spec } from "../../../core/environments/index.js";
import type { Forge } from "../../../core/forge.js";
import { Connection, ConnectionRequest, EnvBuild, EnvBuildRequest, EnvSpec, EnvSpecRequest, SpawnConfig } from "../../../schemas/environments.js";
import { followNdjson } from "../stream-end.js";
import { ownerOf } from "../owner.js";

const IdParam = Type.Object({ id: Type.String({ minLength: 1, maxLength: 128 }) });
const OwnerQuery = Type.Object({ owner_id: Type.Optional(Type.String({ maxLength: 128 })) });
const tags = ["environments"];

const specView = (s: Spec) => ({ ...s, python_version: s.python_version ?? undefined });

export const environmentRoutes: FastifyPluginAsyncTypebox<{ forge: Forge }> = async (app, { forge }) => {
  const env = forge.environments;

  app.post("/environments/specs", { schema: { tags, body: EnvSpecRequest, response: { 201: EnvSpec } } }, async (req, reply) => {
    const spec = env.createSpec({ ...req.body, owner_id: ownerOf(req, req.body.owner_id) ?? "" });
    reply.status(201);
    return specView(spec);
  });

  app.get("/environments/specs", { schema: { tags, querystring: OwnerQuery, response: { 200: Type.Array(EnvSpec) } } }, async (req) =>
    env.listSpecs(ownerOf(req, req.query.owner_id) ?? "").map(specView),
  );

  app.get("/environments/specs/:id", { schema: { tags, params: IdParam, response: { 200: EnvSpec } } }, async (req) => specView(env.spec(req.params.id)));

  app.get(
    "/environments/specs/:id/suggestions",
    {
      schema: {
        tags,
        params: IdParam,
        description: "Debian packages the spec's base image lacks that it likely wants.",
        response: { 200: Type.Object({ spec_id: Type.String(), suggestions: Type.Array(Type.String()), note: Type.Optional(Type.String()) }) },
      },
    },
    async (req) => env.suggestions(req.params.id),
  );

  app.post(
    "/environments/builds",
    { schema: { tags, body: EnvBuildRequest, description: "Queues a build of a spec; its artifacts start as pending.", response: { 201: EnvBuild } } },
    async (req, reply) => {
      const b = env.builds.create(req.body.spec_id, req.body.targets, req.body.visibility);
      reply.status(201);
      return b;
    },
  );

  app.get(
    "/environments/builds",
    {
      schema: {
        tags,
        querystring: Type.Object({
          owner_id: Type.Optional(Type.String({ maxLength: 128 })),
          limit: Type.Optional(Type.String({ pattern: "^[0-9]{1,4}$", description: "1 to 200 (default 30)" })),
        }),
        response: { 200: Type.Array(Type.Object({ build: EnvBuild, spec: EnvSpec })) },
      },
    },
    async (req) =>
      env.builds
        .list(ownerOf(req, req.query.owner_id), req.query.limit === undefined ? 30 : Number(req.query.limit))
        .map((build) => ({ build, spec: specView(env.spec(build.spec_id)) })),
  );

  app.get("/environments/builds/:id", { schema: { tags, params: IdParam, response: { 200: EnvBuild } } }, async (req) => env.builds.view(req.params.id));

  app.post("/environments/builds/:id/cancel", { schema: { tags, params: IdParam, response: { 200: EnvBuild } } }, async (req) => env.builds.cancel(req.params.id));

  app.get("/environments/builds/:id/spawn-config", { schema: { tags, params: IdParam, response: { 200: SpawnConfig } } }, async (req) => env.spawnConfig(req.params.id));

  app.get(
    "/environments/builds/:id/log",
    {
      schema: {
        tags,
        params: IdParam,
        description: 'The build log as NDJSON ({"line"} per line): the lines so far, then new ones as they come, then {"done", "status"}.',
      },
    },
    async (req, reply) => {
      const b = env.builds.view(req.params.id);
      reply.hijack();
      const past = b.log ? b.log.replace(/\n$/, "").split("\n") : [];
      await followNdjson<{ line: string }>(
        reply.raw,
        req.id,
        past.map((line) => ({ line })),
        (write, end) => env.builds.follow(b.id, (line) => (line === null ? end() : write({ line }))),
        () => {
          const now = env.builds.view(b.id);
          return { done: true, status: now.status, ...(now.error ? { error: now.error } : {}) };
        },
      );
    },
  );

  app.post("/environments/registry-connections", { schema: { tags, body: ConnectionRequest, response: { 201: Connection } } }, async (req, reply) => {
    const { view } = await env.connections.put({ ...req.body, owner_id: ownerOf(req, req.body.owner_id) ?? "" });
    reply.status(201);
    return view;
  });

  app.get("/environments/registry-connections", { schema: { tags, querystring: OwnerQuery, response: { 200: Type.Array(Connection) } } }, async (req) =>
    env.connections.list(ownerOf(req, req.query.owner_id) ?? ""),
  );

  app.delete("/environments/registry-connections/:id", { schema: { tags, params: IdParam, response: { 200: Type.Object({ status: Type.Literal("deleted") }) } } }, async (req) => {
    env.connections.remove(req.params.id);
    return { status: "deleted" as const };
  });
};
