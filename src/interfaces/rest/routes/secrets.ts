// Secrets over REST: add, list, inspect, update and delete (core/secrets/secrets.ts). No answer
// carries a value, and none may be kept by a cache.
import type { FastifyPluginAsyncTypebox } from "@fastify/type-provider-typebox";
import { Type } from "typebox";
import type { Forge } from "../../../core/forge.js";
import { SecretCreate, SecretInfo, SecretUpdate, Status } from "../../../schemas/rest.js";

const NameParam = Type.Object({ name: Type.String({ minLength: 1, maxLength: 160 }) });

export const secretRoutes: FastifyPluginAsyncTypebox<{ forge: Forge }> = async (app, { forge }) => {
  app.addHook("onSend", async (_req, reply) => {
    reply.header("cache-control", "no-store");
  });

  app.get("/secrets", { schema: { tags: ["secrets"], response: { 200: Type.Array(SecretInfo) } } }, async () => forge.secrets.list());

  app.post("/secrets", { schema: { tags: ["secrets"], body: SecretCreate, response: { 201: SecretInfo } } }, async (req, reply) => {
    const info = await forge.secrets.create(req.body);
    reply.status(201);
    return info;
  });

  app.get("/secrets/:name", { schema: { tags: ["secrets"], params: NameParam, response: { 200: SecretInfo } } }, async (req) => forge.secrets.get(req.params.name));

  app.put("/secrets/:name", { schema: { tags: ["secrets"], params: NameParam, body: SecretUpdate, response: { 200: SecretInfo } } }, async (req) =>
    forge.secrets.update(req.params.name, req.body),
  );

  app.delete("/secrets/:name", { schema: { tags: ["secrets"], params: NameParam, response: { 200: Status("deleted") } } }, async (req) => {
    forge.secrets.remove(req.params.name);
    return { status: "deleted" as const };
  });
};
