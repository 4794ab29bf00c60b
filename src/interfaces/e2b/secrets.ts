// E2B's /secrets on our secrets store (core/secrets/secrets.ts), in E2B's shapes: create, list
// (paged by X-Next-Token), get, update (a new version) and delete. Not-found is read from the
// status by E2B's SDK; no answer carries a value, and none may be cached.
import type { FastifyInstance } from "fastify";
import { Type, type Static } from "typebox";
import type { Forge } from "../../core/forge.js";
import type { SecretInfo } from "../../core/types.js";

const Create = Type.Object(
  { name: Type.String(), value: Type.String(), metadata: Type.Optional(Type.Record(Type.String(), Type.String())), description: Type.Optional(Type.String()) },
  { additionalProperties: false },
);
const Update = Type.Object({ value: Type.String(), metadata: Type.Optional(Type.Record(Type.String(), Type.String())) }, { additionalProperties: false });
const Param = Type.Object({ idOrName: Type.String({ minLength: 1, maxLength: 160 }) });
const ListQuery = Type.Object({ limit: Type.Optional(Type.String({ pattern: "^[0-9]{1,4}$" })), nextToken: Type.Optional(Type.String({ maxLength: 64 })) });

/** E2B's `Secret`. */
function view(s: SecretInfo) {
  return { secretID: s.id, name: s.name, currentVersion: s.version, metadata: s.metadata, createdAt: s.created_at, updatedAt: s.updated_at };
}

export async function secretRoutes(app: FastifyInstance, { forge }: { forge: Forge }): Promise<void> {
  app.addHook("onSend", async (_req, reply) => {
    reply.header("cache-control", "no-store");
  });

  app.post<{ Body: Static<typeof Create> }>("/secrets", { schema: { body: Create, hide: true } }, async (req, reply) => {
    reply.status(201);
    return view(await forge.secrets.create(req.body));
  });

  app.get<{ Querystring: Static<typeof ListQuery> }>("/secrets", { schema: { querystring: ListQuery, hide: true } }, async (req, reply) => {
    const limit = Math.min(Math.max(Number(req.query.limit ?? 100), 1), 1000);
    const page = forge.secrets.list(limit + 1, req.query.nextToken);
    if (page.length > limit) reply.header("x-next-token", page[limit - 1].id);
    return page.slice(0, limit).map(view);
  });

  app.get<{ Params: Static<typeof Param> }>("/secrets/:idOrName", { schema: { params: Param, hide: true } }, async (req) => view(forge.secrets.get(req.params.idOrName)));

  app.post<{ Params: Static<typeof Param>; Body: Static<typeof Update> }>("/secrets/:idOrName", { schema: { params: Param, body: Update, hide: true } }, async (req) =>
    view(await forge.secrets.update(req.params.idOrName, req.body)),
  );

  app.delete<{ Params: Static<typeof Param> }>("/secrets/:idOrName", { schema: { params: Param, hide: true } }, async (req, reply) => {
    forge.secrets.remove(req.params.idOrName);
    return reply.status(204).send();
  });
}
