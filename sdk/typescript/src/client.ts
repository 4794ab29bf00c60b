// The client: spawns and finds sandboxes, manages templates and snapshots, reports on the server.
import { SPAWN_TIMEOUT_MS, Transport } from "./http.js";
import { Sandbox } from "./sandbox.js";
import type { ClientOptions, HealthInfo, ProviderInfo, SandboxInfo, SnapshotInfo, SpawnOptions, Template, VMPoolStatus } from "./types.js";

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
  create(t: Template): Promise<Template> {
    return this.http.json("POST", "/templates", { body: t });
  }
  update(name: string, t: Omit<Template, "name">): Promise<Template> {
    return this.http.json("PUT", `/templates/${encodeURIComponent(name)}`, { body: t });
  }
  async delete(name: string): Promise<void> {
    await this.http.send("DELETE", `/templates/${encodeURIComponent(name)}`);
  }
  async spawn(name: string, opts: { ttl?: string; owner_id?: string } = {}): Promise<Sandbox> {
    return new Sandbox(this.http, await this.http.json<SandboxInfo>("POST", `/templates/${encodeURIComponent(name)}/spawn`, { body: opts, timeoutMs: SPAWN_TIMEOUT_MS }));
  }
}

export class Client {
  private readonly http: Transport;
  readonly templates: Templates;

  /** `new Client("http://localhost:7423")` or `new Client({ baseUrl, apiKey, userId, timeout })`. */
  constructor(opts: string | ClientOptions = {}) {
    this.http = new Transport(opts);
    this.templates = new Templates(this.http);
  }

  get baseUrl(): string {
    return this.http.baseUrl;
  }

  /** Starts a sandbox and resolves once it runs. */
  async spawn(opts: SpawnOptions = {}): Promise<Sandbox> {
    const info = await this.http.json<SandboxInfo>("POST", "/sandboxes", { body: opts, timeoutMs: Math.max(this.http.timeoutMs, SPAWN_TIMEOUT_MS) });
    return new Sandbox(this.http, info);
  }

  /** A running sandbox by id. */
  async get(id: string): Promise<Sandbox> {
    return new Sandbox(this.http, await this.http.json<SandboxInfo>("GET", `/sandboxes/${encodeURIComponent(id)}`, { sandboxId: id }));
  }

  /** Live sandboxes (of this client's user, when it has one). */
  list(): Promise<SandboxInfo[]> {
    return this.http.json("GET", "/sandboxes");
  }

  /** Destroys every expired sandbox; resolves with how many. */
  async prune(): Promise<number> {
    return (await this.http.json<{ pruned: number }>("DELETE", "/sandboxes")).pruned;
  }

  health(): Promise<HealthInfo> {
    return this.http.json("GET", "/health");
  }

  poolStatus(): Promise<VMPoolStatus> {
    return this.http.json("GET", "/pool/status");
  }

  providers(): Promise<ProviderInfo[]> {
    return this.http.json("GET", "/providers");
  }

  snapshots(): Promise<SnapshotInfo[]> {
    return this.http.json("GET", "/snapshots");
  }

  /** Starts sandboxes from a snapshot (by id or name), each as the sandbox was when it was taken. */
  async restore(snapshot: string, opts: { count?: number; ttl?: string } = {}): Promise<Sandbox[]> {
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
