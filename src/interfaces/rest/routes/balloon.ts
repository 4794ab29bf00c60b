// A running sandbox's balloon: GET says how much of its memory it may use now, PUT changes it
// without a restart (core/sandboxes/balloon.ts).
import type { FastifyPluginAsyncTypebox } from "@fastify/type-provider-typebox";
import type { Forge } from "../../../core/forge.js";
import { BalloonInfo, BalloonRequest } from "../../../schemas/balloon.js";
import { IdParams } from "../../../schemas/rest.js";

export const balloonRoutes: FastifyPluginAsyncTypebox<{ forge: Forge }> = async (app, { forge }) => {
  app.get("/sandboxes/:id/balloon", { schema: { tags: ["sandboxes"], params: IdParams, response: { 200: BalloonInfo } } }, async (req) => forge.sandboxes.balloon(req.params.id));

  app.put("/sandboxes/:id/balloon", { schema: { tags: ["sandboxes"], params: IdParams, body: BalloonRequest, response: { 200: BalloonInfo } } }, async (req) =>
    forge.sandboxes.balloon(req.params.id, req.body.memory_mb),
  );
};
