// A guest TCP connection (an agent-channel tunnel) as an ordinary Node duplex stream, and the
// splice between it and a host socket.
import { Duplex } from "node:stream";
import type { Socket } from "node:net";
import type { Tunnel } from "../agent-client/index.js";

/** A duplex over a tunnel: reads what the guest socket sends, writes reach it; destroy closes it. */
export function tunnelDuplex(t: Tunnel): Duplex {
  const d = new Duplex({
    read() {
      t.incoming.resume();
    },
    write(chunk: Buffer, _enc, cb) {
      t.outgoing.write(chunk, cb);
    },
    final(cb) {
      t.outgoing.end(cb);
    },
    destroy(err, cb) {
      t.close();
      t.incoming.destroy();
      t.outgoing.destroy();
      cb(err);
    },
  });
  t.incoming.on("data", (c: Buffer) => {
    if (!d.push(c)) t.incoming.pause();
  });
  t.incoming.on("end", () => d.push(null));
  t.incoming.on("error", () => d.destroy());
  t.outgoing.on("error", () => d.destroy());
  // The guest socket is finished (both ways) or the channel went: nothing more can flow.
  t.done.then(
    () => setImmediate(() => d.writableFinished || d.destroyed || d.destroy()),
    () => d.destroy(),
  );
  return d;
}

/** Splices a host socket and a guest tunnel together, with half-close; either failing ends both. */
export function splice(socket: Socket, guest: Duplex): void {
  socket.on("error", () => guest.destroy());
  guest.on("error", () => socket.destroy());
  socket.on("close", () => guest.destroy());
  guest.on("close", () => socket.destroy());
  socket.pipe(guest);
  guest.pipe(socket);
}
