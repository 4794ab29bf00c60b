// Secrets as rows. The value is only ever here sealed (core/environments/secret-box.ts), bound to
// the row's id; nothing that reads a row for a view sees more than `SecretInfo`.
import type { Db } from "./db.js";

/** A secret as every view shows it: never its value. */
export interface SecretInfo {
  id: string;
  name: string;
  description: string | null;
  metadata: Record<string, string>;
  version: number;
  created_at: string;
  updated_at: string;
}

export interface SecretRow extends SecretInfo {
  sealed: string;
}

type Raw = Omit<SecretRow, "metadata"> & { metadata: string | null };
const decode = (r: Raw | undefined): SecretRow | undefined => r && { ...r, metadata: r.metadata ? JSON.parse(r.metadata) : {} };

export class SecretStore {
  constructor(private readonly db: Db) {}

  /** Adds a secret; false when the name is taken. */
  insert(row: SecretRow): boolean {
    const r = this.db
      .prepare(
        `INSERT OR IGNORE INTO secrets (id, name, description, metadata, version, sealed, created_at, updated_at)
         VALUES (@id, @name, @description, @metadata, @version, @sealed, @created_at, @updated_at)`,
      )
      .run({ ...row, metadata: JSON.stringify(row.metadata) });
    return r.changes === 1;
  }

  /** By id or by name. */
  get(idOrName: string): SecretRow | undefined {
    return decode(this.db.prepare("SELECT * FROM secrets WHERE id = ? OR name = ?").get(idOrName, idOrName) as Raw | undefined);
  }

  /** Oldest first, `limit` after the row `after` (an id), for paging. */
  list(limit = 1000, after?: string): SecretRow[] {
    const rows = after
      ? this.db.prepare("SELECT * FROM secrets WHERE (created_at, id) > (SELECT created_at, id FROM secrets WHERE id = ?) ORDER BY created_at, id LIMIT ?").all(after, limit)
      : this.db.prepare("SELECT * FROM secrets ORDER BY created_at, id LIMIT ?").all(limit);
    return (rows as Raw[]).map((r) => decode(r)!);
  }

  /** Replaces the value (a new version) and, when given, the description and metadata. */
  update(id: string, change: { sealed: string; description?: string | null; metadata?: Record<string, string>; updated_at: string }): void {
    const row = this.get(id);
    if (!row) return;
    this.db
      .prepare("UPDATE secrets SET sealed = ?, version = version + 1, description = ?, metadata = ?, updated_at = ? WHERE id = ?")
      .run(change.sealed, change.description === undefined ? row.description : change.description, JSON.stringify(change.metadata ?? row.metadata), change.updated_at, id);
  }

  delete(id: string): boolean {
    return this.db.prepare("DELETE FROM secrets WHERE id = ?").run(id).changes === 1;
  }
}

/** The row without its sealed value. */
export function secretInfo(r: SecretRow): SecretInfo {
  const { sealed: _, ...info } = r;
  return info;
}
