// Environments: describe a base image plus packages, build it into an image (and push it), spawn from it.
import type { Transport } from "./http.js";
import { ndjson } from "./ndjson.js";
import type { EnvironmentBuild, EnvironmentSpawnConfig, EnvironmentSpec, EnvironmentSpecRequest, RegistryConnection, RegistryConnectionRequest } from "./types.js";

const ENDED = ["ready", "failed", "canceled"];
const q = (params: Record<string, string | number | undefined>) => {
  const s = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined) s.set(k, String(v));
  const text = s.toString();
  return text ? `?${text}` : "";
};
const id = (v: string) => encodeURIComponent(v);

export class Environments {
  /** @internal */
  constructor(private readonly http: Transport) {}

  createSpec(spec: EnvironmentSpecRequest): Promise<EnvironmentSpec> {
    return this.http.json("POST", "/environments/specs", { body: spec });
  }

  /** An owner's specs, newest first. */
  listSpecs(ownerId: string): Promise<EnvironmentSpec[]> {
    return this.http.json("GET", `/environments/specs${q({ owner_id: ownerId })}`);
  }

  getSpec(specId: string): Promise<EnvironmentSpec> {
    return this.http.json("GET", `/environments/specs/${id(specId)}`);
  }

  /** Debian packages the spec's base image lacks that it likely wants. */
  suggestions(specId: string): Promise<{ spec_id: string; suggestions: string[]; note?: string }> {
    return this.http.json("GET", `/environments/specs/${id(specId)}/suggestions`);
  }

  /** Queues a build; `targets` are local (default), ghcr, dockerhub or registry connection ids. */
  build(specId: string, opts: { targets?: string[]; visibility?: string } = {}): Promise<EnvironmentBuild> {
    return this.http.json("POST", "/environments/builds", { body: { spec_id: specId, ...opts } });
  }

  /** Builds newest first, with their specs. */
  listBuilds(opts: { ownerId?: string; limit?: number } = {}): Promise<{ build: EnvironmentBuild; spec: EnvironmentSpec }[]> {
    return this.http.json("GET", `/environments/builds${q({ owner_id: opts.ownerId, limit: opts.limit })}`);
  }

  getBuild(buildId: string): Promise<EnvironmentBuild> {
    return this.http.json("GET", `/environments/builds/${id(buildId)}`);
  }

  /** Polls a build until it has ended (ready, failed or canceled). */
  async waitBuild(buildId: string, opts: { timeoutMs?: number; intervalMs?: number } = {}): Promise<EnvironmentBuild> {
    const end = Date.now() + (opts.timeoutMs ?? 30 * 60_000);
    for (;;) {
      const b = await this.getBuild(buildId);
      if (ENDED.includes(b.status) || Date.now() > end) return b;
      await new Promise((r) => setTimeout(r, opts.intervalMs ?? 1000));
    }
  }

  /** Calls `onLog` with each line of a build's log (those so far, then new ones) and resolves with the build once it has ended. */
  async followBuild(buildId: string, onLog: (line: string) => void): Promise<EnvironmentBuild> {
    const res = await this.http.send("GET", `/environments/builds/${id(buildId)}/log`, { timeoutMs: null });
    for await (const m of ndjson<{ line?: string }>(res)) if (m.line !== undefined) onLog(m.line);
    return this.getBuild(buildId);
  }

  /** Stops a queued or running build; resolves once it has stopped. */
  cancelBuild(buildId: string): Promise<EnvironmentBuild> {
    return this.http.json("POST", `/environments/builds/${id(buildId)}/cancel`);
  }

  spawnConfig(buildId: string): Promise<EnvironmentSpawnConfig> {
    return this.http.json("GET", `/environments/builds/${id(buildId)}/spawn-config`);
  }

  /** Creates a connection, or replaces the one with `id`. */
  putRegistryConnection(conn: RegistryConnectionRequest): Promise<RegistryConnection> {
    return this.http.json("POST", "/environments/registry-connections", { body: conn });
  }

  listRegistryConnections(ownerId: string): Promise<RegistryConnection[]> {
    return this.http.json("GET", `/environments/registry-connections${q({ owner_id: ownerId })}`);
  }

  async deleteRegistryConnection(connectionId: string): Promise<void> {
    await this.http.json("DELETE", `/environments/registry-connections/${id(connectionId)}`);
  }
}
