// The client: spawns and finds sandboxes, manages templates and snapshots, reports on the server.
import { Cluster } from "./cluster.js";
import { Environments } from "./environments.js";
import { streamEvents } from "./events.js";
import { SPAWN_TIMEOUT_MS, Transport } from "./http.js";
import { Images } from "./images.js";
import { Secrets } from "./secrets.js";
import { Volumes } from "./volumes.js";
import { ndjson } from "./ndjson.js";
import { Sandbox } from "./sandbox.js";
import type {
  HostDirMount,
  CommitOptions,
  CommitResult,
  AuditEntry,
  ClientOptions,
  EventInfo,
  GuestProcess,
  LogLine,
  SandboxState,
  HealthInfo,
  ProviderDetails,
  ProviderInfo,
  SandboxInfo,
  SnapshotInfo,
  SpawnOptions,
  Template,
  TemplateInput,
  TemplateUpdate,
  VMPoolStatus,
  LiveStats,
  MetricHistory,
  SshAccess,
  BalloonInfo,
} from "./types.js";

/** Templates stored on the server: named spawn settings with setup commands and warm pools. */
export class Templates {
  /** @internal */
  constructor(private readonly http: Transport) {}

  list(): Promise<Template[]> {
    return this.http.json("GET", "/templates");
  }
  get(name: string): Promise<Template> {
    return this.http.json("GET", `/templates/${encodeURIComponent(name)}`);
  }
  create(t: TemplateInput): Promise<Template> {
    return this.http.json("POST", "/templates", { body: t });
  }
  update(name: string, t: Omit<TemplateUpdate, "name">): Promise<Template> {
    return this.http.json("PUT", `/templates/${encodeURIComponent(name)}`, { body: t });
  }
  async delete(name: string): Promise<void> {
    await this.http.send("DELETE", `/templates/${encodeURIComponent(name)}`);
  }
  async spawn(name: string, opts: { ttl?: string; owner_id?: string; secrets?: Record<string, string> } = {}): Promise<Sandbox> {
    return new Sandbox(this.http, await this.http.json<SandboxInfo>("POST", `/templates/${encodeURIComponent(name)}/spawn`, { body: opts, timeoutMs: SPAWN_TIMEOUT_MS }));
  }
}

export class Client {
  private readonly http: Transport;
  readonly templates: Templates;
  readonly images: Images;
  readonly volumes: Volumes;
  /** Secrets kept on the server for egress rules: add, list, update, remove (values are never returned). */
  readonly secrets: Secrets;
  /** Through a cluster's front: its nodes and API keys. */
  readonly cluster: Cluster;
  /** Environments: specs, builds of them into images, registry connections. */
  readonly environments: Environments;

  /** `new Client("http://localhost:7423")` or `new Client({ baseUrl, apiKey, userId, timeout })`. */
  constructor(opts: string | ClientOptions = {}) {
    this.http = new Transport(opts);
    this.templates = new Templates(this.http);
    this.images = new Images(this.http);
    this.volumes = new Volumes(this.http);
    this.secrets = new Secrets(this.http);
    this.cluster = new Cluster(this.http);
    this.environments = new Environments(this.http);
  }

  get baseUrl(): string {
    return this.http.baseUrl;
  }

  /** Starts a sandbox and resolves once it runs. */
  async spawn(opts: SpawnOptions = {}): Promise<Sandbox> {
    const info = await this.http.json<SandboxInfo>("POST", "/sandboxes", { body: opts, timeoutMs: Math.max(this.http.timeoutMs, SPAWN_TIMEOUT_MS) });
    return new Sandbox(this.http, info);
  }

  /** Defines a sandbox without starting it (state "created", as `docker create`); `start(id)` boots it. */
  async create(opts: Omit<SpawnOptions, "start" | "secrets"> = {}): Promise<SandboxInfo> {
    return this.http.json<SandboxInfo>("POST", "/sandboxes", { body: { ...opts, start: false }, timeoutMs: Math.max(this.http.timeoutMs, SPAWN_TIMEOUT_MS) });
  }

  /** A running sandbox by id. */
  async get(id: string): Promise<Sandbox> {
    return new Sandbox(this.http, await this.http.json<SandboxInfo>("GET", `/sandboxes/${encodeURIComponent(id)}`, { sandboxId: id }));
  }

  /** Live sandboxes (of this client's user, when it has one); with `all`, stopped, failed and destroyed ones too; `state` picks states. */
  list(opts: { all?: boolean; state?: SandboxState[] } = {}): Promise<SandboxInfo[]> {
    return this.http.json("GET", "/sandboxes", { query: { all: opts.all ? "true" : undefined, state: opts.state?.length ? opts.state.join(",") : undefined } });
  }

  /** Stops a running sandbox (its main process gets SIGTERM, then SIGKILL after `timeout`); its disk is kept. */
  stop(id: string, opts: { timeout?: string } = {}): Promise<SandboxInfo> {
    return this.http.json("POST", `/sandboxes/${encodeURIComponent(id)}/stop`, { body: opts, sandboxId: id, timeoutMs: null });
  }

  /** Starts a stopped sandbox again, files as they were, its main process anew. */
  start(id: string, opts: { ttl?: string } = {}): Promise<SandboxInfo> {
    return this.http.json("POST", `/sandboxes/${encodeURIComponent(id)}/start`, { body: opts, sandboxId: id, timeoutMs: null });
  }

  /** Pauses a running sandbox: memory, processes and streams kept, no VM held; any later call for it resumes it. `memory: false` keeps the disk only (its resume boots cold). */
  pause(id: string, opts: { memory?: boolean } = {}): Promise<SandboxInfo> {
    return this.http.json("POST", `/sandboxes/${encodeURIComponent(id)}/pause`, { body: opts, sandboxId: id, timeoutMs: null });
  }

  /** Resumes a paused sandbox as it was (`ttl`: its life from now; default what it had left). */
  resume(id: string, opts: { ttl?: string } = {}): Promise<SandboxInfo> {
    return this.http.json("POST", `/sandboxes/${encodeURIComponent(id)}/resume`, { body: opts, sandboxId: id, timeoutMs: null });
  }

  /** Stops (when running) and starts a sandbox. */
  restart(id: string, opts: { timeout?: string } = {}): Promise<SandboxInfo> {
    return this.http.json("POST", `/sandboxes/${encodeURIComponent(id)}/restart`, { body: opts, sandboxId: id, timeoutMs: null });
  }

  /** Sends a signal ("SIGTERM", "HUP", 9; default SIGKILL) to a sandbox's main process. */
  async kill(id: string, signal: string | number = "SIGKILL"): Promise<number> {
    return (await this.http.json<{ signal: number }>("POST", `/sandboxes/${encodeURIComponent(id)}/kill`, { body: { signal }, sandboxId: id })).signal;
  }

  /** The main process's output lines: the last `tail`, or since `since` (RFC 3339 or "10m"). */
  async mainLogs(id: string, opts: { tail?: number; since?: string } = {}): Promise<LogLine[]> {
    const query = { tail: opts.tail !== undefined ? String(opts.tail) : undefined, since: opts.since };
    return (await this.http.json<{ lines: LogLine[] }>("GET", `/sandboxes/${encodeURIComponent(id)}/main/logs`, { query, sandboxId: id })).lines;
  }

  /** The main process's output as it is written (after the past lines asked for), until the sandbox stops running. */
  async *followMainLogs(id: string, opts: { tail?: number; since?: string; signal?: AbortSignal } = {}): AsyncGenerator<LogLine> {
    const query = { tail: opts.tail !== undefined ? String(opts.tail) : undefined, since: opts.since, follow: "true" };
    const res = await this.http.send("GET", `/sandboxes/${encodeURIComponent(id)}/main/logs`, { query, sandboxId: id, timeoutMs: null, signal: opts.signal });
    yield* ndjson<LogLine>(res);
  }

  /** The processes running in a sandbox (`top`). */
  processes(id: string): Promise<GuestProcess[]> {
    return this.http.json("GET", `/sandboxes/${encodeURIComponent(id)}/top`, { sandboxId: id });
  }

  /** Any sandbox this server has a record of, failed ones included (with their reason). */
  /** Makes a new image `image` (NAME[:TAG]) from a running sandbox's disk: one layer on top of its image. */
  commit(id: string, image: string, opts: CommitOptions = {}): Promise<CommitResult> {
    return this.http.json("POST", `/sandboxes/${encodeURIComponent(id)}/commit`, { body: { image, ...opts }, sandboxId: id, timeoutMs: null });
  }

  /** Mounts a host directory (inside the server's mounts.host_dirs) into a running sandbox, live; returns its host directories. */
  mount(id: string, host: string, path: string, opts: { readOnly?: boolean } = {}): Promise<HostDirMount[]> {
    return this.http.json("POST", `/sandboxes/${encodeURIComponent(id)}/mounts`, { body: { host, path, read_only: opts.readOnly }, sandboxId: id });
  }

  /** Unmounts a host directory from a running sandbox. */
  unmount(id: string, path: string): Promise<HostDirMount[]> {
    return this.http.json("DELETE", `/sandboxes/${encodeURIComponent(id)}/mounts`, { query: { path }, sandboxId: id });
  }

  /**
   * Readies a sandbox's sshd for these public keys (OpenSSH lines) and `user` (default: the
   * sandbox's user): the host keys to pin, the account, and the guest port a tunnel reaches
   * (`GET /sandboxes/{id}/tcp/{port}`, a WebSocket of raw bytes). A paused sandbox is resumed.
   */
  ssh(id: string, opts: { publicKeys: string[]; user?: string }): Promise<SshAccess> {
    return this.http.json("POST", `/sandboxes/${encodeURIComponent(id)}/ssh`, {
      body: { public_keys: opts.publicKeys, user: opts.user },
      sandboxId: id,
      timeoutMs: Math.max(this.http.timeoutMs, 120_000),
    });
  }

  /**
   * A running sandbox's balloon; with `memoryMb`, first leaves it that much of the memory it was
   * given (the rest goes back to the host), without a restart.
   */
  balloon(id: string, memoryMb?: number): Promise<BalloonInfo> {
    if (memoryMb === undefined) return this.http.json("GET", `/sandboxes/${encodeURIComponent(id)}/balloon`, { sandboxId: id });
    return this.http.json("PUT", `/sandboxes/${encodeURIComponent(id)}/balloon`, {
      body: { memory_mb: memoryMb },
      sandboxId: id,
      timeoutMs: Math.max(this.http.timeoutMs, 60_000),
    });
  }

  info(id: string): Promise<SandboxInfo> {
    return this.http.json("GET", `/sandboxes/${encodeURIComponent(id)}`, { sandboxId: id });
  }

  /** Destroys a sandbox by id; destroying one that is already gone is harmless. */
  async destroy(id: string): Promise<void> {
    await this.http.send("DELETE", `/sandboxes/${encodeURIComponent(id)}`, { sandboxId: id });
  }

  /** Destroys every expired sandbox; resolves with how many. */
  async prune(): Promise<number> {
    return (await this.http.json<{ pruned: number }>("DELETE", "/sandboxes")).pruned;
  }

  health(): Promise<HealthInfo> {
    return this.http.json("GET", "/health");
  }

  /** The newest sample of the host and of every running sandbox (what `forgevm stats` shows). */
  stats(): Promise<LiveStats> {
    return this.http.json("GET", "/stats");
  }

  /** A sandbox's metric history: `since` a duration ("10m", "24h") or a time, in buckets of `step` ("5s", "1m"). */
  metrics(id: string, opts: { since?: string; step?: string } = {}): Promise<MetricHistory> {
    return this.http.json("GET", `/sandboxes/${encodeURIComponent(id)}/metrics`, { query: { ...opts }, sandboxId: id });
  }

  /** The host's metric history (CPU, memory, the data directory's disk, load), as metrics(). */
  hostMetrics(opts: { since?: string; step?: string } = {}): Promise<MetricHistory> {
    return this.http.json("GET", "/host/metrics", { query: { ...opts } });
  }

  poolStatus(): Promise<VMPoolStatus> {
    return this.http.json("GET", "/pool/status");
  }

  providers(): Promise<ProviderInfo[]> {
    return this.http.json("GET", "/providers");
  }

  /** One provider's health: accelerator, confinement, what is missing. */
  provider(name: string): Promise<ProviderDetails> {
    return this.http.json("GET", `/providers/${encodeURIComponent(name)}`);
  }

  /** The server's events as they happen (`for await (const e of client.events())`); `after` resumes from an event id, `tail` replays the newest that many first. */
  events(opts: { after?: string; tail?: number; signal?: AbortSignal } = {}): AsyncGenerator<EventInfo> {
    return streamEvents(this.http, opts);
  }

  /** Tool calls agents made through MCP, oldest first (the newest `limit`, default 100). */
  async mcpAudit(opts: { session?: string; tool?: string; after?: number; limit?: number } = {}): Promise<AuditEntry[]> {
    const query: Record<string, string> = {};
    for (const [k, v] of Object.entries(opts)) if (v !== undefined) query[k] = String(v);
    return (await this.http.json<{ entries: AuditEntry[] }>("GET", "/mcp/audit", { query })).entries;
  }

  /** A named snapshot as an archive stream, to import on another host (same VMM build, its image there). */
  async exportSnapshot(idOrName: string): Promise<ReadableStream<Uint8Array>> {
    const res = await this.http.send("GET", `/snapshots/${encodeURIComponent(idOrName)}/export`, { timeoutMs: null });
    if (!res.body) throw new TypeError("the server sent no archive body");
    return res.body;
  }

  /** Makes a snapshot here from an exported archive; `name` replaces the one it carries. */
  importSnapshot(archive: Uint8Array | ReadableStream<Uint8Array> | AsyncIterable<Uint8Array>, opts: { name?: string } = {}): Promise<SnapshotInfo> {
    return this.http.json("POST", "/snapshots/import", { raw: archive, contentType: "application/x-tar", query: { name: opts.name }, timeoutMs: null });
  }

  snapshots(): Promise<SnapshotInfo[]> {
    return this.http.json("GET", "/snapshots");
  }

  /** One snapshot, by id or name. */
  snapshot(idOrName: string): Promise<SnapshotInfo> {
    return this.http.json("GET", `/snapshots/${encodeURIComponent(idOrName)}`);
  }

  /** Running copies of a sandbox as it is now, and how long its parent was paused for it. */
  fork(id: string, opts: { count?: number; ttl?: string; forkable?: boolean } = {}): Promise<{ sandboxes: SandboxInfo[]; pause_ms: number; duration_ms: number }> {
    return this.http.json("POST", `/sandboxes/${encodeURIComponent(id)}/fork`, { body: opts, sandboxId: id, timeoutMs: null });
  }

  /** The last `lines` lines of a sandbox's console (kept after it is gone). */
  logs(id: string, lines = 100): Promise<string[]> {
    return this.http.json("GET", `/sandboxes/${encodeURIComponent(id)}/logs`, { query: { lines: String(lines) }, sandboxId: id });
  }

  /** Starts sandboxes from a snapshot (by id or name), each as the sandbox was when it was taken. */
  async restore(snapshot: string, opts: { count?: number; ttl?: string; forkable?: boolean } = {}): Promise<Sandbox[]> {
    const r = await this.http.json<{ sandboxes: SandboxInfo[] }>("POST", `/snapshots/${encodeURIComponent(snapshot)}/spawn`, { body: opts, timeoutMs: null });
    return r.sandboxes.map((s) => new Sandbox(this.http, s));
  }

  async deleteSnapshot(snapshot: string): Promise<void> {
    await this.http.send("DELETE", `/snapshots/${encodeURIComponent(snapshot)}`);
  }

  /** Spawns a sandbox, runs `fn` with it, and destroys it whatever happens. */
  async withSandbox<T>(opts: SpawnOptions, fn: (sandbox: Sandbox) => Promise<T>): Promise<T> {
    const sb = await this.spawn(opts);
    try {
      return await fn(sb);
    } finally {
      await sb.destroy().catch(() => {});
    }
  }
}
