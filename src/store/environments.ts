// The Environments API's rows: specs, builds with their artifacts, and registry connections
// (whose `secret` column holds only a sealed secret or a reference, never the plain text).
import type { Db } from "./db.js";

export interface EnvSpecRow {
  id: string;
  owner_id: string;
  name: string;
  base_image: string;
  python_packages: string[];
  apt_packages: string[];
  python_version: string | null;
  created_at: string;
  updated_at: string;
}

export type EnvBuildStatus = "queued" | "building" | "ready" | "failed" | "canceled";

export interface EnvBuildRow {
  id: string;
  spec_id: string;
  owner_id: string;
  status: EnvBuildStatus;
  current_step: string | null;
  log: string;
  /** The builder's steps (instruction and status), as JSON. */
  steps: unknown[] | null;
  image_size_bytes: number;
  digest_local: string | null;
  error: string | null;
  visibility: string | null;
  created_at: string;
  finished_at: string | null;
  updated_at: string;
}

export type ArtifactStatus = "pending" | "pushing" | "ready" | "failed" | "canceled";

export interface EnvArtifactRow {
  build_id: string;
  position: number;
  target: string;
  connection_id: string | null;
  image_ref: string;
  digest: string | null;
  status: ArtifactStatus;
  error: string | null;
  created_at: string;
  updated_at: string;
}

export interface RegistryConnectionRow {
  id: string;
  owner_id: string;
  provider: string;
  registry: string;
  username: string;
  /** "sealed:…" (encrypted with the server's key) or "secret:NAME" (an operator's secret). */
  secret: string;
  is_default: boolean;
  created_at: string;
  updated_at: string;
}

type RawSpec = Omit<EnvSpecRow, "python_packages" | "apt_packages"> & { python_packages: string; apt_packages: string };
type RawBuild = Omit<EnvBuildRow, "steps"> & { steps: string | null };
type RawConnection = Omit<RegistryConnectionRow, "is_default"> & { is_default: number };

const spec = (r: RawSpec | undefined): EnvSpecRow | undefined => r && { ...r, python_packages: JSON.parse(r.python_packages), apt_packages: JSON.parse(r.apt_packages) };
const build = (r: RawBuild | undefined): EnvBuildRow | undefined => r && { ...r, steps: r.steps ? JSON.parse(r.steps) : null };
const connection = (r: RawConnection | undefined): RegistryConnectionRow | undefined => r && { ...r, is_default: r.is_default === 1 };

export class EnvironmentStore {
  constructor(private readonly db: Db) {}

  /** Adds a spec; false when the owner has one of that name. */
  insertSpec(row: EnvSpecRow): boolean {
    const r = this.db
      .prepare(
        `INSERT OR IGNORE INTO env_specs (id, owner_id, name, base_image, python_packages, apt_packages, python_version, created_at, updated_at)
         VALUES (@id, @owner_id, @name, @base_image, @python_packages, @apt_packages, @python_version, @created_at, @updated_at)`,
      )
      .run({ ...row, python_packages: JSON.stringify(row.python_packages), apt_packages: JSON.stringify(row.apt_packages) });
    return r.changes === 1;
  }

  spec(id: string): EnvSpecRow | undefined {
    return spec(this.db.prepare("SELECT * FROM env_specs WHERE id = ?").get(id) as RawSpec | undefined);
  }

  /** An owner's specs, newest first. */
  specs(ownerId: string): EnvSpecRow[] {
    return (this.db.prepare("SELECT * FROM env_specs WHERE owner_id = ? ORDER BY created_at DESC, rowid DESC").all(ownerId) as RawSpec[]).map((r) => spec(r)!);
  }

  insertBuild(row: EnvBuildRow, artifacts: EnvArtifactRow[]): void {
    this.db.transaction(() => {
      this.db
        .prepare(
          `INSERT INTO env_builds (id, spec_id, owner_id, status, current_step, log, steps, image_size_bytes, digest_local, error, visibility, created_at, finished_at, updated_at)
           VALUES (@id, @spec_id, @owner_id, @status, @current_step, @log, @steps, @image_size_bytes, @digest_local, @error, @visibility, @created_at, @finished_at, @updated_at)`,
        )
        .run({ ...row, steps: row.steps ? JSON.stringify(row.steps) : null });
      const add = this.db.prepare(
        `INSERT INTO env_artifacts (build_id, position, target, connection_id, image_ref, digest, status, error, created_at, updated_at)
         VALUES (@build_id, @position, @target, @connection_id, @image_ref, @digest, @status, @error, @created_at, @updated_at)`,
      );
      for (const a of artifacts) add.run(a);
    })();
  }

  /** Changes a build's columns (and `updated_at`). */
  updateBuild(id: string, patch: Partial<Omit<EnvBuildRow, "id" | "spec_id" | "owner_id" | "created_at">>): void {
    const cols = Object.keys(patch).filter((k) => /^[a-z_]+$/.test(k));
    if (!cols.length) return;
    const values: Record<string, unknown> = { id, updated_at: new Date().toISOString() };
    for (const c of cols) values[c] = c === "steps" ? JSON.stringify((patch as Record<string, unknown>)[c] ?? null) : (patch as Record<string, unknown>)[c];
    const set = [...new Set([...cols, "updated_at"])].map((c) => `${c} = @${c}`).join(", ");
    this.db.prepare(`UPDATE env_builds SET ${set} WHERE id = @id`).run(values);
  }

  build(id: string): EnvBuildRow | undefined {
    return build(this.db.prepare("SELECT * FROM env_builds WHERE id = ?").get(id) as RawBuild | undefined);
  }

  /** Builds newest first, of one owner or of all. */
  builds(ownerId: string | undefined, limit: number): EnvBuildRow[] {
    const rows = ownerId
      ? this.db.prepare("SELECT * FROM env_builds WHERE owner_id = ? ORDER BY created_at DESC, rowid DESC LIMIT ?").all(ownerId, limit)
      : this.db.prepare("SELECT * FROM env_builds ORDER BY created_at DESC, rowid DESC LIMIT ?").all(limit);
    return (rows as RawBuild[]).map((r) => build(r)!);
  }

  /** Builds in one of `statuses` (recovery after a restart). */
  buildsIn(statuses: EnvBuildStatus[]): EnvBuildRow[] {
    return (this.db.prepare(`SELECT * FROM env_builds WHERE status IN (${statuses.map(() => "?").join(",")})`).all(...statuses) as RawBuild[]).map((r) => build(r)!);
  }

  artifacts(buildId: string): EnvArtifactRow[] {
    return this.db.prepare("SELECT * FROM env_artifacts WHERE build_id = ? ORDER BY position").all(buildId) as EnvArtifactRow[];
  }

  updateArtifact(buildId: string, target: string, patch: Partial<Pick<EnvArtifactRow, "status" | "digest" | "error" | "image_ref">>): void {
    const cols = Object.keys(patch).filter((k) => ["status", "digest", "error", "image_ref"].includes(k));
    const set = [...cols, "updated_at"].map((c) => `${c} = @${c}`).join(", ");
    this.db
      .prepare(`UPDATE env_artifacts SET ${set} WHERE build_id = @build_id AND target = @target`)
      .run({ ...patch, build_id: buildId, target, updated_at: new Date().toISOString() });
  }

  /** Inserts or replaces a connection by id; false when another connection has its (owner, provider, registry, username). */
  putConnection(row: RegistryConnectionRow): boolean {
    return this.db.transaction(() => {
      const clash = this.db
        .prepare("SELECT id FROM registry_connections WHERE owner_id = ? AND provider = ? AND registry = ? AND username = ? AND id != ?")
        .get(row.owner_id, row.provider, row.registry, row.username, row.id);
      if (clash) return false;
      if (row.is_default) this.db.prepare("UPDATE registry_connections SET is_default = 0 WHERE owner_id = ? AND provider = ? AND id != ?").run(row.owner_id, row.provider, row.id);
      this.db
        .prepare(
          `INSERT INTO registry_connections (id, owner_id, provider, registry, username, secret, is_default, created_at, updated_at)
           VALUES (@id, @owner_id, @provider, @registry, @username, @secret, @is_default, @created_at, @updated_at)
           ON CONFLICT (id) DO UPDATE SET owner_id = excluded.owner_id, provider = excluded.provider, registry = excluded.registry,
             username = excluded.username, secret = excluded.secret, is_default = excluded.is_default, updated_at = excluded.updated_at`,
        )
        .run({ ...row, is_default: row.is_default ? 1 : 0 });
      return true;
    })();
  }

  connection(id: string): RegistryConnectionRow | undefined {
    return connection(this.db.prepare("SELECT * FROM registry_connections WHERE id = ?").get(id) as RawConnection | undefined);
  }

  connections(ownerId: string): RegistryConnectionRow[] {
    return (this.db.prepare("SELECT * FROM registry_connections WHERE owner_id = ? ORDER BY created_at, rowid").all(ownerId) as RawConnection[]).map((r) => connection(r)!);
  }

  /** Removes a connection; false when there was none. */
  deleteConnection(id: string): boolean {
    return this.db.prepare("DELETE FROM registry_connections WHERE id = ?").run(id).changes === 1;
  }
}
