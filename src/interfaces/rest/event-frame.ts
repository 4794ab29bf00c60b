// One event as a server-sent event: the same frame from a node's /events and a front's.
import type { EventRow } from "../../core/types.js";

/** The SSE frame of an event; a front's events also name their `node`. */
export function eventFrame(e: EventRow & { node?: string }): string {
  const body = { id: String(e.seq), type: e.type, sandbox_id: e.sandbox_id, timestamp: e.timestamp, ...(e.node ? { node: e.node } : {}), ...(e.data ?? {}) };
  return `id: ${e.seq}\nevent: ${e.type}\ndata: ${JSON.stringify(body)}\n\n`;
}
