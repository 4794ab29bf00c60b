// E2B's sandbox logs (what its CLI's `e2b sandbox logs` and dashboard read), from the sandbox's own
// events: one entry per thing done to it or in it (created, each command started and finished,
// files written, pauses and resumes, errors), as E2B's come from envd's log of each call. Not the
// output of its processes. v2 is structured; v1 (deprecated) gives each entry as a JSON line too.
import type { FastifyInstance, FastifyRequest } from "fastify";
import { Type, type Static } from "typebox";
import type { Forge } from "../../core/forge.js";
import type { EventRow } from "../../core/types.js";
import { badRequest } from "../../http/errors.js";

const LEVELS = ["debug", "info", "warn", "error"] as const;
type Level = (typeof LEVELS)[number];
const MAX = 1000;

const Id = Type.Object({ sandboxID: Type.String({ minLength: 1, maxLength: 128 }) });
const V2Query = Type.Object(
  {
    cursor: Type.Optional(Type.String({ pattern: "^[0-9]{1,15}$" })),
    direction: Type.Optional(Type.Union([Type.Literal("forward"), Type.Literal("backward")])),
    level: Type.Optional(Type.Union(LEVELS.map((l) => Type.Literal(l)))),
    limit: Type.Optional(Type.String({ pattern: "^[0-9]{1,5}$" })),
    search: Type.Optional(Type.String({ maxLength: 256 })),
  },
  { additionalProperties: true },
);
const V1Query = Type.Object(
  { start: Type.Optional(Type.String({ pattern: "^[0-9]{1,15}$" })), limit: Type.Optional(Type.String({ pattern: "^[0-9]{1,5}$" })) },
  { additionalProperties: true },
);

interface Entry {
  timestamp: string;
  level: Level;
  message: string;
  fields: Record<string, string>;
}

/** The level an event is logged at. */
function levelOf(e: EventRow): Level {
  if (/error|failed/.test(e.type)) return "error";
  if (e.type === "sandbox.restore_retry" || e.type === "sandbox.pause_failed") return "warn";
  if (e.type === "exec.finished" && e.data?.exit_code !== 0) return "warn";
  if (e.type.endsWith(".progress")) return "debug";
  return "info";
}

/** One event as E2B's SandboxLogEntry: a message that names what happened, its data as string fields. */
function entryOf(e: EventRow): Entry {
  const fields: Record<string, string> = { event: e.type };
  for (const [k, v] of Object.entries(e.data ?? {})) fields[k] = typeof v === "string" ? v : JSON.stringify(v);
  const command = e.data?.command;
  const shown = Array.isArray(command) ? command.join(" ") : typeof command === "string" ? command : typeof e.data?.path === "string" ? e.data.path : null;
  const what = shown !== null ? `: ${shown}` : "";
  return { timestamp: e.timestamp, level: levelOf(e), message: `${e.type}${what}`, fields };
}

/** Entries of a sandbox at or above `level` holding `search`: oldest first from `cursorMs`, or with `backward` newest first up to it. */
function entries(forge: Forge, id: string, o: { cursorMs?: number; level?: Level; search?: string; limit: number; backward?: boolean }): Entry[] {
  const row = forge.sandboxes.get(id);
  const min = LEVELS.indexOf(o.level ?? "debug");
  const out: Entry[] = [];
  const at = o.cursorMs !== undefined ? new Date(o.cursorMs).toISOString() : undefined;
  // The filters are applied here, over at most this many of its newest (or oldest) events.
  const events = forge.events.ofSandbox(row.id, { ...(o.backward ? { untilIso: at } : { sinceIso: at }), limit: 20_000, backward: o.backward });
  for (const e of events) {
    const entry = entryOf(e);
    if (LEVELS.indexOf(entry.level) < min) continue;
    if (o.search && !entry.message.includes(o.search) && !Object.values(entry.fields).some((v) => v.includes(o.search!))) continue;
    out.push(entry);
    if (out.length >= o.limit) break;
  }
  return out;
}

function limitOf(s: string | undefined, dflt: number): number {
  const n = s === undefined ? dflt : Number(s);
  if (n < 1) throw badRequest("limit must be at least 1");
  return Math.min(n, MAX);
}

export async function logRoutes(app: FastifyInstance, { forge }: { forge: Forge }): Promise<void> {
  app.get(
    "/v2/sandboxes/:sandboxID/logs",
    { schema: { params: Id, querystring: V2Query, hide: true } },
    async (req: FastifyRequest<{ Params: Static<typeof Id>; Querystring: Static<typeof V2Query> }>) => {
      const q = req.query;
      const logs = entries(forge, req.params.sandboxID, {
        cursorMs: q.cursor !== undefined ? Number(q.cursor) : undefined,
        level: q.level,
        search: q.search,
        limit: limitOf(q.limit, 100),
        backward: q.direction !== "forward",
      });
      return { logs };
    },
  );

  app.get(
    "/sandboxes/:sandboxID/logs",
    { schema: { params: Id, querystring: V1Query, hide: true } },
    async (req: FastifyRequest<{ Params: Static<typeof Id>; Querystring: Static<typeof V1Query> }>) => {
      const logEntries = entries(forge, req.params.sandboxID, {
        cursorMs: req.query.start !== undefined ? Number(req.query.start) : undefined,
        limit: limitOf(req.query.limit, 1000),
      });
      return { logs: logEntries.map((e) => ({ timestamp: e.timestamp, line: JSON.stringify({ level: e.level, msg: e.message, ...e.fields }) })), logEntries };
    },
  );
}
