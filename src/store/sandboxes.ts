// Sandbox rows. Destroyed sandboxes stay for history until pruned by age. The records a row keeps
// in the shape they have on the wire (mounts, published ports, health) are the wire schemas' types
// (schemas/rest.ts), so the two cannot drift.
import type { Db } from "./db.js";
import type { Static } from "typebox";
import type { HealthState as HealthStateShape, HostDirMount as HostDirMountShape, PortMapping as PortMappingShape, VolumeMount as VolumeMountShape } from "../schemas/rest.js";

/** `paused`: no VM, its state in a snapshot of kind `pause` until it resumes. */
export type SandboxState = "created" | "creating" | "running" | "paused" | "stopped" | "destroyed" | "error";

export interface SandboxRow {
  id: string;
  /** In a cluster: the node it lives on (not stored; the node adds it). */
  node?: string;
  state: SandboxState;
  provider: string;
  image: string;
  memory_mb: number;
  vcpus: number;
  disk_mb: number;
  owner_id: string | null;
  metadata: Record<string, string> | null;
  created_at: string;
  expires_at: string;
  destroyed_at: string | null;
  error: string | null;
  vm_pid: number | null;
  vm_dir: string | null;
  /** The ForgeVM process that runs this VM. */
  manager_pid: number | null;
  /** Environment every exec gets (from the spawn request or its template). */
  env: Record<string, string> | null;
  template: string | null;
  /** Who execs run as unless they say otherwise (null: root). */
  exec_user: string | null;
  /** The snapshot this sandbox was restored from (its disk is backed by the snapshot's). */
  snapshot_id: string | null;
  /** How its VM started: `boot`, `snapshot` (restored), `pool` (claimed warm) or `fork`. */
  origin: string | null;
  /** Pool mode: the shared VM this logical sandbox lives in. */
  vm_id: string | null;
  /** Network mode, egress allowlist and published ports (null: no network, nothing published). */
  network: NetworkRecord | null;
  /** A name to find it by instead of its id (unique among sandboxes not yet gone). */
  name: string | null;
  /** Its main process (the image's command, or one given at spawn), and how it went. */
  main: MainRecord | null;
  /** Pause or stop it (`idle_action`) after this long with nothing in flight (core/idle.ts). */
  idle_ms: number | null;
  idle_action: "pause" | "stop" | null;
  /** 1: its RAM is a file of its own (forks copy it, pauses hand it over); it is restored so again. */
  forkable: number;
  /** Why it is paused: `request`, `timeout`, `idle`, or `server` (its server stopped with server.on_stop: pause; the next start resumes it); null unless paused. */
  paused_reason: "request" | "timeout" | "idle" | "server" | null;
  /** What a paused one kept: "memory" (resumed as it was) or "disk" (resumed by a cold boot over its disk). */
  paused_keep: "memory" | "disk" | null;
  /** `created`: the spawn options its first start uses (JSON, secrets never included). */
  spec: string | null;
  /** Named volumes it mounts, in the order its VM gets their disks. */
  volumes: VolumeMount[] | null;
  /** Host directories it mounts (live, over FUSE). */
  host_dirs: HostDirMount[] | null;
  /** What it forwards from the host ("ssh-agent", "git"), comma-separated; null: nothing. */
  forward?: string | null;
  /** "systemd": it boots its image's systemd as init, so a cold start of it does again; null: the agent is init. */
  init?: "systemd" | null;
  /** What its expiry does, and whether a call for it wakes it once paused (null: destroyed at expiry). */
  lifecycle: LifecycleRecord | null;
  /** The key its create was sent with: a retry with the same key gets this sandbox, not another. */
  idempotency_key: string | null;
  /** A digest of the create its key came with (a retry with other settings is refused). */
  idempotency_fingerprint?: string | null;
  /** Why it ended (`destroyed` or `error`): `request`, `ttl`, `failed`, `server stop`, … (EndReason). */
  end_reason?: string | null;
  /** Who ended it: the interface a request came through (`rest`, `e2b`, `daytona`, `mcp`, …) or `server`. */
  ended_by?: string | null;
  /** When it was last used, as a server that let go of it left it (its idle timer goes on from there). */
  last_active_at?: string | null;
}

/** A sandbox's lifecycle policy (E2B's `autoPause` and `autoResume`). */
export interface LifecycleRecord {
  /** At its expiry it is paused (memory and disk kept) instead of destroyed. */
  on_expiry: "destroy" | "pause";
  /** A call for it while it is paused resumes it first, then is served. */
  auto_resume: boolean;
  /** How long it lives after such a resume. */
  resume_ttl_ms: number;
  /** false: the pause at its expiry keeps the disk only (E2B's autoPauseMemory: false). */
  pause_memory?: boolean;
}

/** A host directory mounted in a sandbox (`host`: its resolved path), stored in the wire's shape. */
export type HostDirMount = Static<typeof HostDirMountShape>;

/** A named volume mounted in a sandbox, stored in the wire's shape. */
export type VolumeMount = Static<typeof VolumeMountShape>;

export type RestartPolicy = "no" | "on-failure" | "always" | "unless-stopped";

/** A sandbox's main process: what it runs, its restart policy, and how its last run ended. */
export interface MainRecord {
  command: string[];
  /** The image's USER, which it runs as. */
  user?: string;
  restart: RestartPolicy;
  /** on-failure: give up after this many restarts (absent: never). */
  max_restarts?: number;
  restarts: number;
  exit_code: number | null;
  started_at: string | null;
  finished_at: string | null;
  /** A person stopped it: no policy brings it back until it is started again. */
  stopped_by_user: boolean;
  /** The signal a stop sends first (the image's STOPSIGNAL; SIGTERM when absent). */
  stop_signal?: number;
  /** The image's HEALTHCHECK, run while the main process runs (core/sandboxes/health.ts). */
  healthcheck?: HealthSpec;
  /** What the health checks found, last. */
  health?: HealthState;
}

/** A health check as a sandbox runs it: argv in the guest, Docker's timings in ms. */
export interface HealthSpec {
  argv: string[];
  interval_ms: number;
  timeout_ms: number;
  start_period_ms: number;
  retries: number;
}

/** A main process's health, as Docker reports a container's: its status, the failures in a row, the last checks (the wire's shape). */
export type HealthState = Static<typeof HealthStateShape>;

/** A sandbox's network as stored. */
export interface NetworkRecord {
  mode: "none" | "allowlist" | "full";
  allow: string[];
  /** Allowlist mode: package files fetched over HTTP go through the host's package cache. */
  cache?: boolean;
  ports: Static<typeof PortMappingShape>[];
  /** Allowlist mode: headers the egress proxy adds per destination, secrets named by placeholder (net/egress-rules.ts). */
  rules?: Record<string, Record<string, string>>;
  /**
   * Allowlist mode: present, the proxy lets every public destination through but these
   * addresses and networks (E2B's `denyOut` without a deny-all); absent, only the allowlist.
   */
  deny?: string[];
  /** The VM has a network device (it was made with network "full"); its link is down while the mode is another. */
  nic?: boolean;
  /** Its ports served over HTTP by this server (E2B's getHost) need its traffic access token. */
  private_ports?: boolean;
  /** The Host header its servers see on port traffic served by this server, `${PORT}` filled in. */
  mask_host?: string;
}

type Raw = Omit<SandboxRow, "metadata" | "env" | "network" | "main" | "volumes" | "host_dirs" | "lifecycle"> & {
  lifecycle: string | null;
  host_dirs: string | null;
  metadata: string | null;
  env: string | null;
  network: string | null;
  main: string | null;
  volumes: string | null;
};
const decode = (r: Raw | undefined): SandboxRow | undefined =>
  r && {
    ...r,
    metadata: r.metadata ? JSON.parse(r.metadata) : null,
    env: r.env ? JSON.parse(r.env) : null,
    network: r.network ? JSON.parse(r.network) : null,
    main: r.main ? JSON.parse(r.main) : null,
    volumes: r.volumes ? JSON.parse(r.volumes) : null,
    host_dirs: r.host_dirs ? JSON.parse(r.host_dirs) : null,
    lifecycle: r.lifecycle ? JSON.parse(r.lifecycle) : null,
  };

export class SandboxStore {
  /** Ends shown before they are written (showUnwritten), by sandbox id. */
  private readonly unwritten = new Map<string, Partial<SandboxRow>>();

  constructor(private readonly db: Db) {}

  insert(row: SandboxRow): void {
    this.db
      .prepare(
        `INSERT INTO sandboxes (id, state, provider, image, memory_mb, vcpus, disk_mb, owner_id, metadata, created_at, expires_at, destroyed_at, error, vm_pid, vm_dir, manager_pid, env, template, exec_user, snapshot_id, origin, vm_id, network, name, main, idle_ms, idle_action, forkable, paused_reason, paused_keep, spec, volumes, host_dirs, lifecycle, idempotency_key, forward, init)
         VALUES (@id, @state, @provider, @image, @memory_mb, @vcpus, @disk_mb, @owner_id, @metadata, @created_at, @expires_at, @destroyed_at, @error, @vm_pid, @vm_dir, @manager_pid, @env, @template, @exec_user, @snapshot_id, @origin, @vm_id, @network, @name, @main, @idle_ms, @idle_action, @forkable, @paused_reason, @paused_keep, @spec, @volumes, @host_dirs, @lifecycle, @idempotency_key, @forward, @init)`,
      )
      .run({
        ...row,
        metadata: row.metadata ? JSON.stringify(row.metadata) : null,
        env: row.env ? JSON.stringify(row.env) : null,
        network: row.network ? JSON.stringify(row.network) : null,
        main: row.main ? JSON.stringify(row.main) : null,
        volumes: row.volumes?.length ? JSON.stringify(row.volumes) : null,
        host_dirs: row.host_dirs?.length ? JSON.stringify(row.host_dirs) : null,
        lifecycle: row.lifecycle ? JSON.stringify(row.lifecycle) : null,
        forward: row.forward ?? null,
        init: row.init ?? null,
      });
  }

  /** Records the host directories a sandbox mounts. */
  setHostDirs(id: string, mounts: HostDirMount[]): void {
    this.db.prepare("UPDATE sandboxes SET host_dirs = ? WHERE id = ?").run(mounts.length ? JSON.stringify(mounts) : null, id);
  }

  /** The sandbox a create with this idempotency key made. */
  byIdempotencyKey(key: string): SandboxRow | undefined {
    return decode(this.db.prepare("SELECT * FROM sandboxes WHERE idempotency_key = ?").get(key) as Raw | undefined);
  }

  /** The sandbox not yet gone that has this name (a unique index keeps it to one). */
  byName(name: string): SandboxRow | undefined {
    return decode(this.db.prepare("SELECT * FROM sandboxes WHERE name = ? AND state NOT IN ('destroyed','error')").get(name) as Raw | undefined);
  }

  /** Records how a sandbox's main process stands. */
  setMain(id: string, main: MainRecord | null): void {
    this.db.prepare("UPDATE sandboxes SET main = ? WHERE id = ?").run(main ? JSON.stringify(main) : null, id);
  }

  get(id: string): SandboxRow | undefined {
    return this.shown(decode(this.db.prepare("SELECT * FROM sandboxes WHERE id = ?").get(id) as Raw | undefined));
  }

  /** Sandboxes in the given states, newest first. */
  list(states: SandboxState[], owner?: string): SandboxRow[] {
    const q = `SELECT * FROM sandboxes WHERE state IN (${states.map(() => "?").join(",")})${owner ? " AND owner_id = ?" : ""} ORDER BY created_at DESC, rowid DESC`;
    const rows = (this.db.prepare(q).all(...states, ...(owner ? [owner] : [])) as Raw[]).map((r) => this.shown(decode(r))!);
    if (!this.unwritten.size) return rows;
    // An end not written yet moves its row from the live states to the ended ones.
    const listed = new Set(rows.map((r) => r.id));
    const moved = [...this.unwritten.keys()]
      .filter((id) => !listed.has(id))
      .map((id) => this.get(id)!)
      .filter((r) => r && (!owner || r.owner_id === owner));
    return [...rows, ...moved].filter((r) => states.includes(r.state));
  }

  /**
   * Shows `fields` on every read of sandbox `id` until an update of it is written: an end that
   * has happened while the disk had no room to record it (DiskSpace writes it once there is).
   * Without it, a sandbox whose VM died then would read as running, and be answered as one.
   */
  showUnwritten(id: string, fields: Partial<SandboxRow>): void {
    this.unwritten.set(id, { ...this.unwritten.get(id), ...fields });
  }

  private shown(row: SandboxRow | undefined): SandboxRow | undefined {
    const over = row && this.unwritten.get(row.id);
    return over ? { ...row, ...over } : row;
  }

  /** Records a sandbox's network (its allowlist or ports changed). */
  setNetwork(id: string, network: NetworkRecord | null): void {
    this.db.prepare("UPDATE sandboxes SET network = ? WHERE id = ?").run(network ? JSON.stringify(network) : null, id);
  }

  /** Replaces a sandbox's metadata (Daytona's setLabels). */
  setMetadata(id: string, metadata: Record<string, string> | null): void {
    this.db.prepare("UPDATE sandboxes SET metadata = ? WHERE id = ?").run(metadata ? JSON.stringify(metadata) : null, id);
  }

  update(id: string, fields: Partial<Omit<SandboxRow, "id" | "metadata" | "env" | "network" | "main" | "volumes" | "host_dirs">>): void {
    const keys = Object.keys(fields);
    if (!keys.length) return;
    this.db.prepare(`UPDATE sandboxes SET ${keys.map((k) => `${k} = @${k}`).join(", ")} WHERE id = @id`).run({ ...fields, id });
    // The end shown while it waited is written now (another field written meanwhile is not it).
    if ("state" in fields) this.unwritten.delete(id);
  }

  /** Running sandboxes whose expiry has passed (one still booting expires once it runs). */
  expired(nowIso: string): SandboxRow[] {
    return (this.db.prepare("SELECT * FROM sandboxes WHERE state = 'running' AND expires_at <= ?").all(nowIso) as Raw[]).map((r) => decode(r)!);
  }

  /** Deletes history rows (destroyed or error) older than the cutoff; returns their ids. */
  pruneHistory(beforeIso: string): string[] {
    const where = "state IN ('destroyed','error') AND COALESCE(destroyed_at, created_at) < ?";
    return this.db.transaction(() => {
      const ids = (this.db.prepare(`SELECT id FROM sandboxes WHERE ${where}`).all(beforeIso) as { id: string }[]).map((r) => r.id);
      this.db.prepare(`DELETE FROM sandboxes WHERE ${where}`).run(beforeIso);
      return ids;
    })();
  }

  /** How many rows are in each state. */
  countByState(): Record<string, number> {
    const rows = this.db.prepare("SELECT state, COUNT(*) AS n FROM sandboxes GROUP BY state").all() as { state: string; n: number }[];
    return Object.fromEntries(rows.map((r) => [r.state, r.n]));
  }

  count(): { total: number; live: number } {
    const r = this.db.prepare("SELECT COUNT(*) AS total, SUM(state IN ('creating','running')) AS live FROM sandboxes").get() as { total: number; live: number | null };
    return { total: r.total, live: r.live ?? 0 };
  }
}
