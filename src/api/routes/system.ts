// Server-level routes: health, metrics, providers, pool status.
import type { FastifyPluginAsyncTypebox } from "@fastify/type-provider-typebox";
import { Type } from "typebox";
import { notFound } from "../../core/errors.js";
import type { Forge } from "../../core/forge.js";

export const systemRoutes: FastifyPluginAsyncTypebox<{ forge: Forge; version: string; startedAt: number }> = async (app, { forge, version, startedAt }) => {
  app.get("/health", { schema: { tags: ["system"], response: { 200: Type.Object({ status: Type.Literal("ok"), version: Type.String(), uptime: Type.String() }) } } }, async () => ({
    status: "ok" as const,
    version,
    uptime: `${Math.round((Date.now() - startedAt) / 1000)}s`,
  }));

  app.get("/metrics", { schema: { tags: ["system"] } }, async () => {
    const c = forge.counts();
    return { active_sandboxes: c.live, total_sandboxes: c.total, uptime_seconds: Math.round((Date.now() - startedAt) / 1000) };
  });

  app.get("/pool/status", { schema: { tags: ["system"] } }, async () => forge.poolStatus());

  const ProviderView = Type.Object({ name: Type.String(), healthy: Type.Boolean(), default: Type.Boolean() });
  app.get("/providers", { schema: { tags: ["providers"], response: { 200: Type.Array(ProviderView) } } }, async () => {
    const h = await forge.providerHealth();
    return [{ name: h.name, healthy: h.healthy, default: true }];
  });

  app.get("/providers/:name", { schema: { tags: ["providers"], params: Type.Object({ name: Type.String() }) } }, async (req) => {
    if (req.params.name !== forge.providerName) throw notFound(`provider ${req.params.name} not found`);
    const h = await forge.providerHealth();
    return {
      name: h.name,
      healthy: h.healthy,
      default: true,
      sandbox_count: forge.list().length,
      config: { accel: h.accel, ...h.details },
      problems: h.problems,
    };
  });

  // A real probe: boot a throwaway VM (no disk) and ping its agent.
  app.post("/providers/test", { schema: { tags: ["providers"] } }, async () => ({ [forge.providerName]: await forge.testProvider() }));
};
