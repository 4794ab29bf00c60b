// An agent channel carried by another system's process I/O: a provider that delegates sandboxes
// elsewhere uploads the agent into the sandbox it got, starts it there as `forgevm-agent --stdio`,
// and relays its stdin and stdout. Core then drives that sandbox as any other: the same frames,
// the same operations, one path for every interface.
import { Duplex } from "node:stream";

/** A far service refused or could not be reached; `status` is its HTTP status (0: unreachable). */
export class RemoteError extends Error {
  override name = "RemoteError";
  constructor(
    message: string,
    readonly status: number,
  ) {
    super(message);
  }
}

/** Where the relayed agent is put in the far sandbox. */
export const RELAYED_AGENT_PATH = "/tmp/.forgevm-agent";

/** How the bytes get there: `write` sends stdin, `end` closes it (the agent then exits), `abort` drops the connection. */
export interface Relay {
  write(bytes: Buffer): void;
  end(): void;
  abort(): void;
}

/**
 * A Duplex over a relay: what the host writes goes to the agent's stdin, what the agent writes
 * to its stdout is pushed here (`deliver`), and the stream closes when the relay ends (`finish`).
 */
export class RelayedStream extends Duplex {
  private relay: Relay | null = null;
  private readonly early: Buffer[] = [];

  /** Connects the stream to its relay once that is open; what was written before goes first. */
  attach(relay: Relay): void {
    this.relay = relay;
    for (const b of this.early.splice(0)) relay.write(b);
  }

  /** Bytes the agent wrote. */
  deliver(bytes: Buffer): void {
    this.push(bytes);
  }

  /** The agent's output ended (the process, the connection or the sandbox is gone). */
  finish(): void {
    this.push(null);
    this.destroy();
  }

  override _write(chunk: Buffer, _enc: BufferEncoding, cb: (e?: Error | null) => void): void {
    if (this.relay) this.relay.write(chunk);
    else this.early.push(chunk);
    cb();
  }

  override _final(cb: (e?: Error | null) => void): void {
    this.relay?.end();
    cb();
  }

  // The host's channel closed: the far agent's stdin closes too, and it exits.
  override _destroy(err: Error | null, cb: (e?: Error | null) => void): void {
    if (!this.writableFinished) this.relay?.end();
    cb(err);
  }

  /** Drops the connection to the far agent at once (its sandbox is being destroyed anyway). */
  abort(): void {
    this.relay?.abort();
  }

  override _read(): void {}
}
