// Metrics over REST: a sandbox's series and the host's (10 minutes at full resolution, a day in
// minute averages), the newest sample of everything (`forgevm stats`), and the Prometheus text.
import type { FastifyPluginAsyncTypebox } from "@fastify/type-provider-typebox";
import type { Forge } from "../../../core/forge.js";
import { parseDuration } from "../../../schemas/durations.js";
import { badRequest } from "../../../http/errors.js";
import { LiveStats, MetricHistory, MetricsQuery } from "../../../schemas/metrics.js";
import { IdParams } from "../../../schemas/rest.js";

/** Most buckets one answer holds; a finer step over a long range is refused. */
const MAX_BUCKETS = 5000;
const DAY_MS = 24 * 3600_000;

/** The range and bucket width a query asks for (defaults: the last 10 minutes, in about 300 buckets). */
export function metricsRange(q: { since?: string; step?: string }, intervalMs: number, now = Date.now()): { sinceMs: number; stepMs: number } {
  let sinceMs = now - 10 * 60_000;
  if (q.since !== undefined) {
    const at = /^\d{4}-\d\d-\d\dT/.test(q.since) ? Date.parse(q.since) : Number.NaN;
    if (!Number.isNaN(at)) sinceMs = at;
    else if (/^\d{4}-/.test(q.since)) throw badRequest(`since "${q.since}" is not an RFC 3339 time`);
    else sinceMs = now - parseDuration(q.since, "since");
  }
  sinceMs = Math.max(sinceMs, now - DAY_MS);
  const span = Math.max(1, now - sinceMs);
  const stepMs = q.step !== undefined ? parseDuration(q.step, "step") : Math.max(intervalMs, Math.ceil(span / 300 / 1000) * 1000);
  if (span / stepMs > MAX_BUCKETS) throw badRequest(`step ${q.step} over this range would make more than ${MAX_BUCKETS} buckets: use a larger step`);
  return { sinceMs, stepMs };
}

export const metricRoutes: FastifyPluginAsyncTypebox<{ forge: Forge }> = async (app, { forge }) => {
  app.get("/sandboxes/:id/metrics", { schema: { tags: ["metrics"], params: IdParams, querystring: MetricsQuery, response: { 200: MetricHistory } } }, async (req) => {
    const interval = forge.metrics.intervalMs;
    const { sinceMs, stepMs } = metricsRange(req.query, interval);
    const h = forge.metrics.history(req.params.id, sinceMs, stepMs);
    return { sandbox: h.sandbox, since: new Date(sinceMs).toISOString(), step_ms: stepMs, interval_ms: interval, samples: h.samples };
  });

  app.get("/host/metrics", { schema: { tags: ["metrics"], querystring: MetricsQuery, response: { 200: MetricHistory } } }, async (req) => {
    const interval = forge.metrics.intervalMs;
    const { sinceMs, stepMs } = metricsRange(req.query, interval);
    return { since: new Date(sinceMs).toISOString(), step_ms: stepMs, interval_ms: interval, samples: forge.metrics.hostHistory(sinceMs, stepMs) };
  });

  app.get("/stats", { schema: { tags: ["metrics"], response: { 200: LiveStats } } }, async () => forge.metrics.latest());
};
