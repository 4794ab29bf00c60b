// The `custom` provider: each sandbox is a sandbox of a backend that speaks the ForgeVM Custom HTTP
// provider protocol (docs/custom-http.md), configured as `providers.custom` (base_url, api_key,
// timeout, name). Core asks its guest for processes and files as it asks any VM's (providers/
// guest.ts); here each is one of the backend's HTTP calls (custom-guest.ts). What the protocol
// cannot do is refused by name: snapshots, forks, pause and commit by the features below, a
// console log because it has none, stdin, terminals, ports and watches by the guest's features.
// A backend sandbox is recorded on disk until it is destroyed, so that one a dead server left is
// destroyed by its successor's sweep.
import { mkdir, rm } from "node:fs/promises";
import { MEMORY_MB, VCPUS } from "../../schemas/bounds.js";
import { join } from "node:path";
import type { Paths } from "../../config/paths.js";
import { ignore } from "../../util/ignore.js";
import { recordFar, sweepFar } from "../far-records.js";
import { BootError, type AttachSpec, type Provider, type ProviderFeatures, type ProviderHealth, type Vm, type VmInfo, type VmSpec, type VmUsage } from "../provider.js";
import { probeBySpawn, validateSpec } from "../spec.js";
import { Vmless } from "../vmless.js";
import { CustomApi, CustomHttpError } from "./custom-api.js";
import { CustomGuest } from "./custom-guest.js";

export interface CustomProviderOptions {
  paths: Paths;
  /** The backend's address: every route of the protocol is under it. */
  baseUrl: string;
  /** Sent as X-API-Key when set. */
  apiKey: string;
  /** Each request's deadline (the protocol's `timeout`; default 60 s). */
  timeoutMs?: number;
  /** The provider's name: what sandboxes name to run on it (default "custom"). */
  name?: string;
}

const NO_VMM = "a Custom HTTP backend's sandbox has no VMM here: the protocol has no snapshots, forks, pause, disk copies or re-attaching";

/** One sandbox of a Custom HTTP backend. */
class CustomVm extends Vmless implements Vm {
  protected readonly noVmm = NO_VMM;
  private destroying: Promise<void> | null = null;
  private end!: () => void;
  readonly exited = new Promise<void>((r) => (this.end = r));

  constructor(
    readonly info: VmInfo,
    readonly guest: CustomGuest,
    private readonly kill: () => Promise<void>,
  ) {
    super();
    // Its guest closes when the backend's sandbox is gone (shut down from inside, or destroyed).
    guest.once("close", () => this.end());
  }

  /** The protocol has no console log. */
  consoleTail(): string {
    return "";
  }

  destroy(): Promise<void> {
    this.destroying ??= (async () => {
      this.guest.close();
      await this.kill();
      this.end();
    })();
    return this.destroying;
  }

  /** Nothing of it runs on this host. */
  async usage(): Promise<VmUsage | null> {
    return null;
  }
}

export class CustomProvider implements Provider {
  readonly name: string;
  readonly features: ProviderFeatures = { snapshots: false, reattach: false, volumes: false, init: false, commit: false, isolation: "vm" };
  private readonly api: CustomApi;
  private readonly dir: string;
  private readonly timeoutMs: number;
  private readonly live = new Set<CustomVm>();

  constructor(private readonly opts: CustomProviderOptions) {
    this.name = opts.name || "custom";
    this.timeoutMs = opts.timeoutMs ?? 60_000;
    this.api = new CustomApi(opts.baseUrl, opts.apiKey, this.timeoutMs);
    this.dir = join(opts.paths.dataDir, "custom-http");
  }

  async health(): Promise<ProviderHealth> {
    const problems: string[] = [];
    try {
      await this.api.health();
    } catch (e) {
      problems.push((e as Error).message);
    }
    // Whether its sandboxes are VMs is the backend's to say; the protocol does not.
    return { name: this.name, healthy: problems.length === 0, accel: null, problems, details: { base_url: this.opts.baseUrl, isolation: "the backend's" } };
  }

  probe(): Promise<boolean> {
    return probeBySpawn((spec) => this.spawn(spec), 256);
  }

  maxVcpus(): number {
    return VCPUS.maximum;
  }

  maxMemoryMb(): number {
    return MEMORY_MB.maximum;
  }

  async spawn(spec: VmSpec): Promise<Vm> {
    validateSpec(spec);
    if (spec.restore || spec.memoryFile || spec.baseDisk) throw new Error(`the ${this.name} provider cannot restore snapshots: the Custom HTTP protocol has none`);
    if (spec.volumes?.length) throw new Error(`the ${this.name} provider cannot attach volumes: the Custom HTTP protocol has none`);
    if (spec.nic) throw new Error(`the ${this.name} provider cannot give a sandbox a network device: its network is the backend's`);
    const dir = join(this.dir, spec.id);
    await mkdir(dir, { recursive: true });
    let farId: string | null = null;
    try {
      const t0 = Date.now();
      farId = await this.api.spawn({
        image: spec.image ?? "default",
        memory_mb: spec.memoryMb,
        vcpus: spec.vcpus,
        ...(spec.diskMb ? { disk_size_mb: spec.diskMb } : {}),
        metadata: { forgevm_id: spec.id },
      });
      await recordFar(dir, { id: farId }, this.opts.baseUrl);
      // The protocol has no hostname, clock or entropy of the host's to give: the backend's sandbox is as it made it.
      const guest = new CustomGuest(this.api, farId, this.name, this.timeoutMs);
      const hello = await guest.hello;
      const id = farId;
      const vm: CustomVm = new CustomVm(
        { id: spec.id, pid: 0, dir, accel: "none", memoryMb: spec.memoryMb, vcpus: spec.vcpus, agentVersion: hello.agent, bootMs: Date.now() - t0, restored: false },
        guest,
        async () => {
          await this.api.destroy(id).catch(ignore("the backend's sandbox may be gone already"));
          await rm(dir, { recursive: true, force: true });
          this.live.delete(vm);
        },
      );
      this.live.add(vm);
      return vm;
    } catch (e) {
      if (farId) await this.api.destroy(farId).catch(ignore("the backend's sandbox may be gone already; the spawn's error is the one reported"));
      await rm(dir, { recursive: true, force: true });
      if (e instanceof CustomHttpError) throw new BootError(`${this.name} sandbox ${spec.id} did not start: ${e.message}`, "");
      throw e;
    }
  }

  async machineKey(): Promise<string> {
    return `${this.name}:${this.opts.baseUrl}`;
  }

  async nicProblem(): Promise<string | null> {
    return `the ${this.name} provider's network is the backend's`;
  }

  async attach(a: AttachSpec): Promise<Vm> {
    throw new Error(`${this.name} sandbox ${a.id} ended with its server: the Custom HTTP protocol cannot re-attach`);
  }

  /** Backend sandboxes an earlier server recorded and no one keeps: destroyed, their records removed. */
  async sweepOrphans(keep: Set<string>): Promise<string[]> {
    const live = new Set([...this.live].map((v) => v.info.id));
    return sweepFar(
      this.dir,
      this.opts.baseUrl,
      (id) => keep.has(id) || live.has(id),
      (rec) => this.api.destroy(String(rec.id)),
    );
  }

  async destroyAll(): Promise<void> {
    await Promise.all([...this.live].map((vm) => vm.destroy()));
  }
}
