// The remote provider: each sandbox is a sandbox of another ForgeVM server, reached over its REST
// API with its key. The agent is uploaded into it and run there as a process (`--stdio`) whose
// stdin and stdout travel over the exec WebSocket in base64; core drives it through that channel
// like any VM, so exec, files, streams, ports and the egress allowlist all work unchanged. The
// far sandbox has no network of its own unless "full" is asked for: allowlisted traffic comes
// back through the channel to this server's egress proxy. Snapshots, forks, volumes and commits
// stay on the far server and are refused here by name.
import { join } from "node:path";
import type { Paths } from "../../config/paths.js";
import type { ConsoleLog } from "../console-log.js";
import { DelegatingProvider, type Far } from "../delegating-provider.js";
import type { ProviderHealth, VmSpec } from "../provider.js";
import { RELAYED_AGENT_PATH, RelayedStream } from "../relayed-agent.js";
import { ForgevmApi } from "./forgevm-api.js";

export interface RemoteProviderOptions {
  paths: Paths;
  /** The other server's address, e.g. http://10.0.0.5:7423. */
  url: string;
  apiKey: string;
  /** Hello deadline once the far sandbox runs (default 30 s). */
  bootTimeoutMs?: number;
}

/** The far sandbox's lifetime; it is extended while ours runs, and destroyed with it. */
const FAR_TTL = "2h";

export class RemoteProvider extends DelegatingProvider {
  readonly name = "remote";
  private readonly api: ForgevmApi;

  constructor(private readonly opts: RemoteProviderOptions) {
    super(opts.paths, join(opts.paths.dataDir, "remote"), opts.bootTimeoutMs ?? 30_000);
    this.api = new ForgevmApi(opts.url, opts.apiKey);
  }

  protected get where(): string {
    return this.opts.url;
  }

  async health(): Promise<ProviderHealth> {
    const details: Record<string, string> = { url: this.opts.url };
    const problems: string[] = [];
    try {
      const h = await this.api.call<{ version: string }>("GET", "/health");
      details.remote_version = h.version;
      const providers = await this.api.call<{ name: string; healthy: boolean; default: boolean; isolation?: string }[]>("GET", "/providers");
      const d = providers.find((p) => p.default);
      details.remote_provider = d ? `${d.name}${d.isolation ? ` (${d.isolation})` : ""}` : "none";
      if (d && !d.healthy) problems.push(`the remote server's provider ${d.name} is not healthy`);
    } catch (e) {
      problems.push((e as Error).message);
    }
    return { name: this.name, healthy: problems.length === 0, accel: null, problems, details };
  }

  protected async create(spec: VmSpec): Promise<Far> {
    const far = await this.api.call<{ id: string }>("POST", "/sandboxes", {
      body: {
        ...(spec.image ? { image: spec.image } : {}),
        memory_mb: spec.memoryMb,
        vcpus: spec.vcpus,
        ...(spec.diskMb ? { disk_mb: spec.diskMb } : {}),
        ttl: FAR_TTL,
        network: spec.nic ? "full" : "none",
        metadata: { "forgevm.remote_of": spec.id },
      },
    });
    return {
      record: { id: far.id },
      keep: () => this.api.call("POST", `/sandboxes/${far.id}/extend`, { body: { ttl: FAR_TTL } }),
      kill: () => this.api.call("DELETE", `/sandboxes/${far.id}`),
    };
  }

  protected async killRecord(record: Record<string, unknown>): Promise<void> {
    await this.api.call("DELETE", `/sandboxes/${String(record.id)}`);
  }

  /** Starts the uploaded agent in the far sandbox and relays its stdin and stdout over the exec WebSocket. */
  protected async run(far: Far, agent: Buffer, console: ConsoleLog): Promise<{ stream: RelayedStream; exited: Promise<void> }> {
    const id = String(far.record.id);
    await this.api.call("POST", `/sandboxes/${id}/files`, { raw: agent, query: { path: RELAYED_AGENT_PATH, mode: "0755" } });
    const stream = new RelayedStream();
    const ws = this.api.socket(`/sandboxes/${id}/exec/ws`);
    const exited = new Promise<void>((resolve) => {
      ws.on("close", () => {
        stream.finish();
        resolve();
      });
    });
    ws.on("error", (e) => console.note(`relay: ${e.message}\n`));
    ws.on("open", () => {
      ws.send(JSON.stringify({ command: RELAYED_AGENT_PATH, args: ["--stdio"], encoding: "base64" }));
      stream.attach({
        write: (b) => ws.readyState === ws.OPEN && ws.send(JSON.stringify({ stdin: b.toString("base64") })),
        end: () => ws.readyState === ws.OPEN && ws.send(JSON.stringify({ stdin_eof: true })),
        abort: () => ws.terminate(),
      });
    });
    ws.on("message", (raw) => {
      let msg: { stream?: string; data?: string; error?: { message?: string } };
      try {
        msg = JSON.parse(raw.toString());
      } catch {
        return;
      }
      if (msg.stream === "stdout" && typeof msg.data === "string") stream.deliver(Buffer.from(msg.data, "base64"));
      else if (msg.stream === "stderr" && typeof msg.data === "string") console.note(Buffer.from(msg.data, "base64").toString());
      else if (msg.error?.message) console.note(`relay: ${msg.error.message}\n`);
    });
    return { stream, exited };
  }
}
