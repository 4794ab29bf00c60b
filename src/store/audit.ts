// The audit log: one row per call an agent made through an agent interface (MCP), with its
// arguments as the interface redacted them. Append, read back, trim with the history.
import type { Db } from "./db.js";

export interface AuditEntry {
  seq: number;
  time: string;
  /** The interface the call came through ("mcp"). */
  interface: string;
  session: string;
  tool: string;
  /** The call's arguments, secrets and contents already redacted. */
  arguments: Record<string, unknown> | null;
  outcome: "ok" | "error" | "refused" | "cancelled";
  error: string | null;
  sandbox_id: string | null;
  duration_ms: number;
}

export interface AuditQuery {
  session?: string;
  tool?: string;
  /** Only entries after this sequence number. */
  after?: number;
  /** The newest `limit` entries (default 100), returned oldest first. */
  limit?: number;
}

type Stored = Omit<AuditEntry, "arguments"> & { arguments: string | null };

export class AuditStore {
  constructor(private readonly db: Db) {}

  append(e: Omit<AuditEntry, "seq" | "time">): AuditEntry {
    const time = new Date().toISOString();
    const args = e.arguments ? JSON.stringify(e.arguments) : null;
    const r = this.db
      .prepare("INSERT INTO audit (time, interface, session, tool, arguments, outcome, error, sandbox_id, duration_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)")
      .run(time, e.interface, e.session, e.tool, args, e.outcome, e.error, e.sandbox_id, e.duration_ms);
    return { ...e, seq: Number(r.lastInsertRowid), time };
  }

  list(q: AuditQuery = {}): AuditEntry[] {
    const where: string[] = ["seq > ?"];
    const params: (string | number)[] = [q.after ?? 0];
    if (q.session) {
      where.push("session = ?");
      params.push(q.session);
    }
    if (q.tool) {
      where.push("tool = ?");
      params.push(q.tool);
    }
    const rows = this.db.prepare(`SELECT * FROM audit WHERE ${where.join(" AND ")} ORDER BY seq DESC LIMIT ?`).all(...params, q.limit ?? 100) as Stored[];
    return rows.reverse().map((r) => ({ ...r, arguments: r.arguments ? JSON.parse(r.arguments) : null }));
  }

  /** Deletes entries older than the cutoff. */
  trim(beforeIso: string): number {
    return this.db.prepare("DELETE FROM audit WHERE time < ?").run(beforeIso).changes;
  }
}
