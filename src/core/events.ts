// Lifecycle events: written to the store (for replay) and pushed to live subscribers (SSE).
import type { EventRow, EventStore } from "../store/events.js";

export type EventType =
  | "sandbox.created"
  | "sandbox.running"
  | "sandbox.error"
  | "sandbox.destroyed"
  | "sandbox.expired"
  | "sandbox.reattached"
  | "sandbox.paused"
  | "sandbox.resumed"
  | "sandbox.stopped"
  | "sandbox.idle"
  | "sandbox.started"
  | "sandbox.cold_start"
  | "sandbox.restore_retry"
  | "sandbox.main_exited"
  | "sandbox.main_restarted"
  | "image.pulling"
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

export class EventBus {
  private readonly listeners = new Set<(e: EventRow) => void>();

  constructor(private readonly store: EventStore) {}

  emit: Emit = (type, sandboxId, data) => {
    const row = this.store.append(type, sandboxId, data ?? null);
    for (const l of this.listeners) l(row);
  };

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
}
