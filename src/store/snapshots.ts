// Snapshot rows. A snapshot's files live in its directory; the row says what it is, what it
// was taken from, and whether it may still be used.
import type { Db } from "./db.js";

/**
 * `sandbox`: taken on request, kept until deleted. `fork`: taken to fork a sandbox, removed with
 * its last child. `base`: an image's (or template's) first boot, restored by later spawns.
 * `pause`: a paused sandbox's whole state, removed when that sandbox ends.
 */
export type SnapshotKind = "sandbox" | "fork" | "base" | "pause";
/** `deleted` snapshots stay on disk while sandboxes restored from them still run. */
export type SnapshotState = "creating" | "ready" | "deleted";
/** `mapped`: RAM in a file every restore maps copy-on-write. `stream`: RAM inside the stream. */
export type SnapshotFormat = "mapped" | "stream";

export interface SnapshotRow {
  id: string;
  name: string | null;
  kind: SnapshotKind;
  base_key: string | null;
  state: SnapshotState;
  /** The sandbox it was taken from. */
  source_id: string | null;
  /** The snapshot that sandbox was restored from: this one's disk is backed by that one's. */
  parent_id: string | null;
  image: string;
  template: string | null;
  memory_mb: number;
  vcpus: number;
  disk_mb: number;
  disk_bytes: number | null;
  format: SnapshotFormat;
  dir: string;
  size_bytes: number;
  env: Record<string, string> | null;
  exec_user: string | null;
  /** 1 when the VM had a network device (network "full"): its restores need one too. */
  nic: number;
  created_at: string;
  /** When a spawn last restored it (base snapshots are evicted least recently used first). */
  last_used_at: string | null;
  error: string | null;
}

type Raw = Omit<SnapshotRow, "env"> & { env: string | null };
const decode = (r: Raw | undefined): SnapshotRow | undefined => r && { ...r, env: r.env ? JSON.parse(r.env) : null };

export class SnapshotStore {
  constructor(private readonly db: Db) {}

  insert(row: SnapshotRow): void {
    const cols = Object.keys(row);
    this.db.prepare(`INSERT INTO snapshots (${cols.join(", ")}) VALUES (${cols.map((c) => `@${c}`).join(", ")})`).run({ ...row, env: row.env ? JSON.stringify(row.env) : null });
  }

  get(id: string): SnapshotRow | undefined {
    return decode(this.db.prepare("SELECT * FROM snapshots WHERE id = ?").get(id) as Raw | undefined);
  }

  /** A snapshot by id or by name. */
  find(idOrName: string): SnapshotRow | undefined {
    return decode(this.db.prepare("SELECT * FROM snapshots WHERE (id = ? OR name = ?) AND state != 'deleted'").get(idOrName, idOrName) as Raw | undefined);
  }

  /** The ready base snapshot for a key, if one exists. */
  base(key: string): SnapshotRow | undefined {
    return decode(this.db.prepare("SELECT * FROM snapshots WHERE base_key = ? AND state = 'ready' ORDER BY created_at DESC LIMIT 1").get(key) as Raw | undefined);
  }

  /** Snapshots in the given states, newest first. */
  list(states: SnapshotState[] = ["ready"]): SnapshotRow[] {
    const q = `SELECT * FROM snapshots WHERE state IN (${states.map(() => "?").join(",")}) ORDER BY created_at DESC, rowid DESC`;
    return (this.db.prepare(q).all(...states) as Raw[]).map((r) => decode(r)!);
  }

  update(id: string, fields: Partial<Omit<SnapshotRow, "id" | "env">>): void {
    const keys = Object.keys(fields);
    if (!keys.length) return;
    this.db.prepare(`UPDATE snapshots SET ${keys.map((k) => `${k} = @${k}`).join(", ")} WHERE id = @id`).run({ ...fields, id });
  }

  remove(id: string): void {
    this.db.prepare("DELETE FROM snapshots WHERE id = ?").run(id);
  }
}
