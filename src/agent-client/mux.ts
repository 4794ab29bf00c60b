// What an operation (ops/*.ts) needs of the channel it runs on: start a request with its
// streams, grant the guest credit, open an outgoing stream, end a stream, send a simple request.
import type { SimpleOps } from "./messages.js";
import type { IncomingStream, OutgoingStream } from "./streams.js";

export interface RequestOptions {
  /** Reject with AgentTimeoutError after this many ms (the guest-side work is not cancelled). */
  timeoutMs?: number;
}

/** The streams and event handler of a request in flight. */
export interface StreamParts {
  onEvent?(body: any): void;
  incoming?: Map<number, IncomingStream>;
  outgoing?: OutgoingStream;
}

export interface Mux {
  /** Sends a request; `result` settles with the guest's reply. */
  start<B extends { op: string }>(body: B, parts: StreamParts, opts?: RequestOptions): { id: number; result: Promise<any> };
  /** Grants the guest `n` more bytes on a stream's channel. */
  grant(id: number, channel: number, n: number): void;
  /** A host → guest stream for the request whose id `id()` returns. */
  outgoing(id: () => number): OutgoingStream;
  /** Ends a tunnel or listener at once; with `transfer`, a read or write (an agent without the feature leaves it be). */
  closeStream(id: number, transfer?: boolean): void;
  request<K extends keyof SimpleOps>(req: SimpleOps[K]["req"], opts?: RequestOptions): Promise<SimpleOps[K]["res"]>;
}
