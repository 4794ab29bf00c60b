// The SQLite store: one connection, its pragmas and the append-only migrations.
import Database from "better-sqlite3";
import { mkdirSync } from "node:fs";
import { dirname } from "node:path";

export type Db = Database.Database;

// Append only: a released migration is never edited, a new one is added. test/unit/migrations.test.ts
// opens a database made at every earlier version with the current code.
export const MIGRATIONS: string[] = [
  `CREATE TABLE sandboxes (
     id TEXT PRIMARY KEY,
     state TEXT NOT NULL,
     provider TEXT NOT NULL,
     image TEXT NOT NULL,
     memory_mb INTEGER NOT NULL,
     vcpus INTEGER NOT NULL,
     disk_mb INTEGER NOT NULL,
     owner_id TEXT,
     metadata TEXT,
     created_at TEXT NOT NULL,
     expires_at TEXT NOT NULL,
     destroyed_at TEXT,
     error TEXT,
     vm_pid INTEGER,
     vm_dir TEXT,
     manager_pid INTEGER
   );
   CREATE INDEX sandboxes_state ON sandboxes(state);
   CREATE TABLE events (
     seq INTEGER PRIMARY KEY AUTOINCREMENT,
     type TEXT NOT NULL,
     sandbox_id TEXT,
     timestamp TEXT NOT NULL,
     data TEXT
   );`,
  `ALTER TABLE sandboxes ADD COLUMN env TEXT;
   ALTER TABLE sandboxes ADD COLUMN template TEXT;
   CREATE TABLE templates (
     name TEXT PRIMARY KEY,
     body TEXT NOT NULL,
     created_at TEXT NOT NULL,
     updated_at TEXT NOT NULL
   );`,
  `ALTER TABLE sandboxes ADD COLUMN exec_user TEXT;`,
  `CREATE TABLE snapshots (
     id TEXT PRIMARY KEY,
     name TEXT UNIQUE,
     kind TEXT NOT NULL,
     base_key TEXT,
     state TEXT NOT NULL,
     source_id TEXT,
     parent_id TEXT,
     image TEXT NOT NULL,
     template TEXT,
     memory_mb INTEGER NOT NULL,
     vcpus INTEGER NOT NULL,
     disk_mb INTEGER NOT NULL,
     disk_bytes INTEGER,
     format TEXT NOT NULL,
     dir TEXT NOT NULL,
     size_bytes INTEGER NOT NULL DEFAULT 0,
     env TEXT,
     exec_user TEXT,
     created_at TEXT NOT NULL,
     last_used_at TEXT,
     error TEXT
   );
   CREATE INDEX snapshots_base_key ON snapshots(base_key);
   ALTER TABLE sandboxes ADD COLUMN snapshot_id TEXT;
   ALTER TABLE sandboxes ADD COLUMN origin TEXT;
   ALTER TABLE sandboxes ADD COLUMN vm_id TEXT;`,
  `ALTER TABLE sandboxes ADD COLUMN network TEXT;`,
  `ALTER TABLE snapshots ADD COLUMN nic INTEGER NOT NULL DEFAULT 0;`,
  `CREATE TABLE audit (
     seq INTEGER PRIMARY KEY AUTOINCREMENT,
     time TEXT NOT NULL,
     interface TEXT NOT NULL,
     session TEXT NOT NULL,
     tool TEXT NOT NULL,
     arguments TEXT,
     outcome TEXT NOT NULL,
     error TEXT,
     sandbox_id TEXT,
     duration_ms INTEGER NOT NULL
   );
   CREATE INDEX audit_session ON audit(session);`,
  `ALTER TABLE sandboxes ADD COLUMN name TEXT;
   ALTER TABLE sandboxes ADD COLUMN main TEXT;
   CREATE UNIQUE INDEX sandboxes_name ON sandboxes(name) WHERE name IS NOT NULL AND state NOT IN ('destroyed','error');`,
  `ALTER TABLE sandboxes ADD COLUMN idle_stop_ms INTEGER;`,
  `ALTER TABLE sandboxes ADD COLUMN spec TEXT;`,
  `ALTER TABLE sandboxes ADD COLUMN volumes TEXT;
   CREATE TABLE volumes (
     name TEXT PRIMARY KEY,
     size_mb INTEGER NOT NULL,
     created_at TEXT NOT NULL,
     labels TEXT
   );`,
  `ALTER TABLE sandboxes ADD COLUMN host_dirs TEXT;`,
  `CREATE TABLE metric_samples (
     series TEXT NOT NULL,
     res INTEGER NOT NULL,
     ts INTEGER NOT NULL,
     cpu_pct REAL,
     rss_bytes INTEGER,
     pss_bytes INTEGER,
     disk_read_bps REAL,
     disk_write_bps REAL,
     guest_cpu_pct REAL,
     mem_used_bytes INTEGER,
     mem_total_bytes INTEGER,
     disk_used_bytes INTEGER,
     disk_total_bytes INTEGER,
     load1 REAL,
     processes INTEGER,
     net_rx_bps REAL,
     net_tx_bps REAL,
     PRIMARY KEY (series, res, ts)
   ) WITHOUT ROWID;`,
  `CREATE TABLE env_specs (
     id TEXT PRIMARY KEY,
     owner_id TEXT NOT NULL,
     name TEXT NOT NULL,
     base_image TEXT NOT NULL,
     python_packages TEXT NOT NULL,
     apt_packages TEXT NOT NULL,
     python_version TEXT,
     created_at TEXT NOT NULL,
     updated_at TEXT NOT NULL,
     UNIQUE (owner_id, name)
   );
   CREATE TABLE env_builds (
     id TEXT PRIMARY KEY,
     spec_id TEXT NOT NULL REFERENCES env_specs(id),
     owner_id TEXT NOT NULL,
     status TEXT NOT NULL,
     current_step TEXT,
     log TEXT NOT NULL DEFAULT '',
     steps TEXT,
     image_size_bytes INTEGER NOT NULL DEFAULT 0,
     digest_local TEXT,
     error TEXT,
     visibility TEXT,
     created_at TEXT NOT NULL,
     finished_at TEXT,
     updated_at TEXT NOT NULL
   );
   CREATE INDEX env_builds_owner ON env_builds(owner_id, created_at);
   CREATE TABLE env_artifacts (
     build_id TEXT NOT NULL REFERENCES env_builds(id) ON DELETE CASCADE,
     position INTEGER NOT NULL,
     target TEXT NOT NULL,
     connection_id TEXT,
     image_ref TEXT NOT NULL,
     digest TEXT,
     status TEXT NOT NULL,
     error TEXT,
     created_at TEXT NOT NULL,
     updated_at TEXT NOT NULL,
     PRIMARY KEY (build_id, target)
   );
   CREATE TABLE registry_connections (
     id TEXT PRIMARY KEY,
     owner_id TEXT NOT NULL,
     provider TEXT NOT NULL,
     registry TEXT NOT NULL,
     username TEXT NOT NULL,
     secret TEXT NOT NULL,
     is_default INTEGER NOT NULL,
     created_at TEXT NOT NULL,
     updated_at TEXT NOT NULL,
     UNIQUE (owner_id, provider, registry, username)
   );`,
  `ALTER TABLE sandboxes ADD COLUMN lifecycle TEXT;
   ALTER TABLE sandboxes ADD COLUMN idempotency_key TEXT;
   CREATE UNIQUE INDEX sandboxes_idempotency ON sandboxes(idempotency_key) WHERE idempotency_key IS NOT NULL;`,
  // Idle sandboxes may pause rather than stop; a paused one says why.
  `ALTER TABLE sandboxes RENAME COLUMN idle_stop_ms TO idle_ms;
   ALTER TABLE sandboxes ADD COLUMN idle_action TEXT;
   UPDATE sandboxes SET idle_action = 'stop' WHERE idle_ms IS NOT NULL;
   ALTER TABLE sandboxes ADD COLUMN paused_reason TEXT;
   ALTER TABLE sandboxes ADD COLUMN paused_keep TEXT;`,
  // Forkable sandboxes keep their RAM in a file of their own.
  `ALTER TABLE sandboxes ADD COLUMN forkable INTEGER NOT NULL DEFAULT 0;`,
  // Secrets the egress proxy adds to requests; their values sealed under the server's key.
  `CREATE TABLE secrets (
     id TEXT PRIMARY KEY,
     name TEXT NOT NULL UNIQUE,
     description TEXT,
     metadata TEXT,
     version INTEGER NOT NULL,
     sealed TEXT NOT NULL,
     created_at TEXT NOT NULL,
     updated_at TEXT NOT NULL
   );`,
  // A sandbox's own events are read back as its log (E2B's sandbox logs).
  `CREATE INDEX events_sandbox ON events(sandbox_id, seq);`,
  // Why a sandbox ended and who ended it; when it was last used (its idle timer across a server restart).
  `ALTER TABLE sandboxes ADD COLUMN end_reason TEXT;
   ALTER TABLE sandboxes ADD COLUMN ended_by TEXT;
   ALTER TABLE sandboxes ADD COLUMN last_active_at TEXT;`,
  // What the create sent with its idempotency key: a retry must send the same.
  `ALTER TABLE sandboxes ADD COLUMN idempotency_fingerprint TEXT;`,
  // What it forwards from the host (guest/forwards.ts).
  `ALTER TABLE sandboxes ADD COLUMN forward TEXT;`,
  // What it boots as init ("systemd": a system image; docs/system-images.md).
  `ALTER TABLE sandboxes ADD COLUMN init TEXT;`,
];

/** Opens (creating and migrating) the database at `path`, or in memory for ":memory:". */
export function openDb(path: string): Db {
  if (path !== ":memory:") mkdirSync(dirname(path), { recursive: true });
  const db = new Database(path);
  db.pragma("journal_mode = WAL");
  db.pragma("busy_timeout = 5000");
  db.pragma("foreign_keys = ON");
  db.pragma("synchronous = NORMAL");
  const version = db.pragma("user_version", { simple: true }) as number;
  // A newer ForgeVM migrated it (and this one was installed back): its tables are not this one's to write.
  if (version > MIGRATIONS.length) {
    db.close();
    throw new Error(
      `${path} is from a newer ForgeVM (schema ${version}; this one knows ${MIGRATIONS.length}): run that version or a later one (forgevm upgrade), or point this one at another data directory`,
    );
  }
  for (let v = version; v < MIGRATIONS.length; v++) {
    db.transaction(() => {
      db.exec(MIGRATIONS[v]);
      db.pragma(`user_version = ${v + 1}`);
    })();
  }
  return cachingStatements(db);
}

/** The most statements kept compiled; beyond it the cache starts again (the SQL the stores build varies little). */
const STATEMENT_CACHE = 256;

/**
 * Makes `prepare` hand back the statement compiled for the same SQL before. The stores prepare
 * their statements where they run them, and the reaper, the state polls of the SDKs and every
 * request run the same few dozen each second: compiling them afresh was a tenth of a test
 * server's CPU. Safe because no store iterates a statement (a statement is busy only inside
 * `iterate`) or changes its mode (`pluck`, `raw`, `expand`), and SQLite recompiles a cached
 * statement itself when the schema changes.
 */
function cachingStatements(db: Db): Db {
  const compile = db.prepare.bind(db);
  const cache = new Map<string, Database.Statement>();
  db.prepare = ((sql: string) => {
    let st = cache.get(sql);
    if (!st) {
      if (cache.size >= STATEMENT_CACHE) cache.clear();
      st = compile(sql);
      cache.set(sql, st);
    }
    return st;
  }) as Db["prepare"];
  return db;
}
