// Per-stream flow control on the host side. Incoming streams (guest → host) grant the guest
// credit only as the consumer reads, so a guest writing gigabytes holds at most one window plus
// one high-water mark of host memory per stream. Outgoing streams (host → guest) spend credit
// the guest grants as it consumes.
import { Readable, Writable } from "node:stream";
import { DATA_CHUNK, INITIAL_WINDOW } from "./frame.js";

/** Readable side of one guest → host stream. */
export class IncomingStream extends Readable {
  private owed = 0;
  private outstanding = INITIAL_WINDOW; // credit the guest may still use

  constructor(private readonly grant: (n: number) => void) {
    super({ highWaterMark: INITIAL_WINDOW });
  }

  /** Accepts a chunk from the guest; false means the guest overran its credit. */
  accept(chunk: Buffer): boolean {
    if (chunk.length > this.outstanding) return false;
    this.outstanding -= chunk.length;
    // A consumer that stopped reading (destroyed the stream) must not stall the guest process:
    // discard and keep the credit flowing so the process can run to its end.
    if (this.destroyed) {
      this.release(chunk.length);
      return true;
    }
    if (this.push(chunk)) this.release(chunk.length);
    else this.owed += chunk.length;
    return true;
  }

  /** Marks the end of the stream (idempotent: EOF may come as a flag and again with the reply). */
  finish(): void {
    if (this.finished || this.destroyed) return;
    this.finished = true;
    this.push(null);
  }
  private finished = false;

  override _read(): void {
    if (this.owed) {
      const n = this.owed;
      this.owed = 0;
      this.release(n);
    }
  }

  private release(n: number): void {
    this.outstanding += n;
    this.grant(n);
  }
}

/** Writable side of one host → guest stream; send() must deliver a frame to the socket. */
export class OutgoingStream extends Writable {
  private credit = INITIAL_WINDOW;
  private waiter: (() => void) | null = null;

  constructor(
    private readonly send: (chunk: Buffer | null, eof: boolean) => void,
    private readonly isOpen: () => boolean,
  ) {
    super({ highWaterMark: DATA_CHUNK });
  }

  /** The guest consumed n bytes and grants that much credit back. */
  addCredit(n: number): void {
    this.credit += n;
    const w = this.waiter;
    this.waiter = null;
    w?.();
  }

  /** Wakes a writer waiting for credit so it can observe that the channel closed. */
  abort(): void {
    const w = this.waiter;
    this.waiter = null;
    w?.();
  }

  override async _write(chunk: Buffer, _enc: BufferEncoding, cb: (err?: Error | null) => void): Promise<void> {
    try {
      let off = 0;
      while (off < chunk.length) {
        while (this.credit <= 0) {
          if (!this.isOpen()) throw new Error("channel closed while writing");
          await new Promise<void>((r) => (this.waiter = r));
        }
        if (!this.isOpen()) throw new Error("channel closed while writing");
        const n = Math.min(chunk.length - off, DATA_CHUNK, this.credit);
        this.send(chunk.subarray(off, off + n), false);
        this.credit -= n;
        off += n;
      }
      cb();
    } catch (e) {
      cb(e as Error);
    }
  }

  override _final(cb: (err?: Error | null) => void): void {
    if (!this.isOpen()) {
      cb(new Error("channel closed before end of stream"));
      return;
    }
    this.send(null, true);
    cb();
  }
}
