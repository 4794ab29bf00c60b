// Server-level routes: health, metrics, providers, pool status.
import type { FastifyPluginAsyncTypebox } from "@fastify/type-provider-typebox";
import { Type } from "typebox";
import { notFound } from "../../../http/errors.js";
import type { Forge, ProviderStatus } from "../../../core/forge.js";

export const systemRoutes: FastifyPluginAsyncTypebox<{ forge: Forge; version: string; startedAt: number }> = async (app, { forge, version, startedAt }) => {
  const Health = Type.Object({
    status: Type.Literal("ok"),
    version: Type.String(),
    uptime: Type.String(),
    storage: Type.Object(
      {
        full: Type.Boolean({ description: "the data directory's disk is full: what needs room is refused with 507 until it has room again" }),
        waiting_sandboxes: Type.Array(Type.String(), { description: "sandboxes whose guest waits, paused, for room" }),
      },
      { additionalProperties: false },
    ),
  });
  app.get("/health", { schema: { tags: ["system"], response: { 200: Health } } }, async () => ({
    status: "ok" as const,
    version,
    uptime: `${Math.round((Date.now() - startedAt) / 1000)}s`,
    storage: forge.sandboxes.storage(),
  }));

  app.get("/metrics", { schema: { tags: ["system"] } }, async () => {
    const c = forge.sandboxes.counts();
    return { active_sandboxes: c.live, total_sandboxes: c.total, uptime_seconds: Math.round((Date.now() - startedAt) / 1000) };
  });

  app.get("/pool/status", { schema: { tags: ["system"] } }, async () => forge.pools.status());

  const ProviderView = Type.Object({
    name: Type.String(),
    healthy: Type.Boolean(),
    default: Type.Boolean(),
    isolation: Type.Union([Type.Literal("vm"), Type.Literal("namespaces")]),
    warning: Type.Optional(Type.String()),
  });
  const view = (p: ProviderStatus) => ({
    name: p.name,
    healthy: p.healthy,
    default: p.default,
    isolation: p.isolation,
    ...(p.details.warning ? { warning: p.details.warning } : {}),
  });
  app.get("/providers", { schema: { tags: ["providers"], response: { 200: Type.Array(ProviderView) } } }, async () => (await forge.providers.list()).map(view));

  app.get("/providers/:name", { schema: { tags: ["providers"], params: Type.Object({ name: Type.String({ maxLength: 64 }) }) } }, async (req) => {
    const p = (await forge.providers.list()).find((x) => x.name === req.params.name);
    if (!p) throw notFound(`provider ${req.params.name} not found (enabled: ${forge.providers.names().join(", ")})`);
    return {
      ...view(p),
      sandbox_count: p.sandbox_count,
      features: p.features,
      config: { accel: p.accel, ...p.details },
      problems: p.problems,
    };
  });

  // A real probe of each provider: start a throwaway sandbox (no disk) and ping its agent.
  app.post("/providers/test", { schema: { tags: ["providers"] } }, async () => forge.providers.test());
};
