// Sandbox lifecycle routes: spawn, list, get, extend, destroy, prune, logs.
import { createHash } from "node:crypto";
import type { FastifyPluginAsyncTypebox } from "@fastify/type-provider-typebox";
import { Type } from "typebox";
import { parseTtl } from "../../../schemas/durations.js";
import { badRequest, sandboxGone } from "../../../http/errors.js";
import type { Forge } from "../../../core/forge.js";
import type { SandboxState } from "../../../core/types.js";
import { ExtendRequest, IdParams, Sandbox, SpawnRequest, Status } from "../../../schemas/rest.js";
import { sandboxView } from "../views.js";
import { ownerOf } from "../owner.js";
import { spawnOptionsOf } from "../spawn-options.js";

/** A digest of a create's body, its keys in order, so a retry of it matches whatever order it sent them in. */
function fingerprintOf(body: unknown): string {
  const sorted = (v: unknown): unknown =>
    Array.isArray(v)
      ? v.map(sorted)
      : v && typeof v === "object"
        ? Object.fromEntries(
            Object.keys(v)
              .sort()
              .map((k) => [k, sorted((v as Record<string, unknown>)[k])]),
          )
        : v;
  return createHash("sha256")
    .update(JSON.stringify(sorted(body ?? {})))
    .digest("hex")
    .slice(0, 32);
}

export const sandboxRoutes: FastifyPluginAsyncTypebox<{ forge: Forge }> = async (app, { forge }) => {
  app.post("/sandboxes", { schema: { tags: ["sandboxes"], body: SpawnRequest, response: { 201: Sandbox } } }, async (req, reply) => {
    const b = req.body ?? {};
    const owner = ownerOf(req, b.owner_id);
    const opts = spawnOptionsOf(b, owner);
    const make = async () => (b.start === false ? (await forge.sandboxes.create(opts)).id : (await forge.sandboxes.spawn(opts)).id);
    const key = req.headers["idempotency-key"];
    if (key === undefined) {
      reply.status(201);
      return sandboxView(forge.sandboxes.get(await make()));
    }
    if (typeof key !== "string" || !/^[\x21-\x7e]{1,255}$/.test(key))
      throw badRequest("Idempotency-Key must be 1 to 255 visible ASCII characters, the same on every try of one create");
    // A retry of a create that went through (its answer lost) gets that sandbox, not a second one.
    opts.idempotencyKey = key;
    const { id, replayed } = await forge.sandboxes.once(key, make, fingerprintOf(b));
    if (replayed) reply.header("Idempotent-Replayed", "true");
    reply.status(201);
    return sandboxView(forge.sandboxes.get(id));
  });

  app.get(
    "/sandboxes",
    {
      schema: {
        tags: ["sandboxes"],
        querystring: Type.Object({
          owner_id: Type.Optional(Type.String()),
          all: Type.Optional(Type.Union([Type.Literal("true"), Type.Literal("false"), Type.Literal("1"), Type.Literal("0")])),
          state: Type.Optional(
            Type.String({
              pattern: "^(created|creating|running|paused|stopped|destroyed|error)(,(created|creating|running|paused|stopped|destroyed|error))*$",
              description: "Only these states (comma-separated)",
            }),
          ),
        }),
        response: { 200: Type.Array(Sandbox) },
      },
    },
    async (req) => {
      // Live ones, as the contract says; with all=true the history too (failed ones with their reason).
      const all = req.query.all === "true" || req.query.all === "1";
      const states = req.query.state
        ? (req.query.state.split(",") as SandboxState[])
        : all
          ? (["created", "creating", "running", "paused", "stopped", "error", "destroyed"] as SandboxState[])
          : undefined;
      return forge.sandboxes.list(ownerOf(req, req.query.owner_id), states).map(sandboxView);
    },
  );

  app.delete("/sandboxes", { schema: { tags: ["sandboxes"], response: { 200: Type.Object({ pruned: Type.Integer() }) } } }, async () => ({
    pruned: await forge.sandboxes.prune(),
  }));

  app.get("/sandboxes/:id", { schema: { tags: ["sandboxes"], params: IdParams, response: { 200: Sandbox } } }, async (req) => {
    const row = forge.sandboxes.get(req.params.id);
    // A failed sandbox stays visible with its reason; a destroyed one is gone (the contract's 404).
    if (row.state === "destroyed") throw sandboxGone(row.id, `sandbox ${row.id} is destroyed`);
    return sandboxView(row);
  });

  app.delete("/sandboxes/:id", { schema: { tags: ["sandboxes"], params: IdParams, response: { 200: Status("destroyed") } } }, async (req) => {
    await forge.sandboxes.destroy(req.params.id, "rest");
    return { status: "destroyed" as const };
  });

  app.post("/sandboxes/:id/extend", { schema: { tags: ["sandboxes"], params: IdParams, body: ExtendRequest, response: { 200: Sandbox } } }, async (req) =>
    sandboxView(forge.sandboxes.extend(req.params.id, parseTtl(req.body.ttl, "ttl"))),
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
    async (req) => forge.sandboxes.logs(req.params.id, req.query.lines ? Math.max(1, Number(req.query.lines)) : 100),
  );
};
