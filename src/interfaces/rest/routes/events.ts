// GET /events: server-sent events with ids, replay after Last-Event-ID, and heartbeats.
import type { OutgoingHttpHeaders } from "node:http";
import type { FastifyPluginAsyncTypebox } from "@fastify/type-provider-typebox";
import { Type } from "typebox";
import type { Forge } from "../../../core/forge.js";
import type { EventRow } from "../../../core/types.js";
import { eventFrame } from "../event-frame.js";

/** How often an idle stream sends a comment, so proxies keep it open. */
export const HEARTBEAT_MS = 15_000;

export const eventRoutes: FastifyPluginAsyncTypebox<{ forge: Forge }> = async (app, { forge }) => {
  // Open streams never end on their own: a shutting-down server ends them so close() can finish.
  const open = new Set<NodeJS.WritableStream & { end(): void }>();
  app.addHook("preClose", async () => {
    for (const out of open) out.end();
  });

  app.get(
    "/events",
    {
      schema: {
        tags: ["events"],
        querystring: Type.Object({
          last_event_id: Type.Optional(Type.String({ pattern: "^[0-9]{1,15}$" })),
          tail: Type.Optional(Type.String({ pattern: "^([0-9]{1,3}|1000)$", description: "without a last event id: replay the newest this many (at most 1000) first" })),
          api_key: Type.Optional(Type.String()),
        }),
        headers: Type.Object({ "last-event-id": Type.Optional(Type.String({ pattern: "^[0-9]{1,15}$" })) }),
      },
    },
    async (req, reply) => {
      const resume = req.headers["last-event-id"] ?? req.query.last_event_id;
      const after = resume !== undefined ? Number(resume) : req.query.tail ? Math.max(0, forge.events.lastSeq() - Number(req.query.tail)) : Number.NaN;
      reply.hijack();
      const out = reply.raw;
      // The headers set so far (request id, CORS for an allowed origin) go out with the stream's own.
      out.writeHead(200, { ...(reply.getHeaders() as OutgoingHttpHeaders), "Content-Type": "text/event-stream", "Cache-Control": "no-store", Connection: "keep-alive" });
      out.write(": forgevm events\n\n");
      // Subscribe first and hold live events while replaying, so none falls in between.
      let lastSent = Number.isFinite(after) ? after : 0;
      const held: EventRow[] = [];
      let replaying = true;
      const send = (e: EventRow) => {
        if (e.seq <= lastSent) return; // already sent by the replay
        lastSent = e.seq;
        out.write(eventFrame(e));
      };
      const unsubscribe = forge.events.subscribe((e) => (replaying ? held.push(e) : send(e)));
      if (Number.isFinite(after)) {
        for (let batch = forge.events.replay(after); batch.length; batch = forge.events.replay(lastSent)) batch.forEach(send);
      }
      replaying = false;
      held.forEach(send);
      const beat = setInterval(() => out.write(": heartbeat\n\n"), HEARTBEAT_MS);
      open.add(out);
      out.once("close", () => {
        open.delete(out);
        clearInterval(beat);
        unsubscribe();
      });
    },
  );
};
