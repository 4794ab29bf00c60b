// Named volumes over REST: create, list, inspect, remove (core/volumes.ts); and host directories
// mounted into running sandboxes, live (core/host-dirs/).
import type { FastifyPluginAsyncTypebox } from "@fastify/type-provider-typebox";
import { Type } from "typebox";
import type { Forge, VolumeInfo } from "../../../core/forge.js";
import { MountRequest, Volume, VolumeRequest } from "../../../schemas/images.js";
import { HostDirMount, IdParams } from "../../../schemas/rest.js";

const NameParam = Type.Object({ name: Type.String({ minLength: 1, maxLength: 64 }) });
const view = (v: VolumeInfo) => ({ ...v, labels: v.labels ?? undefined });

export const volumeRoutes: FastifyPluginAsyncTypebox<{ forge: Forge }> = async (app, { forge }) => {
  app.get("/volumes", { schema: { tags: ["volumes"], response: { 200: Type.Array(Volume) } } }, async () => (await forge.volumes.list()).map(view));

  app.post("/volumes", { schema: { tags: ["volumes"], body: VolumeRequest, response: { 201: Volume } } }, async (req, reply) => {
    const v = await forge.volumes.create(req.body.name, req.body.size_mb, req.body.labels);
    reply.status(201);
    return view(v);
  });

  app.post("/sandboxes/:id/mounts", { schema: { tags: ["volumes"], params: IdParams, body: MountRequest, response: { 201: Type.Array(HostDirMount) } } }, async (req, reply) => {
    const list = await forge.volumes.mountHostDir(req.params.id, req.body.host, req.body.path, req.body.read_only ?? false);
    reply.status(201);
    return list;
  });

  app.delete(
    "/sandboxes/:id/mounts",
    {
      schema: {
        tags: ["volumes"],
        params: IdParams,
        querystring: Type.Object({ path: Type.String({ pattern: "^/", maxLength: 4096 }) }),
        response: { 200: Type.Array(HostDirMount) },
      },
    },
    async (req) => forge.volumes.unmountHostDir(req.params.id, req.query.path),
  );

  app.get("/volumes/:name", { schema: { tags: ["volumes"], params: NameParam, response: { 200: Volume } } }, async (req) => view(await forge.volumes.get(req.params.name)));

  app.delete("/volumes/:name", { schema: { tags: ["volumes"], params: NameParam, response: { 200: Type.Object({ status: Type.Literal("deleted") }) } } }, async (req) => {
    await forge.volumes.remove(req.params.name);
    return { status: "deleted" as const };
  });
};
