// What the providers that delegate sandboxes to another service (remote: a ForgeVM server; e2b:
// an E2B-compatible API) share: each spawn creates a far sandbox, uploads the agent into it and
// starts it there (`--stdio`), relayed back (relayed-agent.ts); then hello and configure as for a
// VM. The far sandbox is recorded on disk until it is destroyed, so that a server that died
// leaves nothing running elsewhere after its successor's sweep.
import { availableParallelism } from "node:os";
import { MEMORY_MB } from "../schemas/bounds.js";
import { mkdir, readFile, rm } from "node:fs/promises";
import { join } from "node:path";
import { AgentChannel } from "../agent-client/index.js";
import type { Paths } from "../config/paths.js";
import { ConsoleLog } from "./console-log.js";
import { DelegatedVm } from "./delegated-vm.js";
import { recordFar, sweepFar } from "./far-records.js";
import { awaitHello, configure, HelloError } from "./handshake.js";
import { BootError, type AttachSpec, type Provider, type ProviderFeatures, type ProviderHealth, type Vm, type VmSpec } from "./provider.js";
import { RemoteError, type RelayedStream } from "./relayed-agent.js";
import { probeBySpawn, validateSpec } from "./spec.js";
import { ignore } from "../util/ignore.js";

/** A far sandbox as a delegating provider holds it. */
export interface Far {
  /** What sweepOrphans needs to destroy it later (written to far.json). */
  record: Record<string, unknown>;
  keep(): Promise<unknown>;
  kill(): Promise<unknown>;
}

/** How often a far sandbox's lifetime is renewed. */
export const KEEPALIVE_MS = 30 * 60_000;

export abstract class DelegatingProvider implements Provider {
  abstract readonly name: string;
  readonly features: ProviderFeatures = { snapshots: false, reattach: false, volumes: false, init: false, commit: false, isolation: "vm" };
  private readonly live = new Set<DelegatedVm>();
  private agent: Promise<Buffer> | null = null;

  constructor(
    private readonly paths: Paths,
    /** This provider's directory under the data directory. */
    private readonly dir: string,
    private readonly bootTimeoutMs: number,
  ) {}

  abstract health(): Promise<ProviderHealth>;
  /** Where its sandboxes run (part of the machine key and of far records). */
  protected abstract get where(): string;
  /** Creates the far sandbox for `spec`. */
  protected abstract create(spec: VmSpec): Promise<Far>;
  /** Uploads the agent into the far sandbox and starts it there, relayed. */
  protected abstract run(far: Far, agent: Buffer, console: ConsoleLog): Promise<{ stream: RelayedStream; exited: Promise<void> }>;
  /** Destroys a far sandbox an earlier server recorded. */
  protected abstract killRecord(record: Record<string, unknown>): Promise<void>;

  probe(): Promise<boolean> {
    return probeBySpawn((spec) => this.spawn(spec), 256);
  }

  maxVcpus(): number {
    // The far service refuses what it cannot give, with its own message.
    return Math.max(64, availableParallelism());
  }

  maxMemoryMb(): number {
    return MEMORY_MB.maximum;
  }

  async spawn(spec: VmSpec): Promise<Vm> {
    validateSpec(spec);
    if (spec.restore || spec.memoryFile || spec.baseDisk) throw new Error(`the ${this.name} provider cannot restore snapshots`);
    if (spec.volumes?.length) throw new Error(`the ${this.name} provider cannot attach volumes`);
    const dir = join(this.dir, spec.id);
    await mkdir(dir, { recursive: true });
    const console = new ConsoleLog(join(dir, "console.log"));
    let far: Far | null = null;
    let relay: RelayedStream | null = null;
    try {
      const t0 = Date.now();
      far = await this.create(spec);
      await recordFar(dir, far.record, this.where);
      const { stream, exited } = await this.run(far, await this.agentBinary(), console);
      relay = stream;
      const channel = new AgentChannel(stream);
      const hello = await awaitHello(channel, { deadlineMs: spec.bootTimeoutMs ?? this.bootTimeoutMs, exited });
      await configure(channel, { hostname: spec.hostname ?? spec.id });
      const f = far;
      const vm: DelegatedVm = new DelegatedVm(
        { id: spec.id, pid: 0, dir, accel: "none", memoryMb: spec.memoryMb, vcpus: spec.vcpus, agentVersion: hello.agent, bootMs: Date.now() - t0, restored: false },
        channel,
        console,
        exited,
        { keep: () => f.keep(), kill: () => f.kill(), abort: () => stream.abort(), keepaliveMs: KEEPALIVE_MS, forget: () => this.live.delete(vm) },
      );
      this.live.add(vm);
      return vm;
    } catch (e) {
      const tail = console.getTail();
      console.close();
      await far?.kill().catch(ignore("the far sandbox may be gone already; the spawn's error is the one reported"));
      relay?.abort();
      await rm(dir, { recursive: true, force: true });
      if (e instanceof HelloError || e instanceof RemoteError) throw new BootError(`${this.name} sandbox ${spec.id} did not start: ${e.message}`, tail);
      throw e;
    }
  }

  async machineKey(): Promise<string> {
    return `${this.name}:${this.where}`;
  }

  async nicProblem(): Promise<string | null> {
    return null;
  }

  async attach(a: AttachSpec): Promise<Vm> {
    throw new Error(`${this.name} sandbox ${a.id} ended with its server`);
  }

  /** Directories (and far sandboxes) an earlier server left: the far sandbox is destroyed, the directory removed. */
  async sweepOrphans(keep: Set<string>): Promise<string[]> {
    const live = new Set([...this.live].map((v) => v.info.id));
    return sweepFar(
      this.dir,
      this.where,
      (id) => keep.has(id) || live.has(id),
      (rec) => this.killRecord(rec),
    );
  }

  async destroyAll(): Promise<void> {
    await Promise.all([...this.live].map((vm) => vm.destroy()));
  }

  private agentBinary(): Promise<Buffer> {
    this.agent ??= readFile(this.paths.agentBinary).catch((e) => {
      this.agent = null;
      throw new Error(`the agent binary is missing at ${this.paths.agentBinary} (run ./setup.sh): ${e.message}`);
    });
    return this.agent;
  }
}
