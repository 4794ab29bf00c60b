// GET /api/v1/events on a front: every node's events as one server-sent stream, in the cluster's
// order (each names its node), with the same replay (Last-Event-ID, tail) and heartbeats as a node's.
import type { IncomingMessage, ServerResponse } from "node:http";
import type { ClusterDirectory, ClusterEvent } from "../core/cluster/directory.js";
import { eventFrame } from "../interfaces/rest/event-frame.js";
import { HEARTBEAT_MS } from "../interfaces/rest/routes/events.js";

const SEQ = /^[0-9]{1,15}$/;
const TAIL = /^([0-9]{1,3}|1000)$/;

/** Streams the cluster's events to `res` until the client leaves; a bad cursor gets `bad`'s 400. */
export async function streamClusterEvents(req: IncomingMessage, res: ServerResponse, dir: ClusterDirectory, bad: (message: string) => void): Promise<void> {
  const q = new URL(req.url ?? "/", "http://x").searchParams;
  const header = req.headers["last-event-id"];
  const resume = typeof header === "string" ? header : q.get("last_event_id");
  const tail = q.get("tail");
  if (resume !== null && !SEQ.test(resume)) return bad(`last_event_id: "${resume}" is not an event id (digits)`);
  if (tail !== null && !TAIL.test(tail)) return bad(`tail: "${tail}" is not a number from 0 to 1000`);
  const after = resume !== null ? Number(resume) : tail !== null ? Math.max(0, (await dir.events.lastSeq()) - Number(tail)) : null;

  // Subscribe first and hold live events while replaying, so none falls in between; send each once.
  const sent = new Set<number>();
  const held: ClusterEvent[] = [];
  let replaying = true;
  const send = (e: ClusterEvent) => {
    if (sent.has(e.seq)) return;
    sent.add(e.seq);
    // Only numbers near the newest can come again (a feed reads back a short window).
    if (sent.size > 5000) for (const seq of sent) if (seq < e.seq - 1000) sent.delete(seq);
    res.write(eventFrame(e));
  };
  const unsubscribe = await dir.events.subscribe((e) => (replaying ? held.push(e) : send(e)));
  res.writeHead(200, { "Content-Type": "text/event-stream", "Cache-Control": "no-store", Connection: "keep-alive" });
  res.write(": forgevm events\n\n");
  try {
    if (after !== null) {
      let from = after;
      for (let batch = await dir.events.after(from); batch.length; batch = await dir.events.after(from)) {
        batch.forEach(send);
        from = batch[batch.length - 1].seq;
      }
    }
  } finally {
    replaying = false;
    held.forEach(send);
  }
  const beat = setInterval(() => res.write(": heartbeat\n\n"), HEARTBEAT_MS);
  res.once("close", () => {
    clearInterval(beat);
    unsubscribe();
  });
}
