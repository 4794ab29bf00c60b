// Snapshot routes: take one of a sandbox, fork a sandbox, list, inspect, delete, restore, and
// move one to another host (export as an archive, import one).
import type { FastifyPluginAsyncTypebox } from "@fastify/type-provider-typebox";
import { Type, type Static } from "typebox";
import { parseTtl } from "../../../schemas/durations.js";
import type { Forge } from "../../../core/forge.js";
import { CopiesRequest, IdParams, RawBody, Sandbox, Snapshot, SnapshotRequest, Status } from "../../../schemas/rest.js";
import { STREAM_TYPES, uploadStream } from "../uploads.js";
import { sandboxView, snapshotView } from "../views.js";
import { ownerOf } from "../owner.js";

const Copies = Type.Object({ sandboxes: Type.Array(Sandbox) });

export const snapshotRoutes: FastifyPluginAsyncTypebox<{ forge: Forge }> = async (app, { forge }) => {
  const copyOptions = (b: Static<typeof CopiesRequest> | undefined, owner: string | undefined) => ({
    count: b?.count,
    ttlMs: b?.ttl !== undefined ? parseTtl(b.ttl, "ttl") : undefined,
    ownerId: owner,
    metadata: b?.metadata,
    network: b?.network,
    allow: b?.allow,
    forkable: b?.forkable,
  });

  app.post(
    "/sandboxes/:id/snapshot",
    {
      schema: {
        tags: ["snapshots"],
        params: IdParams,
        body: Type.Optional(SnapshotRequest),
        response: { 201: Snapshot },
      },
    },
    async (req, reply) => {
      const row = await forge.snapshots.take(req.params.id, req.body?.name);
      reply.status(201);
      return snapshotView(row);
    },
  );

  app.post(
    "/sandboxes/:id/fork",
    {
      schema: {
        tags: ["snapshots"],
        params: IdParams,
        body: Type.Optional(CopiesRequest),
        response: { 201: Type.Object({ sandboxes: Type.Array(Sandbox), pause_ms: Type.Number(), duration_ms: Type.Number() }) },
      },
    },
    async (req, reply) => {
      const r = await forge.snapshots.fork(req.params.id, copyOptions(req.body, ownerOf(req, req.body?.owner_id)));
      reply.status(201);
      return { sandboxes: r.sandboxes.map((s) => sandboxView(forge.sandboxes.get(s.id))), pause_ms: r.pauseMs, duration_ms: r.totalMs };
    },
  );

  app.get("/snapshots/:id/export", { schema: { tags: ["snapshots"], params: IdParams, produces: ["application/x-tar"] } }, async (req, reply) => {
    const { stream, filename } = await forge.snapshots.export(req.params.id);
    reply.header("content-type", "application/x-tar");
    reply.header("content-disposition", `attachment; filename="${filename}"`);
    return reply.send(stream);
  });

  app.addContentTypeParser(STREAM_TYPES, (_req, payload, done) => done(null, payload));
  app.post(
    "/snapshots/import",
    {
      schema: {
        tags: ["snapshots"],
        querystring: Type.Object({ name: Type.Optional(SnapshotRequest.properties.name) }),
        body: RawBody("a snapshot archive from GET /snapshots/{id}/export"),
        response: { 201: Snapshot },
      },
    },
    async (req, reply) => {
      const row = await forge.snapshots.import(uploadStream(req, "a snapshot archive from GET /snapshots/{id}/export").stream, req.query.name);
      reply.status(201);
      return snapshotView(row);
    },
  );

  app.get("/snapshots", { schema: { tags: ["snapshots"], response: { 200: Type.Array(Snapshot) } } }, async () => forge.snapshots.list().map(snapshotView));

  app.get("/snapshots/:id", { schema: { tags: ["snapshots"], params: IdParams, response: { 200: Snapshot } } }, async (req) => snapshotView(forge.snapshots.get(req.params.id)));

  app.delete("/snapshots/:id", { schema: { tags: ["snapshots"], params: IdParams, response: { 200: Status("deleted") } } }, async (req) => {
    await forge.snapshots.remove(req.params.id);
    return { status: "deleted" as const };
  });

  app.post("/snapshots/:id/spawn", { schema: { tags: ["snapshots"], params: IdParams, body: Type.Optional(CopiesRequest), response: { 201: Copies } } }, async (req, reply) => {
    const sbs = await forge.snapshots.restore(req.params.id, copyOptions(req.body, ownerOf(req, req.body?.owner_id)));
    reply.status(201);
    return { sandboxes: sbs.map((s) => sandboxView(forge.sandboxes.get(s.id))) };
  });
};
