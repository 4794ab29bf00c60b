// E2B's teams, as a self-hosted server has them: one team per API key (the server's), named
// TEAM_SLUG, whose id is derived from the key, so a caller with another key cannot name it. Its
// metrics come from the sandboxes' own history: how many ran at once, and how many started per
// second, over a range split into steps.
import { createHash } from "node:crypto";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { Type, type Static } from "typebox";
import type { Forge } from "../../core/forge.js";
import type { SandboxRow } from "../../core/types.js";
import { badRequest } from "../../http/errors.js";
import { ON_BEHALF_HEADER } from "../../http/api-key.js";

/** The team's slug: snapshot names are `<slug>/<name>`. */
export const TEAM_SLUG = "local";

/** Steps a metrics range is split into, as E2B's step computed from the range gives about. */
const STEPS = 120;
const WEEK_S = 7 * 24 * 3600;

/** The team id of a server with this API key (a UUID's shape, from the key's hash). */
export function teamIdOf(apiKey: string | undefined): string {
  const h = createHash("sha256")
    .update(`forgevm-team:${apiKey ?? ""}`)
    .digest("hex");
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-4${h.slice(13, 16)}-a${h.slice(17, 20)}-${h.slice(20, 32)}`;
}

const TeamParam = Type.Object({ teamID: Type.String({ minLength: 1, maxLength: 64 }) });
const Range = Type.Object(
  { start: Type.Optional(Type.String({ pattern: "^[0-9]{1,12}$" })), end: Type.Optional(Type.String({ pattern: "^[0-9]{1,12}$" })), metric: Type.Optional(Type.String()) },
  { additionalProperties: true },
);

/** The range asked for, in unix seconds: the last 7 days by default; a 400 naming the field when it is not a range. */
function rangeOf(q: Static<typeof Range>): { start: number; end: number } {
  const now = Math.floor(Date.now() / 1000);
  const end = q.end !== undefined ? Number(q.end) : now;
  const start = q.start !== undefined ? Number(q.start) : end - WEEK_S;
  if (start >= end) throw badRequest("start must be before end");
  if (end - start > 31 * 24 * 3600) throw badRequest("the range from start to end is at most 31 days");
  return { start, end };
}

interface Point {
  timestamp: string;
  timestampUnix: number;
  concurrentSandboxes: number;
  sandboxStartRate: number;
}

/** Concurrent sandboxes at each step's end, and starts per second within each step, from the sandboxes' rows. */
function series(rows: SandboxRow[], start: number, end: number): Point[] {
  const step = Math.max(1, Math.ceil((end - start) / STEPS));
  const spans = rows.map((r) => ({ from: Date.parse(r.created_at) / 1000, to: r.destroyed_at ? Date.parse(r.destroyed_at) / 1000 : Number.POSITIVE_INFINITY }));
  const out: Point[] = [];
  for (let t = start; t < end; t += step) {
    const until = Math.min(t + step, end);
    const concurrent = spans.filter((s) => s.from <= until && s.to > until).length;
    const started = spans.filter((s) => s.from >= t && s.from < until).length;
    out.push({ timestamp: new Date(t * 1000).toISOString(), timestampUnix: t, concurrentSandboxes: concurrent, sandboxStartRate: started / (until - t) });
  }
  return out;
}

export async function teamRoutes(app: FastifyInstance, { forge, apiKey }: { forge: Forge; apiKey?: string }): Promise<void> {
  const teamID = teamIdOf(apiKey);
  const all = () => forge.sandboxes.list(undefined, ["creating", "running", "paused", "stopped", "created", "destroyed", "error"]);
  const own = (req: FastifyRequest<{ Params: Static<typeof TeamParam> }>, reply: FastifyReply): boolean => {
    if (req.params.teamID === teamID) return true;
    void reply.status(403).send({ code: 403, message: `team ${req.params.teamID} is not yours` });
    return false;
  };

  // A key the caller presented itself, or none: never one it did not (a front relays a cluster
  // key's request with the operator's key, and says so).
  app.get("/teams", { schema: { hide: true } }, async (req) => {
    const given = req.headers["x-api-key"];
    const shown = typeof given === "string" && req.headers[ON_BEHALF_HEADER] === undefined ? given : "";
    return [{ teamID, name: TEAM_SLUG, apiKey: shown, isDefault: true }];
  });

  app.get(
    "/teams/:teamID/metrics",
    { schema: { params: TeamParam, querystring: Range, hide: true } },
    async (req: FastifyRequest<{ Params: Static<typeof TeamParam>; Querystring: Static<typeof Range> }>, reply) => {
      if (!own(req, reply)) return reply;
      const { start, end } = rangeOf(req.query);
      return series(all(), start, end);
    },
  );

  app.get(
    "/teams/:teamID/metrics/max",
    { schema: { params: TeamParam, querystring: Range, hide: true } },
    async (req: FastifyRequest<{ Params: Static<typeof TeamParam>; Querystring: Static<typeof Range> }>, reply) => {
      if (!own(req, reply)) return reply;
      const metric = req.query.metric;
      if (metric !== "concurrent_sandboxes" && metric !== "sandbox_start_rate") throw badRequest("metric must be concurrent_sandboxes or sandbox_start_rate");
      const { start, end } = rangeOf(req.query);
      const points = series(all(), start, end);
      const value = (p: Point) => (metric === "concurrent_sandboxes" ? p.concurrentSandboxes : p.sandboxStartRate);
      const best = points.reduce((a, b) => (value(b) > value(a) ? b : a), points[0]);
      return { timestamp: best.timestamp, timestampUnix: best.timestampUnix, value: value(best) };
    },
  );
}
