// Template routes: CRUD and spawn. Every accepted field takes effect.
import type { FastifyPluginAsyncTypebox } from "@fastify/type-provider-typebox";
import { Type } from "typebox";
import { formatDuration, NO_TTL } from "../../../schemas/durations.js";
import { badRequest, conflict, notFound } from "../../../http/errors.js";
import type { Forge } from "../../../core/forge.js";
import type { TemplateRow } from "../../../core/types.js";
import { templateBody } from "../../../core/sandboxes/template-ops.js";
import { Sandbox, Template, TemplateInput, TemplateSpawnRequest, TemplateUpdate } from "../../../schemas/rest.js";
import { sandboxView } from "../views.js";
import { ownerOf } from "../owner.js";
import { spawnOptionsOf } from "../spawn-options.js";

function view(forge: Forge, t: TemplateRow) {
  const d = forge.defaults;
  const ttlSeconds = t.ttl_seconds ?? (d.ttlMs === NO_TTL ? 0 : Math.round(d.ttlMs / 1000));
  return {
    name: t.name,
    version: t.version ?? "",
    image: t.image ?? d.image,
    description: t.description ?? "",
    setup: t.setup ?? [],
    allowed_hosts: t.allowed_hosts ?? [],
    ...(t.egress_rules ? { egress_rules: t.egress_rules } : {}),
    memory_mb: t.memory_mb ?? d.memoryMb,
    cpu_cores: t.cpu_cores ?? d.vcpus,
    vcpus: t.cpu_cores ?? d.vcpus,
    ttl_seconds: ttlSeconds,
    ttl: ttlSeconds === 0 ? "0" : formatDuration(ttlSeconds * 1000),
    env: t.env ?? {},
    secrets: t.secrets ?? [],
    pool_size: t.pool_size ?? 0,
    ...(t.idle ? { idle: t.idle } : {}),
    ...(t.forkable ? { forkable: true } : {}),
    ...(t.forward?.length ? { forward: t.forward } : {}),
    ...(t.system !== undefined ? { system: t.system } : {}),
    provider: t.provider ?? forge.providers.defaultName,
    metadata: t.metadata ?? {},
    created_at: t.created_at,
    updated_at: t.updated_at,
  };
}

export const templateRoutes: FastifyPluginAsyncTypebox<{ forge: Forge }> = async (app, { forge }) => {
  const Params = Type.Object({ name: Type.String({ minLength: 1 }) });
  const get = (name: string) => forge.templates.get(name);

  app.post("/templates", { schema: { tags: ["templates"], body: TemplateInput, response: { 201: Template } } }, async (req, reply) => {
    if (!(await forge.templates.create(templateBody(req.body)))) throw conflict(`template "${req.body.name}" already exists (use PUT /templates/${req.body.name} to change it)`);
    reply.status(201);
    return view(forge, get(req.body.name));
  });

  app.get("/templates", { schema: { tags: ["templates"], response: { 200: Type.Array(Template) } } }, async () => forge.templates.list().map((t) => view(forge, t)));

  app.get("/templates/:name", { schema: { tags: ["templates"], params: Params, response: { 200: Template } } }, async (req) => view(forge, get(req.params.name)));

  app.put("/templates/:name", { schema: { tags: ["templates"], params: Params, body: TemplateUpdate, response: { 200: Template } } }, async (req) => {
    if (req.body.name !== undefined && req.body.name !== req.params.name) throw badRequest(`name in the body ("${req.body.name}") differs from the URL ("${req.params.name}")`);
    if (!(await forge.templates.replace(templateBody({ ...req.body, name: req.params.name })))) throw notFound(`template "${req.params.name}" not found`);
    return view(forge, get(req.params.name));
  });

  app.delete("/templates/:name", { schema: { tags: ["templates"], params: Params, response: { 200: Type.Object({ status: Type.Literal("deleted") }) } } }, async (req) => {
    if (!(await forge.templates.remove(req.params.name))) throw notFound(`template "${req.params.name}" not found`);
    return { status: "deleted" as const };
  });

  app.post(
    "/templates/:name/spawn",
    {
      schema: {
        tags: ["templates"],
        params: Params,
        body: Type.Optional(TemplateSpawnRequest),
        response: { 201: Sandbox },
      },
    },
    async (req, reply) => {
      const b = req.body ?? {};
      get(req.params.name);
      const sb = await forge.sandboxes.spawn(spawnOptionsOf({ ...b, template: req.params.name }, ownerOf(req, b.owner_id)));
      reply.status(201);
      return sandboxView(forge.sandboxes.get(sb.id));
    },
  );
};
