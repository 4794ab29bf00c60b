// The event log behind GET /events: append, replay after an id, trim old rows.
import type { Db } from "./db.js";

export interface EventRow {
  seq: number;
  type: string;
  sandbox_id: string | null;
  timestamp: string;
  data: Record<string, unknown> | null;
}

/** Which of a sandbox's events to read. */
export interface EventRange {
  sinceIso?: string;
  untilIso?: string;
  limit: number;
  /** Newest first. */
  backward?: boolean;
}

export class EventStore {
  constructor(private readonly db: Db) {}

  append(type: string, sandboxId: string | null, data: Record<string, unknown> | null, timestamp = new Date().toISOString()): EventRow {
    const r = this.db.prepare("INSERT INTO events (type, sandbox_id, timestamp, data) VALUES (?, ?, ?, ?)").run(type, sandboxId, timestamp, data ? JSON.stringify(data) : null);
    return { seq: Number(r.lastInsertRowid), type, sandbox_id: sandboxId, timestamp, data };
  }

  /** Events after `seq`, oldest first, at most `limit`. */
  after(seq: number, limit = 1000): EventRow[] {
    const rows = this.db.prepare("SELECT * FROM events WHERE seq > ? ORDER BY seq LIMIT ?").all(seq, limit) as (Omit<EventRow, "data"> & { data: string | null })[];
    return rows.map((r) => ({ ...r, data: r.data ? JSON.parse(r.data) : null }));
  }

  /** A sandbox's events between `sinceIso` and `untilIso`, oldest first (newest first with `backward`), at most `limit`. */
  ofSandbox(sandboxId: string, o: EventRange): EventRow[] {
    const order = o.backward ? "DESC" : "ASC";
    const rows = this.db
      .prepare(`SELECT * FROM events WHERE sandbox_id = ? AND timestamp >= ? AND timestamp <= ? ORDER BY seq ${order} LIMIT ?`)
      .all(sandboxId, o.sinceIso ?? "", o.untilIso ?? "\uffff", o.limit) as (Omit<EventRow, "data"> & { data: string | null })[];
    return rows.map((r) => ({ ...r, data: r.data ? JSON.parse(r.data) : null }));
  }

  /** The newest event's number (0 when there is none). */
  lastSeq(): number {
    return (this.db.prepare("SELECT MAX(seq) AS s FROM events").get() as { s: number | null }).s ?? 0;
  }

  /** Deletes events older than the cutoff, and all but the newest `keep` (execs make many). */
  trim(beforeIso: string, keep = 100_000): number {
    const old = this.db.prepare("DELETE FROM events WHERE timestamp < ?").run(beforeIso).changes;
    return old + this.db.prepare("DELETE FROM events WHERE seq <= (SELECT MAX(seq) FROM events) - ?").run(keep).changes;
  }
}
