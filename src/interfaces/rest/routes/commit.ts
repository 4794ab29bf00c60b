// Commit over REST: a running sandbox's disk becomes a new image (core/images/commit.ts).
import type { FastifyPluginAsyncTypebox } from "@fastify/type-provider-typebox";
import type { Forge } from "../../../core/forge.js";
import { imageInfo } from "../../../core/forge.js";
import { CommitRequest, CommitResult } from "../../../schemas/images.js";
import { IdParams } from "../../../schemas/rest.js";
import { imageView } from "./images.js";

export const commitRoutes: FastifyPluginAsyncTypebox<{ forge: Forge }> = async (app, { forge }) => {
  app.post("/sandboxes/:id/commit", { schema: { tags: ["images"], params: IdParams, body: CommitRequest, response: { 201: CommitResult } } }, async (req, reply) => {
    const { image, changes, squash, comment, pause } = req.body;
    const r = await forge.images.commit(req.params.id, {
      image,
      squash,
      comment,
      pause,
      changes: changes && {
        cmd: changes.cmd,
        entrypoint: changes.entrypoint,
        env: changes.env && Object.entries(changes.env).map(([k, v]) => `${k}=${v}`),
        workdir: changes.workdir,
        user: changes.user,
        labels: changes.labels,
        exposedPorts: changes.expose?.map((p) => (p.includes("/") ? p : `${p}/tcp`)),
      },
    });
    reply.status(201);
    return {
      image: imageView(imageInfo(r.image, false)),
      layer: r.layer,
      frozen_ms: r.frozenMs,
      disk_pause_ms: r.diskPauseMs,
      duration_ms: r.durationMs,
    };
  });
};
