// Resumability for streamable HTTP: the messages of each session's streams, kept (boundedly) so a
// client that lost its connection can reconnect with Last-Event-ID and miss nothing.
import type { EventStore } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import type { JSONRPCMessage } from "@modelcontextprotocol/sdk/types.js";

/** How many messages one session keeps for replay. */
const KEEP = 1000;

export class SessionEventStore implements EventStore {
  private readonly events: { id: string; stream: string; message: JSONRPCMessage }[] = [];
  private seq = 0;

  async storeEvent(streamId: string, message: JSONRPCMessage): Promise<string> {
    const id = `${streamId}_${++this.seq}`;
    this.events.push({ id, stream: streamId, message });
    if (this.events.length > KEEP) this.events.shift();
    return id;
  }

  async getStreamIdForEventId(eventId: string): Promise<string | undefined> {
    return this.events.find((e) => e.id === eventId)?.stream;
  }

  async replayEventsAfter(lastEventId: string, { send }: { send: (eventId: string, message: JSONRPCMessage) => Promise<void> }): Promise<string> {
    const at = this.events.findIndex((e) => e.id === lastEventId);
    if (at < 0) return "";
    const stream = this.events[at].stream;
    for (const e of this.events.slice(at + 1)) if (e.stream === stream) await send(e.id, e.message);
    return stream;
  }
}
