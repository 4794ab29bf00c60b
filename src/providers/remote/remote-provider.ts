// The remote provider: each sandbox is a sandbox of another ForgeVM server, reached over its REST
// API with its key. The agent is uploaded into it and run there as a process (`--stdio`) whose
// stdin and stdout travel over the exec WebSocket in base64; core drives it through that channel
// like any VM, so exec, files, streams, ports and the egress allowlist all work unchanged. The
// far sandbox has no network of its own unless "full" is asked for: allowlisted traffic comes
// back through the channel to this server's egress proxy. Snapshots, forks, volumes and commits
// stay on the far server and are refused here by name.
import { availableParallelism } from "node:os";
import { mkdir, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { Paths } from "../../config/paths.js";
import { AgentChannel } from "../../agent-client/index.js";
import { ConsoleLog } from "../console-log.js";
import { awaitHello, configure, HelloError } from "../handshake.js";
import { BootError, type AttachSpec, type Provider, type ProviderFeatures, type ProviderHealth, type Vm, type VmSpec } from "../provider.js";
import { RELAYED_AGENT_PATH, RelayedStream } from "../relayed-agent.js";
import { validateSpec } from "../spec.js";
import { ForgevmApi, RemoteError } from "./forgevm-api.js";
import { RemoteVm } from "./remote-vm.js";

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
const KEEPALIVE_MS = 30 * 60_000;

export class RemoteProvider implements Provider {
  readonly name = "remote";
  readonly features: ProviderFeatures = { snapshots: false, reattach: false, volumes: false, commit: false, isolation: "vm" };
  private readonly api: ForgevmApi;
  private readonly dir: string;
  private readonly live = new Set<RemoteVm>();
  private agent: Promise<Buffer> | null = null;

  constructor(private readonly opts: RemoteProviderOptions) {
    this.api = new ForgevmApi(opts.url, opts.apiKey);
    this.dir = join(opts.paths.dataDir, "remote");
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

  async probe(): Promise<boolean> {
    const vm = await this.spawn({ id: `probe-${process.pid}-${Date.now().toString(36)}`, memoryMb: 256, vcpus: 1 }).catch(() => null);
    if (!vm) return false;
    try {
      await vm.channel.request<"ping">({ op: "ping" });
      return true;
    } catch {
      return false;
    } finally {
      await vm.destroy();
    }
  }

  maxVcpus(): number {
    // The far server refuses what it cannot give, with its own message.
    return Math.max(64, availableParallelism());
  }

  async spawn(spec: VmSpec): Promise<Vm> {
    validateSpec(spec);
    if (spec.restore || spec.memoryFile || spec.baseDisk) throw new Error("the remote provider cannot restore snapshots");
    if (spec.volumes?.length) throw new Error("the remote provider cannot attach volumes");
    const dir = join(this.dir, spec.id);
    await mkdir(dir, { recursive: true });
    const console = new ConsoleLog(join(dir, "console.log"));
    let farId = "";
    const undo = async () => {
      console.close();
      if (farId) await this.api.call("DELETE", `/sandboxes/${farId}`).catch(() => {});
      await rm(dir, { recursive: true, force: true });
    };
    try {
      const t0 = Date.now();
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
      farId = far.id;
      await writeFile(join(dir, "remote.json"), JSON.stringify({ id: farId, url: this.opts.url }));
      await this.api.call("POST", `/sandboxes/${farId}/files`, { raw: await this.agentBinary(), query: { path: RELAYED_AGENT_PATH, mode: "0755" } });
      const { stream, exited } = this.relay(farId, console);
      const channel = new AgentChannel(stream);
      const hello = await awaitHello(channel, { deadlineMs: spec.bootTimeoutMs ?? this.opts.bootTimeoutMs ?? 30_000, exited });
      await configure(channel, { hostname: spec.hostname ?? spec.id });
      const vm = new RemoteVm(
        { id: spec.id, pid: 0, dir, accel: "none", memoryMb: spec.memoryMb, vcpus: spec.vcpus, agentVersion: hello.agent, bootMs: Date.now() - t0, restored: false },
        channel,
        console,
        exited,
        {
          farId,
          api: this.api,
          keepaliveMs: KEEPALIVE_MS,
          ttl: FAR_TTL,
          forget: () => this.live.delete(vm),
        },
      );
      this.live.add(vm);
      return vm;
    } catch (e) {
      const tail = console.getTail();
      await undo();
      if (e instanceof HelloError || e instanceof RemoteError) throw new BootError(`remote sandbox ${spec.id} did not start: ${e.message}`, tail);
      throw e;
    }
  }

  async machineKey(): Promise<string> {
    return `remote:${this.opts.url}`;
  }

  async nicProblem(): Promise<string | null> {
    return null;
  }

  async attach(a: AttachSpec): Promise<Vm> {
    throw new Error(`remote sandbox ${a.id} ended with its server`);
  }

  /** Directories (and far sandboxes) an earlier server left: the far sandbox is destroyed, the directory removed. */
  async sweepOrphans(keep: Set<string>): Promise<string[]> {
    const live = new Set([...this.live].map((v) => v.info.id));
    const gone: string[] = [];
    for (const id of await readdir(this.dir).catch(() => [] as string[])) {
      if (keep.has(id) || live.has(id)) continue;
      const rec = await readFile(join(this.dir, id, "remote.json"), "utf8")
        .then((t) => JSON.parse(t) as { id: string; url: string })
        .catch(() => null);
      if (rec && rec.url === this.opts.url) await this.api.call("DELETE", `/sandboxes/${rec.id}`).catch(() => {});
      await rm(join(this.dir, id), { recursive: true, force: true });
      gone.push(id);
    }
    return gone;
  }

  async destroyAll(): Promise<void> {
    await Promise.all([...this.live].map((vm) => vm.destroy()));
  }

  private agentBinary(): Promise<Buffer> {
    this.agent ??= readFile(this.opts.paths.agentBinary).catch((e) => {
      this.agent = null;
      throw new Error(`the agent binary is missing at ${this.opts.paths.agentBinary} (run ./setup.sh): ${e.message}`);
    });
    return this.agent;
  }

  /** Starts the uploaded agent in the far sandbox and relays its stdin and stdout over the exec WebSocket. */
  private relay(farId: string, console: ConsoleLog): { stream: RelayedStream; exited: Promise<void> } {
    const stream = new RelayedStream();
    const ws = this.api.socket(`/sandboxes/${farId}/exec/ws`);
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
        end: () => ws.close(1000),
      });
    });
    ws.on("message", (raw) => {
      let msg: { stream?: string; data?: string; type?: string; error?: { message?: string } };
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
