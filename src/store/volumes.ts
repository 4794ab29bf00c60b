// Named volumes as rows: name, size and labels. Their data lives in <data>/volumes/<name>.ext4.
import type { Db } from "./db.js";

export interface VolumeRow {
  name: string;
  size_mb: number;
  created_at: string;
  labels: Record<string, string> | null;
}

type Raw = Omit<VolumeRow, "labels"> & { labels: string | null };
const decode = (r: Raw | undefined): VolumeRow | undefined => r && { ...r, labels: r.labels ? JSON.parse(r.labels) : null };

export class VolumeStore {
  constructor(private readonly db: Db) {}

  /** Adds a volume; false when the name is taken. */
  insert(row: VolumeRow): boolean {
    const r = this.db
      .prepare("INSERT OR IGNORE INTO volumes (name, size_mb, created_at, labels) VALUES (@name, @size_mb, @created_at, @labels)")
      .run({ ...row, labels: row.labels ? JSON.stringify(row.labels) : null });
    return r.changes === 1;
  }

  get(name: string): VolumeRow | undefined {
    return decode(this.db.prepare("SELECT * FROM volumes WHERE name = ?").get(name) as Raw | undefined);
  }

  list(): VolumeRow[] {
    return (this.db.prepare("SELECT * FROM volumes ORDER BY name").all() as Raw[]).map((r) => decode(r)!);
  }

  delete(name: string): void {
    this.db.prepare("DELETE FROM volumes WHERE name = ?").run(name);
  }
}
