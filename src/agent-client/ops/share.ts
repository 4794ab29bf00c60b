// share: a host directory mounted in the guest over FUSE. The guest's FUSE requests arrive on
// the stream's channel 1 and the host's replies go on channel 0, as raw FUSE messages.
import type { Readable } from "node:stream";
import { Channel } from "../frame.js";
import type { ShareRequest } from "../messages.js";
import type { Mux } from "../mux.js";
import type { OutgoingStream } from "../streams.js";
import { IncomingStream } from "../streams.js";
import { ignore } from "../../util/ignore.js";

/** A FUSE mount in the guest whose requests the host answers. */
export interface Share {
  readonly id: number;
  /** The guest kernel's FUSE requests, as bytes. */
  readonly requests: Readable;
  /** Replies for the guest kernel, as bytes. */
  readonly replies: OutgoingStream;
  /** Resolves once the mount is in place; rejects if it cannot be made. */
  readonly mounted: Promise<void>;
  /** Settles when the mount is gone (closed here, unmounted in the guest, or the channel went). */
  readonly done: Promise<unknown>;
  /** Unmounts it (lazily: processes inside it see it gone). */
  close(): void;
}

/** Mounts a FUSE filesystem at `path` in the guest whose requests come here. */
export function share(mux: Mux, req: Omit<ShareRequest, "op">): Share {
  const requests = new IncomingStream((n) => mux.grant(id, Channel.Stdout, n));
  const replies = mux.outgoing(() => id);
  let onMounted!: () => void;
  const mountedP = new Promise<void>((r) => (onMounted = r));
  const { id, result } = mux.start(
    { ...req, op: "share" },
    {
      incoming: new Map([[Channel.Stdout, requests]]),
      outgoing: replies,
      onEvent: (ev: { event?: string }) => ev?.event === "mounted" && onMounted(),
    },
  );
  result.catch(ignore("its failure reaches the caller through the stream"));
  const mounted = Promise.race([mountedP, result]);
  mounted.catch(ignore("its failure reaches the caller through the stream"));
  return { id, requests, replies, mounted: mounted.then(() => undefined), done: result, close: () => mux.closeStream(id) };
}
