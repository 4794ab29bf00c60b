// Past 400 lines because its migrations and every cluster query live beside the one pool they share.
// The cluster's catalogue in PostgreSQL: the nodes (where each is reached, its capacity and load,
// its last heartbeat), which node owns each sandbox, every node's events in one order, the
// cluster's templates and its API keys. Fronts read it to place, route and authorize; nodes write
// their own rows. Every write is one statement or one transaction, so any number of fronts and
// nodes may use it at once; a front keeps nothing else, and may die at any moment.
import pg from "pg";
import type { EventRow } from "./events.js";
import { ignore } from "../util/ignore.js";

// Append only: a released migration is never edited, a new one is added.
export const CATALOGUE_MIGRATIONS: string[] = [
  `CREATE TABLE nodes (
     id TEXT PRIMARY KEY,
     url TEXT NOT NULL,
     state TEXT NOT NULL,
     started_at TIMESTAMPTZ NOT NULL,
     heartbeat_at TIMESTAMPTZ NOT NULL,
     memory_mb INTEGER NOT NULL,
     vcpus INTEGER NOT NULL,
     free_memory_mb INTEGER NOT NULL,
     running INTEGER NOT NULL,
     images TEXT[] NOT NULL DEFAULT '{}',
     warm TEXT[] NOT NULL DEFAULT '{}',
     version TEXT NOT NULL
   );
   CREATE TABLE placements (
     sandbox_id TEXT PRIMARY KEY,
     node_id TEXT NOT NULL REFERENCES nodes(id),
     state TEXT NOT NULL,
     created_at TIMESTAMPTZ NOT NULL DEFAULT now()
   );
   CREATE INDEX placements_node ON placements(node_id);`,
  // Every node's events in one order (seq), each once (node_id, node_seq); templates for every node.
  `CREATE TABLE events (
     seq BIGSERIAL PRIMARY KEY,
     node_id TEXT NOT NULL,
     node_seq BIGINT NOT NULL,
     type TEXT NOT NULL,
     sandbox_id TEXT,
     at TIMESTAMPTZ NOT NULL,
     data JSONB,
     UNIQUE (node_id, node_seq)
   );
   CREATE TABLE templates (
     name TEXT PRIMARY KEY,
     body JSONB,
     deleted BOOLEAN NOT NULL DEFAULT false,
     updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
   );`,
  // The vCPUs a node's sandboxes have, weighed in placement with its free memory.
  "ALTER TABLE nodes ADD COLUMN used_vcpus INTEGER NOT NULL DEFAULT 0;",
  // The cluster's API keys, by their SHA-256 only: the key itself is shown once, when made.
  `CREATE TABLE api_keys (
     id TEXT PRIMARY KEY,
     name TEXT NOT NULL,
     hash TEXT NOT NULL UNIQUE,
     created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
     revoked_at TIMESTAMPTZ
   );`,
  // Room taken by spawns a front has placed and a node may not count yet: until the create is answered.
  `CREATE TABLE reservations (
     id BIGSERIAL PRIMARY KEY,
     node_id TEXT NOT NULL REFERENCES nodes(id),
     memory_mb INTEGER NOT NULL,
     vcpus INTEGER NOT NULL,
     at TIMESTAMPTZ NOT NULL DEFAULT now()
   );`,
  // Which node a create's idempotency key went to: a retry through any front goes there too.
  `CREATE TABLE idempotency_keys (
     key TEXT PRIMARY KEY,
     node_id TEXT NOT NULL REFERENCES nodes(id),
     at TIMESTAMPTZ NOT NULL DEFAULT now()
   );`,
  // A create answered before the node's next heartbeat is in no figure yet: its room stays held
  // until a heartbeat taken after the answer counts the sandbox itself.
  `ALTER TABLE reservations ADD COLUMN answered_at TIMESTAMPTZ;`,
];

/** Connections each process keeps to the database. */
const POOL_MAX = 8;

/** How long a reservation holds its room if its front never releases it (it died mid-create). */
const RESERVATION_TTL_S = 120;

/**
 * The reservations that still hold room: not expired, and not yet counted by their node (not
 * answered, or answered after the node's latest figures were taken; a heartbeat's figures are
 * taken a little before it is written, hence the margin).
 */
const HELD = `SELECT r.node_id, SUM(r.memory_mb) AS memory, SUM(r.vcpus) AS vcpus, COUNT(*) AS n
  FROM reservations r JOIN nodes ON nodes.id = r.node_id
  WHERE r.at > now() - make_interval(secs => ${RESERVATION_TTL_S})
    AND (r.answered_at IS NULL OR nodes.heartbeat_at < r.answered_at + interval '500 milliseconds')
  GROUP BY r.node_id`;

/** An API key as the catalogue lists it (never the key). */
export interface ApiKeyRow {
  id: string;
  name: string;
  created_at: Date;
  revoked_at: Date | null;
}

/** An event in the cluster's order: `seq` is the cluster's, `node` the node it happened on. */
export interface ClusterEvent extends EventRow {
  node: string;
}

/** A template as the catalogue keeps it: the body it was last written with, or deleted. */
export interface CatalogueTemplate {
  name: string;
  body: Record<string, unknown> | null;
  deleted: boolean;
  updated_at: Date;
}

/** Whether an error is a connection the database dropped (a restart, a failover) rather than the statement's. */
function droppedConnection(e: unknown): boolean {
  const err = e as { code?: string; message?: string };
  return err.code === "57P01" || err.code === "ECONNRESET" || /Connection terminated|connection is closed/i.test(err.message ?? "");
}

/** Runs `fn` again for each pooled connection a database restart dropped (each fails once, then is replaced). */
async function pastDroppedConnections<T>(fn: () => Promise<T>): Promise<T> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await fn();
    } catch (e) {
      if (!droppedConnection(e) || attempt >= POOL_MAX) throw e;
    }
  }
}

/** A node as the catalogue knows it. */
export interface NodeRow {
  id: string;
  url: string;
  /** "up", "down" (no heartbeat within the timeout), "draining". */
  state: "up" | "down" | "draining";
  started_at: Date;
  heartbeat_at: Date;
  memory_mb: number;
  vcpus: number;
  /** The vCPUs its sandboxes have (more than `vcpus` when they are overcommitted). */
  used_vcpus: number;
  free_memory_mb: number;
  running: number;
  images: string[];
  warm: string[];
  version: string;
}

/** What a node reports at each heartbeat. */
export type NodeReport = Omit<NodeRow, "state" | "started_at" | "heartbeat_at">;

export class Catalogue {
  private constructor(private readonly pool: pg.Pool) {}

  /** Connects (a pool that reconnects by itself after the database restarts) and migrates. */
  static async open(url: string): Promise<Catalogue> {
    const pool = new pg.Pool({ connectionString: url, max: POOL_MAX, connectionTimeoutMillis: 5000 });
    // An idle client's connection lost with a database restart must not crash the process.
    pool.on("error", () => {});
    const c = new Catalogue(pool);
    await c.migrate();
    return c;
  }

  /** One statement, past the connections a database restart dropped. */
  private async query<R extends pg.QueryResultRow = pg.QueryResultRow>(sql: string, params?: unknown[]): Promise<pg.QueryResult<R>> {
    return pastDroppedConnections(() => this.pool.query<R>(sql, params));
  }

  private async migrate(): Promise<void> {
    const client = await this.pool.connect();
    try {
      await client.query("BEGIN");
      // One migrator at a time across every process that opens the catalogue.
      await client.query("SELECT pg_advisory_xact_lock(74237423)");
      await client.query("CREATE TABLE IF NOT EXISTS forgevm_schema (version INTEGER NOT NULL)");
      const r = await client.query<{ version: number }>("SELECT version FROM forgevm_schema");
      let version = r.rows[0]?.version ?? 0;
      if (!r.rows.length) await client.query("INSERT INTO forgevm_schema (version) VALUES (0)");
      for (; version < CATALOGUE_MIGRATIONS.length; version++) await client.query(CATALOGUE_MIGRATIONS[version]);
      await client.query("UPDATE forgevm_schema SET version = $1", [version]);
      await client.query("COMMIT");
    } catch (e) {
      await client.query("ROLLBACK").catch(ignore("the connection failed: the query's error is the one reported"));
      throw e;
    } finally {
      client.release();
    }
  }

  /** A node's heartbeat: its row made or refreshed, and "up" again if it was down. */
  async heartbeat(r: NodeReport, startedAt: Date): Promise<void> {
    await this.query(
      `INSERT INTO nodes (id, url, state, started_at, heartbeat_at, memory_mb, vcpus, free_memory_mb, running, images, warm, version, used_vcpus)
       VALUES ($1, $2, 'up', $3, now(), $4, $5, $6, $7, $8, $9, $10, $11)
       ON CONFLICT (id) DO UPDATE SET url = $2, state = CASE WHEN nodes.state = 'draining' THEN 'draining' ELSE 'up' END, started_at = $3,
         heartbeat_at = now(), memory_mb = $4, vcpus = $5, free_memory_mb = $6, running = $7, images = $8, warm = $9, version = $10, used_vcpus = $11`,
      [r.id, r.url, startedAt, r.memory_mb, r.vcpus, r.free_memory_mb, r.running, r.images, r.warm, r.version, r.used_vcpus],
    );
  }

  /** Marks down every node without a heartbeat for `timeoutMs`; returns their ids. */
  async markDown(timeoutMs: number): Promise<string[]> {
    const r = await this.query<{ id: string }>("UPDATE nodes SET state = 'down' WHERE state <> 'down' AND heartbeat_at < now() - make_interval(secs => $1) RETURNING id", [
      timeoutMs / 1000,
    ]);
    return r.rows.map((x) => x.id);
  }

  async nodes(): Promise<NodeRow[]> {
    return (await this.query<NodeRow>("SELECT * FROM nodes ORDER BY id")).rows;
  }

  async node(id: string): Promise<NodeRow | undefined> {
    return (await this.query<NodeRow>("SELECT * FROM nodes WHERE id = $1", [id])).rows[0];
  }

  /**
   * Picks the up node with room for `memoryMb`: one that has `image` (or a warm sandbox of it)
   * first, then the one with the largest share of its memory free less the share of its vCPUs
   * given, then the fewest sandboxes; and reserves the room until `release`. What a node reports
   * at its heartbeat less what is reserved on it is what it has, so a spawn on its way to a node
   * is counted even when a heartbeat comes before it (counted twice while the node makes it:
   * briefly too careful, never too full). Null when no node has the memory.
   */
  async reserve(want: { memoryMb: number; vcpus: number; image: string | null }, exclude: string[] = []): Promise<{ node: NodeRow; reservation: number } | null> {
    return pastDroppedConnections(() => this.reserveOnce(want, exclude));
  }

  private async reserveOnce(want: { memoryMb: number; vcpus: number; image: string | null }, exclude: string[]): Promise<{ node: NodeRow; reservation: number } | null> {
    const client = await this.pool.connect();
    try {
      await client.query("BEGIN");
      // One placement at a time in the whole cluster (each takes a millisecond): the next one's
      // statement starts after this one's reservation is committed, so it always counts it.
      await client.query("SELECT pg_advisory_xact_lock(74237425)");
      const r = await client.query<NodeRow>(
        `WITH held AS (${HELD})
         SELECT nodes.* FROM nodes LEFT JOIN held ON held.node_id = nodes.id
         WHERE state = 'up' AND free_memory_mb - COALESCE(held.memory, 0) >= $1 AND NOT (id = ANY($3::text[]))
         ORDER BY (CASE WHEN $2::text = ANY(warm) THEN 0 WHEN $2::text = ANY(images) THEN 1 ELSE 2 END),
           (free_memory_mb - COALESCE(held.memory, 0))::float8 / GREATEST(memory_mb, 1) - (used_vcpus + COALESCE(held.vcpus, 0))::float8 / GREATEST(nodes.vcpus, 1) DESC,
           running + COALESCE(held.n, 0) ASC, id
         LIMIT 1`,
        [want.memoryMb, want.image, exclude],
      );
      const node = r.rows[0];
      if (!node) {
        await client.query("COMMIT");
        return null;
      }
      const res = await client.query<{ id: string }>("INSERT INTO reservations (node_id, memory_mb, vcpus) VALUES ($1, $2, $3) RETURNING id", [node.id, want.memoryMb, want.vcpus]);
      await client.query("COMMIT");
      return { node, reservation: Number(res.rows[0].id) };
    } catch (e) {
      await client.query("ROLLBACK").catch(ignore("the connection failed: the query's error is the one reported"));
      throw e;
    } finally {
      client.release();
    }
  }

  /** Marks a reservation's create answered: its room is given back once the node's next heartbeat counts the sandbox (or at once, when the create failed). */
  async release(reservation: number, failed = false): Promise<void> {
    if (failed) await this.query("DELETE FROM reservations WHERE id = $1", [reservation]);
    else await this.query("UPDATE reservations SET answered_at = now() WHERE id = $1", [reservation]);
    await this.query(
      `DELETE FROM reservations r USING nodes WHERE nodes.id = r.node_id
         AND (r.at < now() - make_interval(secs => $1) OR (r.answered_at IS NOT NULL AND nodes.heartbeat_at >= r.answered_at + interval '500 milliseconds'))`,
      [RESERVATION_TTL_S],
    );
  }

  /** What is reserved on each node now. */
  async reserved(): Promise<Map<string, { memory_mb: number; vcpus: number }>> {
    const r = await this.query<{ node_id: string; memory: string; vcpus: string }>(HELD);
    return new Map(r.rows.map((x) => [x.node_id, { memory_mb: Number(x.memory), vcpus: Number(x.vcpus) }]));
  }

  /** Binds an idempotency key to `nodeId` unless it is bound already; the node it is bound to (a day at most). */
  async bindKey(key: string, nodeId: string): Promise<string> {
    await this.query("DELETE FROM idempotency_keys WHERE at < now() - interval '1 day'");
    const r = await this.query<{ node_id: string }>(
      "INSERT INTO idempotency_keys (key, node_id) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET key = EXCLUDED.key RETURNING node_id",
      [key, nodeId],
    );
    return r.rows[0].node_id;
  }

  /** Lets go of a key bound to a node that never got its create (the next try binds it anew). */
  async unbindKey(key: string, nodeId: string): Promise<void> {
    await this.query("DELETE FROM idempotency_keys WHERE key = $1 AND node_id = $2", [key, nodeId]);
  }

  /** The node an idempotency key is bound to, if any. */
  async keyNode(key: string): Promise<string | undefined> {
    const r = await this.query<{ node_id: string }>("SELECT node_id FROM idempotency_keys WHERE key = $1 AND at > now() - interval '1 day'", [key]);
    return r.rows[0]?.node_id;
  }

  /** Records that `sandboxId` lives on `nodeId`. */
  async place(sandboxId: string, nodeId: string, state = "running"): Promise<void> {
    await this.query("INSERT INTO placements (sandbox_id, node_id, state) VALUES ($1, $2, $3) ON CONFLICT (sandbox_id) DO UPDATE SET node_id = $2, state = $3", [
      sandboxId,
      nodeId,
      state,
    ]);
  }

  /** The node a sandbox lives on, with the node's row. */
  async locate(sandboxId: string): Promise<{ sandbox_id: string; state: string; node: NodeRow } | undefined> {
    const r = await this.query<NodeRow & { sandbox_id: string; placement_state: string }>(
      "SELECT n.*, p.sandbox_id, p.state AS placement_state FROM placements p JOIN nodes n ON n.id = p.node_id WHERE p.sandbox_id = $1",
      [sandboxId],
    );
    const row = r.rows[0];
    if (!row) return undefined;
    const { sandbox_id, placement_state, ...node } = row;
    return { sandbox_id, state: placement_state, node: node as NodeRow };
  }

  /** Every placement, with its node's id and state. */
  async placements(): Promise<{ sandbox_id: string; node_id: string; state: string; node_state: string }[]> {
    return (
      await this.query<{ sandbox_id: string; node_id: string; state: string; node_state: string }>(
        "SELECT p.sandbox_id, p.node_id, p.state, n.state AS node_state FROM placements p JOIN nodes n ON n.id = p.node_id ORDER BY p.created_at",
      )
    ).rows;
  }

  /** Forgets a placement (its sandbox is destroyed). */
  async unplace(sandboxId: string): Promise<void> {
    await this.query("DELETE FROM placements WHERE sandbox_id = $1", [sandboxId]);
  }

  /** A returning node's truth: placements on it that it no longer has go, those it has are kept. */
  async reconcile(nodeId: string, running: string[]): Promise<number> {
    const r = await this.query("DELETE FROM placements WHERE node_id = $1 AND NOT (sandbox_id = ANY($2::text[]))", [nodeId, running]);
    return r.rowCount ?? 0;
  }

  /** Appends a node's events (each kept once, however often it is sent). */
  async appendEvents(nodeId: string, events: EventRow[]): Promise<void> {
    if (!events.length) return;
    await this.query(
      `INSERT INTO events (node_id, node_seq, type, sandbox_id, at, data)
       SELECT $1, * FROM unnest($2::bigint[], $3::text[], $4::text[], $5::timestamptz[], $6::jsonb[])
       ON CONFLICT (node_id, node_seq) DO NOTHING`,
      [
        nodeId,
        events.map((e) => e.seq),
        events.map((e) => e.type),
        events.map((e) => e.sandbox_id),
        events.map((e) => e.timestamp),
        events.map((e) => (e.data ? JSON.stringify(e.data) : null)),
      ],
    );
  }

  /** Forgets a node's events numbered after `nodeSeq` (its event log started again, from a new data directory). */
  async forgetNodeEventsAfter(nodeId: string, nodeSeq: number): Promise<void> {
    await this.query("DELETE FROM events WHERE node_id = $1 AND node_seq > $2", [nodeId, nodeSeq]);
  }

  /** The newest of a node's events the catalogue holds (0 for none): where its shipping resumes. */
  async lastNodeEvent(nodeId: string): Promise<number> {
    const r = await this.query<{ s: string | null }>("SELECT MAX(node_seq) AS s FROM events WHERE node_id = $1", [nodeId]);
    return Number(r.rows[0].s ?? 0);
  }

  /** Events after the cluster's `seq`, oldest first, at most `limit`. */
  async eventsAfter(seq: number, limit = 1000): Promise<ClusterEvent[]> {
    const r = await this.query<{ seq: string; node_id: string; type: string; sandbox_id: string | null; at: Date; data: Record<string, unknown> | null }>(
      "SELECT seq, node_id, type, sandbox_id, at, data FROM events WHERE seq > $1 ORDER BY seq LIMIT $2",
      [seq, limit],
    );
    return r.rows.map((e) => ({ seq: Number(e.seq), node: e.node_id, type: e.type, sandbox_id: e.sandbox_id, timestamp: e.at.toISOString(), data: e.data }));
  }

  /** The cluster's newest event number (0 when there is none). */
  async lastEventSeq(): Promise<number> {
    const r = await this.query<{ s: string | null }>("SELECT MAX(seq) AS s FROM events");
    return Number(r.rows[0].s ?? 0);
  }

  /** Deletes events older than `maxAgeMs`, and all but the newest `keep`. */
  async trimEvents(maxAgeMs: number, keep = 100_000): Promise<void> {
    await this.query("DELETE FROM events WHERE at < now() - make_interval(secs => $1) OR seq <= (SELECT MAX(seq) FROM events) - $2", [maxAgeMs / 1000, keep]);
  }

  /** Records a template's body (written) or its deletion, for every node to mirror. */
  async putTemplate(name: string, body: Record<string, unknown> | null): Promise<void> {
    await this.query(
      `INSERT INTO templates (name, body, deleted, updated_at) VALUES ($1, $2, $3, clock_timestamp())
       ON CONFLICT (name) DO UPDATE SET body = $2, deleted = $3, updated_at = clock_timestamp()`,
      [name, body ? JSON.stringify(body) : null, body === null],
    );
  }

  /** Templates written or deleted after `since` (all when null), oldest change first. */
  async templatesSince(since: Date | null): Promise<CatalogueTemplate[]> {
    return (
      await this.query<CatalogueTemplate>("SELECT * FROM templates WHERE $1::timestamptz IS NULL OR date_trunc('milliseconds', updated_at) > $1 ORDER BY updated_at", [since])
    ).rows;
  }

  /** One template's entry, deleted or not. */
  async template(name: string): Promise<CatalogueTemplate | undefined> {
    return (await this.query<CatalogueTemplate>("SELECT * FROM templates WHERE name = $1", [name])).rows[0];
  }

  /** Records a new key by its hash. */
  async addKey(id: string, name: string, hash: string): Promise<ApiKeyRow> {
    return (await this.query<ApiKeyRow>("INSERT INTO api_keys (id, name, hash) VALUES ($1, $2, $3) RETURNING id, name, created_at, revoked_at", [id, name, hash])).rows[0];
  }

  async keys(): Promise<ApiKeyRow[]> {
    return (await this.query<ApiKeyRow>("SELECT id, name, created_at, revoked_at FROM api_keys ORDER BY created_at")).rows;
  }

  /** Revokes a key; false when there is no such key. */
  async revokeKey(id: string): Promise<boolean> {
    return ((await this.query("UPDATE api_keys SET revoked_at = COALESCE(revoked_at, now()) WHERE id = $1", [id])).rowCount ?? 0) > 0;
  }

  /** The hashes of the keys not revoked. */
  async liveKeyHashes(): Promise<string[]> {
    return (await this.query<{ hash: string }>("SELECT hash FROM api_keys WHERE revoked_at IS NULL")).rows.map((r) => r.hash);
  }

  async close(): Promise<void> {
    await this.pool.end();
  }
}
