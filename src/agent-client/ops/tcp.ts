// TCP through the guest: tunnels to a guest port or onto a connection a guest listener accepted,
// and listeners on guest ports (egress proxy, published ports).
import type { Readable } from "node:stream";
import { Channel } from "../frame.js";
import type { ConnectRequest, ListenRequest, TcpEvent } from "../messages.js";
import type { OutgoingStream } from "../streams.js";
import { IncomingStream } from "../streams.js";
import type { Mux } from "../mux.js";
import { ignore } from "../../util/ignore.js";

/** A TCP connection inside the guest, carried over the channel. */
export interface Tunnel {
  readonly id: number;
  /** Bytes the guest side sends; ends when it half-closes. */
  readonly incoming: Readable;
  /** Bytes for the guest side; ending it half-closes the guest socket. */
  readonly outgoing: OutgoingStream;
  /** Resolves once the guest socket is connected; rejects if it cannot be. */
  readonly connected: Promise<void>;
  /** Settles when the guest socket is done in both directions or closed. */
  readonly done: Promise<unknown>;
  /** Closes the guest socket at once. */
  close(): void;
}

/** A TCP listener inside the guest; each accepted connection is offered as a `conn` number. */
export interface GuestListener {
  readonly id: number;
  readonly listening: Promise<void>;
  readonly done: Promise<unknown>;
  close(): void;
}

/** Opens a TCP tunnel to a guest port, or onto a connection a guest listener accepted. */
export function connect(mux: Mux, req: Omit<ConnectRequest, "op">): Tunnel {
  const incoming = new IncomingStream((n) => mux.grant(id, Channel.Stdout, n));
  const outgoing = mux.outgoing(() => id);
  let onConnected!: () => void;
  const connected = new Promise<void>((r) => (onConnected = r));
  const { id, result } = mux.start(
    { ...req, op: "connect" },
    {
      incoming: new Map([[Channel.Stdout, incoming]]),
      outgoing,
      onEvent: (ev: TcpEvent) => ev?.event === "connected" && onConnected(),
    },
  );
  result.catch(ignore("its failure reaches the caller through the stream"));
  const settled = Promise.race([connected, result]);
  settled.catch(ignore("its failure reaches the caller through the stream"));
  return { id, incoming, outgoing, connected: settled.then(() => undefined), done: result, close: () => mux.closeStream(id) };
}

/** Listens on a guest TCP port; onAccept gets each connection to claim with connect({conn}). */
export function listen(mux: Mux, req: Omit<ListenRequest, "op">, onAccept: (conn: number) => void): GuestListener {
  let onListening!: () => void;
  const listening = new Promise<void>((r) => (onListening = r));
  const { id, result } = mux.start(
    { ...req, op: "listen" },
    {
      onEvent: (ev: TcpEvent) => {
        if (ev?.event === "listening") onListening();
        else if (ev?.event === "accept" && Number.isSafeInteger(ev.conn) && ev.conn > 0) onAccept(ev.conn);
      },
    },
  );
  result.catch(ignore("its failure reaches the caller through the stream"));
  const settled = Promise.race([listening, result]);
  settled.catch(ignore("its failure reaches the caller through the stream"));
  return { id, listening: settled.then(() => undefined), done: result, close: () => mux.closeStream(id) };
}
