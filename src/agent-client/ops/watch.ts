// watch: changes under a guest directory, streamed as they happen until the host closes it.
import type { DirChange, WatchEvent, WatchRequest } from "../messages.js";
import type { Mux } from "../mux.js";
import { ignore } from "../../util/ignore.js";

const OPS = new Set(["create", "write", "remove", "rename", "chmod"]);

/** A watch on a guest directory. */
export interface DirWatch {
  readonly id: number;
  /** Resolves once the watch is in place (changes from then on are seen); rejects if it cannot be. */
  readonly ready: Promise<void>;
  /** Settles when the watch ended (closed, or the channel went away). */
  readonly done: Promise<unknown>;
  close(): void;
}

/** Watches a guest directory; onChange gets each change (name relative to the directory). */
export function watch(mux: Mux, req: Omit<WatchRequest, "op">, onChange: (c: DirChange) => void): DirWatch {
  let onReady!: () => void;
  const ready = new Promise<void>((r) => (onReady = r));
  const { id, result } = mux.start(
    { ...req, op: "watch" },
    {
      onEvent: (ev: WatchEvent) => {
        if (ev?.event === "watching") onReady();
        // The guest is not trusted: only well-formed changes are passed on.
        else if (ev?.event === "fs" && typeof ev.name === "string" && OPS.has(ev.op)) onChange({ name: ev.name, op: ev.op });
      },
    },
  );
  result.catch(ignore("its failure reaches the caller through the stream"));
  const settled = Promise.race([ready, result]);
  settled.catch(ignore("its failure reaches the caller through the stream"));
  return { id, ready: settled.then(() => undefined), done: result, close: () => mux.closeStream(id) };
}
