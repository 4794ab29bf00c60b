// Lifecycle events: written to the store (for replay) and pushed to live subscribers (SSE).
import type { EventRange, EventRow, EventStore } from "../store/events.js";
import { isHostDiskFull } from "./error-map.js";

export type EventType =
  | "sandbox.created"
  | "sandbox.running"
  | "sandbox.error"
  | "sandbox.destroyed"
  | "sandbox.expired"
  | "sandbox.reattached"
  | "sandbox.released"
  | "sandbox.paused"
  | "sandbox.resumed"
  | "sandbox.stopped"
  | "sandbox.idle"
  | "sandbox.pause_failed"
  | "sandbox.reclaimed"
  | "sandbox.started"
  | "sandbox.cold_start"
  | "sandbox.restore_retry"
  | "sandbox.main_exited"
  | "sandbox.main_restarted"
  | "sandbox.health"
  | "image.pulling"
  | "image.building"
  | "image.progress"
  | "image.pulled"
  | "image.imported"
  | "image.committed"
  | "image.built"
  | "snapshot.imported"
  | "image.pushed"
  | "image.exported"
  | "image.removed"
  | "exec.started"
  | "exec.finished"
  | "file.written"
  | "sandbox.forked"
  | "snapshot.building"
  | "snapshot.created"
  | "snapshot.deleted"
  | "snapshot.error"
  | "pool.filled"
  | "pool.claimed"
  | "pool.error";

export type Emit = (type: EventType, sandboxId: string | null, data?: Record<string, unknown>) => void;

/** Events a full disk keeps out of the store, at most (the oldest are dropped past it). */
const MAX_UNSAVED = 10_000;

export class EventBus {
  private readonly listeners = new Set<(e: EventRow) => void>();
  // Events the store could not take (a full disk: SQLITE_FULL), in order, until flush().
  private readonly unsaved: Omit<EventRow, "seq">[] = [];
  private lastStored = 0;

  constructor(private readonly store: EventStore) {}

  /**
   * Stores an event and tells every subscriber. On a full disk the operation that emits goes on:
   * subscribers hear it at once (numbered as the last stored one) and it is stored by flush().
   */
  emit: Emit = (type, sandboxId, data) => {
    const e = { type, sandbox_id: sandboxId, timestamp: new Date().toISOString(), data: data ?? null };
    // While some wait, the next waits behind them: the store keeps the order they happened in.
    const row = (!this.unsaved.length && this.tryStore(e)) || this.hold(e);
    for (const l of this.listeners) l(row);
  };

  private tryStore(e: Omit<EventRow, "seq">): EventRow | null {
    try {
      const row = this.store.append(e.type, e.sandbox_id, e.data, e.timestamp);
      this.lastStored = row.seq;
      return row;
    } catch (err) {
      if (!isHostDiskFull(err)) throw err;
      return null;
    }
  }

  private hold(e: Omit<EventRow, "seq">): EventRow {
    if (this.unsaved.length >= MAX_UNSAVED) this.unsaved.shift();
    this.unsaved.push(e);
    return { seq: this.lastStored, ...e };
  }

  /** Stores the events a full disk kept back (once there is room again); stops at the first that still finds none. */
  flush(): void {
    while (this.unsaved.length) {
      const e = this.unsaved[0];
      this.lastStored = this.store.append(e.type, e.sandbox_id, e.data, e.timestamp).seq;
      this.unsaved.shift();
    }
  }

  /** Calls `fn` for every event from now on; returns the unsubscribe function. */
  subscribe(fn: (e: EventRow) => void): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  /** The newest event's number (0 when there is none). */
  lastSeq(): number {
    return this.store.lastSeq();
  }

  replay(afterSeq: number, limit?: number): EventRow[] {
    return this.store.after(afterSeq, limit);
  }

  /** A sandbox's stored events (its log). */
  ofSandbox(sandboxId: string, o: EventRange): EventRow[] {
    return this.store.ofSandbox(sandboxId, o);
  }
}
