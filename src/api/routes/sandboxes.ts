// Sandbox lifecycle routes: spawn, list, get, extend, destroy, prune, logs.
import type { FastifyPluginAsyncTypebox } from "@fastify/type-provider-typebox";
import { Type } from "typebox";
import { parseDuration } from "../../core/durations.js";
import { badRequest, sandboxGone } from "../../core/errors.js";
import type { Forge } from "../../core/forge.js";
import { IdParams, Sandbox, SpawnRequest, Status } from "../schemas.js";
import { sandboxView } from "../views.js";

export const sandboxRoutes: FastifyPluginAsyncTypebox<{ forge: Forge }> = async (app, { forge }) => {
  app.post("/sandboxes", { schema: { tags: ["sandboxes"], body: SpawnRequest, response: { 201: Sandbox } } }, async (req, reply) => {
    const b = req.body ?? {};
    if (b.provider && b.provider !== forge.providerName) throw badRequest(`provider "${b.provider}" is not available (available: ${forge.providerName})`);
    const owner = (req.headers["x-user-id"] as string | undefined) || b.owner_id;
    const sb = await forge.spawn({
      image: b.image,
      memoryMb: b.memory_mb,
      vcpus: b.vcpus,
      diskMb: b.disk_mb,
      ttlMs: b.ttl !== undefined ? parseDuration(b.ttl, "ttl") : undefined,
      ownerId: owner,
      metadata: b.metadata,
      env: b.env,
      template: b.template,
      user: b.user,
      network: b.network,
      allow: b.allow,
      ports: b.ports,
      secrets: b.secrets,
    });
    reply.status(201);
    return sandboxView(forge.get(sb.id));
  });

  app.get(
    "/sandboxes",
    { schema: { tags: ["sandboxes"], querystring: Type.Object({ owner_id: Type.Optional(Type.String()) }), response: { 200: Type.Array(Sandbox) } } },
    async (req) => forge.list((req.headers["x-user-id"] as string | undefined) || req.query.owner_id).map(sandboxView),
  );

  app.delete("/sandboxes", { schema: { tags: ["sandboxes"], response: { 200: Type.Object({ pruned: Type.Integer() }) } } }, async () => ({ pruned: await forge.prune() }));

  app.get("/sandboxes/:id", { schema: { tags: ["sandboxes"], params: IdParams, response: { 200: Sandbox } } }, async (req) => {
    const row = forge.get(req.params.id);
    if (row.state === "destroyed" || row.state === "error") throw sandboxGone(row.id, `sandbox ${row.id} is ${row.state}`);
    return sandboxView(row);
  });

  app.delete("/sandboxes/:id", { schema: { tags: ["sandboxes"], params: IdParams, response: { 200: Status("destroyed") } } }, async (req) => {
    await forge.destroy(req.params.id);
    return { status: "destroyed" as const };
  });

  app.post(
    "/sandboxes/:id/extend",
    { schema: { tags: ["sandboxes"], params: IdParams, body: Type.Object({ ttl: Type.String() }), response: { 200: Sandbox } } },
    async (req) => sandboxView(forge.extend(req.params.id, parseDuration(req.body.ttl, "ttl"))),
  );

  app.get(
    "/sandboxes/:id/logs",
    {
      schema: {
        tags: ["sandboxes"],
        params: IdParams,
        querystring: Type.Object({ lines: Type.Optional(Type.String({ pattern: "^[0-9]{1,6}$" })) }),
        response: { 200: Type.Array(Type.String()) },
      },
    },
    async (req) => forge.logs(req.params.id, req.query.lines ? Math.max(1, Number(req.query.lines)) : 100),
  );
};
