// The server's event stream (server-sent events): every sandbox, image, snapshot and pool event
// as it happens, resumable after the last one seen.
import { ConnectionError } from "./errors.js";
import type { Transport } from "./http.js";
import type { EventInfo } from "./types.js";

/** Yields events until `signal` aborts (or the server closes the stream); `after` replays from there, `tail` the newest that many first. */
export async function* streamEvents(http: Transport, opts: { after?: string; tail?: number; signal?: AbortSignal } = {}): AsyncGenerator<EventInfo> {
  const query = { last_event_id: opts.after, tail: opts.tail !== undefined ? String(opts.tail) : undefined };
  const res = await http.send("GET", "/events", { query, timeoutMs: null, signal: opts.signal });
  const reader = res.body!.getReader();
  const dec = new TextDecoder();
  let buf = "";
  try {
    for (;;) {
      let chunk: ReadableStreamReadResult<Uint8Array>;
      try {
        chunk = await reader.read();
      } catch (e) {
        if (opts.signal?.aborted) return;
        throw new ConnectionError(`the event stream from ${http.baseUrl} broke: ${(e as Error).message}`);
      }
      if (chunk.value) buf += dec.decode(chunk.value, { stream: true });
      let end: number;
      while ((end = buf.indexOf("\n\n")) >= 0) {
        const block = buf.slice(0, end);
        buf = buf.slice(end + 2);
        const data = block
          .split("\n")
          .filter((l) => l.startsWith("data: "))
          .map((l) => l.slice(6))
          .join("\n");
        if (data) yield JSON.parse(data) as EventInfo;
      }
      if (chunk.done) return;
    }
  } finally {
    await reader.cancel().catch(() => {});
  }
}
