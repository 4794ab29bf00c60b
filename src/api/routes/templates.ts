// Template routes: CRUD and spawn. Every accepted field takes effect.
import type { FastifyPluginAsyncTypebox } from "@fastify/type-provider-typebox";
import { Type, type Static } from "typebox";
import { parseDuration } from "../../core/durations.js";
import { badRequest, conflict, notFound } from "../../core/errors.js";
import type { Forge } from "../../core/forge.js";
import type { TemplateBody, TemplateRow } from "../../store/templates.js";
import { Sandbox } from "../schemas.js";
import { sandboxView } from "../views.js";

const NAME = "^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$";

const TemplateInput = Type.Object({
  name: Type.String({ pattern: NAME }),
  version: Type.Optional(Type.String()),
  image: Type.Optional(Type.String({ minLength: 1 })),
  description: Type.Optional(Type.String()),
  setup: Type.Optional(Type.Array(Type.String({ minLength: 1 }), { maxItems: 100 })),
  allowed_hosts: Type.Optional(Type.Array(Type.String({ minLength: 1, maxLength: 300 }), { maxItems: 500 })),
  memory_mb: Type.Optional(Type.Integer({ minimum: 64, maximum: 65536 })),
  cpu_cores: Type.Optional(Type.Integer({ minimum: 1, maximum: 64 })),
  vcpus: Type.Optional(Type.Integer({ minimum: 1, maximum: 64 })),
  ttl_seconds: Type.Optional(Type.Integer({ minimum: 1 })),
  ttl: Type.Optional(Type.Union([Type.String(), Type.Integer({ minimum: 1 })])),
  env: Type.Optional(Type.Record(Type.String(), Type.String())),
  secrets: Type.Optional(
    Type.Array(
      Type.Object({ name: Type.String({ minLength: 1, maxLength: 128 }), inject_at: Type.Optional(Type.Union([Type.Literal("env"), Type.Literal("file"), Type.Literal("both")])) }),
      { maxItems: 64 },
    ),
  ),
  pool_size: Type.Optional(Type.Integer({ minimum: 0, maximum: 64 })),
});
type TemplateInputT = Static<typeof TemplateInput>;

const Template = Type.Object(
  {
    name: Type.String(),
    version: Type.String(),
    image: Type.String(),
    description: Type.String(),
    setup: Type.Array(Type.String()),
    allowed_hosts: Type.Array(Type.String()),
    memory_mb: Type.Integer(),
    cpu_cores: Type.Integer(),
    ttl_seconds: Type.Integer(),
    env: Type.Record(Type.String(), Type.String()),
    secrets: Type.Array(Type.Object({ name: Type.String(), inject_at: Type.Optional(Type.String()) })),
    pool_size: Type.Integer(),
    created_at: Type.String(),
    updated_at: Type.String(),
  },
  { $id: "Template" },
);

function toBody(t: TemplateInputT): TemplateBody {
  const ttlSeconds = t.ttl_seconds ?? (typeof t.ttl === "number" ? t.ttl : t.ttl !== undefined ? Math.ceil(parseDuration(t.ttl, "ttl") / 1000) : undefined);
  return {
    name: t.name,
    version: t.version,
    image: t.image,
    description: t.description,
    setup: t.setup,
    memory_mb: t.memory_mb,
    cpu_cores: t.cpu_cores ?? t.vcpus,
    ttl_seconds: ttlSeconds,
    env: t.env,
    allowed_hosts: t.allowed_hosts?.length ? t.allowed_hosts : undefined,
    secrets: t.secrets?.length ? t.secrets : undefined,
    pool_size: t.pool_size,
  };
}

function view(forge: Forge, t: TemplateRow) {
  const d = forge.defaults;
  return {
    name: t.name,
    version: t.version ?? "",
    image: t.image ?? d.image,
    description: t.description ?? "",
    setup: t.setup ?? [],
    allowed_hosts: t.allowed_hosts ?? [],
    memory_mb: t.memory_mb ?? d.memoryMb,
    cpu_cores: t.cpu_cores ?? d.vcpus,
    ttl_seconds: t.ttl_seconds ?? Math.round(d.ttlMs / 1000),
    env: t.env ?? {},
    secrets: t.secrets ?? [],
    pool_size: t.pool_size ?? 0,
    created_at: t.created_at,
    updated_at: t.updated_at,
  };
}

export const templateRoutes: FastifyPluginAsyncTypebox<{ forge: Forge }> = async (app, { forge }) => {
  const Params = Type.Object({ name: Type.String({ minLength: 1 }) });
  const get = (name: string) => forge.getTemplate(name);

  app.post("/templates", { schema: { tags: ["templates"], body: TemplateInput, response: { 201: Template } } }, async (req, reply) => {
    if (!(await forge.createTemplate(toBody(req.body)))) throw conflict(`template "${req.body.name}" already exists (use PUT /templates/${req.body.name} to change it)`);
    reply.status(201);
    return view(forge, get(req.body.name));
  });

  app.get("/templates", { schema: { tags: ["templates"], response: { 200: Type.Array(Template) } } }, async () => forge.listTemplates().map((t) => view(forge, t)));

  app.get("/templates/:name", { schema: { tags: ["templates"], params: Params, response: { 200: Template } } }, async (req) => view(forge, get(req.params.name)));

  app.put(
    "/templates/:name",
    { schema: { tags: ["templates"], params: Params, body: Type.Intersect([Type.Omit(TemplateInput, ["name"]), Type.Object({ name: Type.Optional(Type.String()) })]), response: { 200: Template } } },
    async (req) => {
      if (req.body.name !== undefined && req.body.name !== req.params.name) throw badRequest(`name in the body ("${req.body.name}") differs from the URL ("${req.params.name}")`);
      if (!(await forge.replaceTemplate(toBody({ ...req.body, name: req.params.name })))) throw notFound(`template "${req.params.name}" not found`);
      return view(forge, get(req.params.name));
    },
  );

  app.delete("/templates/:name", { schema: { tags: ["templates"], params: Params, response: { 200: Type.Object({ status: Type.Literal("deleted") }) } } }, async (req) => {
    if (!(await forge.deleteTemplate(req.params.name))) throw notFound(`template "${req.params.name}" not found`);
    return { status: "deleted" as const };
  });

  app.post(
    "/templates/:name/spawn",
    {
      schema: {
        tags: ["templates"],
        params: Params,
        body: Type.Optional(
          Type.Object({
            provider: Type.Optional(Type.String()),
            ttl: Type.Optional(Type.String()),
            owner_id: Type.Optional(Type.String()),
            secrets: Type.Optional(Type.Record(Type.String(), Type.String())),
          }),
        ),
        response: { 201: Sandbox },
      },
    },
    async (req, reply) => {
      const b = req.body ?? {};
      get(req.params.name);
      if (b.provider && b.provider !== forge.providerName) throw badRequest(`provider "${b.provider}" is not available (available: ${forge.providerName})`);
      const sb = await forge.spawn({
        template: req.params.name,
        ttlMs: b.ttl !== undefined ? parseDuration(b.ttl, "ttl") : undefined,
        ownerId: (req.headers["x-user-id"] as string | undefined) || b.owner_id,
        secrets: b.secrets,
      });
      reply.status(201);
      return sandboxView(forge.get(sb.id));
    },
  );
};
