// Docker's verbs over REST: start, stop, restart, kill (a signal to the main process), and the
// main process's output (`follow` streams it as NDJSON while the sandbox runs).
import { constants } from "node:os";
import type { FastifyPluginAsyncTypebox } from "@fastify/type-provider-typebox";
import { Type } from "typebox";
import { badRequest } from "../../../http/errors.js";
import { parseDuration, parseTtl } from "../../../schemas/durations.js";
import type { Forge, LogLine } from "../../../core/forge.js";
import { IdParams, Sandbox } from "../../../schemas/rest.js";
import { followNdjson } from "../stream-end.js";
import { sandboxView } from "../views.js";

const StopBody = Type.Object({ timeout: Type.Optional(Type.String({ description: 'Grace period before SIGKILL, e.g. "10s"' })) }, { additionalProperties: false });
const StartBody = Type.Object({ ttl: Type.Optional(Type.String()) }, { additionalProperties: false });
/** `memory: false` keeps the disk only: the resume is then a cold boot over it. */
const PauseBody = Type.Object({ memory: Type.Optional(Type.Boolean()) }, { additionalProperties: false });

/** A signal by name ("SIGTERM", "TERM") or number. */
export function signalNumber(v: string | number): number {
  if (typeof v === "number" || /^\d+$/.test(v)) {
    const n = Number(v);
    if (n >= 1 && n <= 64) return n;
  } else {
    const name = v.toUpperCase().startsWith("SIG") ? v.toUpperCase() : `SIG${v.toUpperCase()}`;
    const n = (constants.signals as Record<string, number>)[name];
    if (n) return n;
  }
  throw badRequest(`signal must be a signal name (SIGTERM, HUP, …) or a number from 1 to 64, got "${v}"`);
}

const GuestProcess = Type.Object(
  {
    pid: Type.Integer(),
    ppid: Type.Integer(),
    user: Type.String({ description: "User name from the guest's /etc/passwd, else the uid." }),
    state: Type.String({ description: "R running, S sleeping, D disk wait, Z zombie, T stopped" }),
    rss_bytes: Type.Integer(),
    cpu_seconds: Type.Number(),
    command: Type.String(),
  },
  { $id: "GuestProcess" },
);

export const workloadRoutes: FastifyPluginAsyncTypebox<{ forge: Forge }> = async (app, { forge }) => {
  app.get(
    "/sandboxes/:id/top",
    { schema: { tags: ["sandboxes"], summary: "The processes running in a sandbox", params: IdParams, response: { 200: Type.Array(GuestProcess) } } },
    async (req) => forge.sandboxes.processes(req.params.id),
  );

  const view = (id: string) => sandboxView(forge.sandboxes.get(id));

  app.post("/sandboxes/:id/stop", { schema: { tags: ["sandboxes"], params: IdParams, body: Type.Optional(StopBody), response: { 200: Sandbox } } }, async (req) => {
    const grace = req.body?.timeout !== undefined ? parseDuration(req.body.timeout, "timeout") : undefined;
    return sandboxView(await forge.sandboxes.stop(req.params.id, grace));
  });

  app.post("/sandboxes/:id/start", { schema: { tags: ["sandboxes"], params: IdParams, body: Type.Optional(StartBody), response: { 200: Sandbox } } }, async (req) => {
    const sb = await forge.sandboxes.start(req.params.id, req.body?.ttl !== undefined ? parseTtl(req.body.ttl, "ttl") : undefined);
    return view(sb.id);
  });

  app.post("/sandboxes/:id/pause", { schema: { tags: ["sandboxes"], params: IdParams, body: Type.Optional(PauseBody), response: { 200: Sandbox } } }, async (req) => {
    await forge.sandboxes.pause(req.params.id, { memory: req.body?.memory });
    return view(req.params.id);
  });

  app.post("/sandboxes/:id/resume", { schema: { tags: ["sandboxes"], params: IdParams, body: Type.Optional(StartBody), response: { 200: Sandbox } } }, async (req) => {
    const sb = await forge.sandboxes.resume(req.params.id, req.body?.ttl !== undefined ? parseTtl(req.body.ttl, "ttl") : undefined);
    return view(sb.id);
  });

  app.post("/sandboxes/:id/restart", { schema: { tags: ["sandboxes"], params: IdParams, body: Type.Optional(StopBody), response: { 200: Sandbox } } }, async (req) => {
    const grace = req.body?.timeout !== undefined ? parseDuration(req.body.timeout, "timeout") : undefined;
    const sb = await forge.sandboxes.restart(req.params.id, undefined, grace);
    return view(sb.id);
  });

  app.post(
    "/sandboxes/:id/kill",
    {
      schema: {
        tags: ["sandboxes"],
        params: IdParams,
        body: Type.Object({ signal: Type.Optional(Type.Union([Type.String(), Type.Integer()])) }, { additionalProperties: false }),
        response: { 200: Type.Object({ signal: Type.Integer() }) },
      },
    },
    async (req) => {
      const signal = signalNumber(req.body?.signal ?? "SIGKILL");
      await forge.sandboxes.kill(req.params.id, signal);
      return { signal };
    },
  );

  app.get(
    "/sandboxes/:id/main/logs",
    {
      schema: {
        tags: ["sandboxes"],
        description: "The main process's output, a line per entry; with follow=true, NDJSON that goes on while the sandbox runs.",
        params: IdParams,
        querystring: Type.Object(
          {
            tail: Type.Optional(Type.String({ pattern: "^[0-9]{1,7}$" })),
            since: Type.Optional(Type.String({ description: 'A time (RFC 3339) or a duration back from now ("10m")' })),
            follow: Type.Optional(Type.Union([Type.Literal("true"), Type.Literal("false")])),
          },
          { additionalProperties: false },
        ),
      },
    },
    async (req, reply) => {
      const q = req.query;
      let sinceMs: number | undefined;
      if (q.since !== undefined) {
        sinceMs = /^\d{4}-\d\d-\d\d/.test(q.since) ? Date.parse(q.since) : Date.now() - parseDuration(q.since, "since");
        if (Number.isNaN(sinceMs)) throw badRequest(`since must be an RFC 3339 time or a duration, got "${q.since}"`);
      }
      const row = forge.sandboxes.get(req.params.id);
      const opts = { tail: q.tail !== undefined ? Number(q.tail) : undefined, sinceMs };
      if (q.follow !== "true") return { lines: await forge.sandboxes.mainLogs(row.id, opts) };
      reply.hijack();
      await followNdjson<LogLine>(reply.raw, req.id, [], (write, end) => forge.sandboxes.followMain(row.id, opts, write, end));
    },
  );
};
