// One sandbox of a delegating provider (remote, e2b): the relayed agent's channel, the far
// sandbox kept alive while this one runs, and destroyed with it. Snapshots, disk copies and
// re-attaching stay with the far service; core refuses them before they reach here (the
// provider's features say so).
import { rm } from "node:fs/promises";
import type { AgentChannel } from "../agent-client/index.js";
import type { ConsoleLog } from "./console-log.js";
import type { Vm, VmInfo, VmUsage } from "./provider.js";
import { Vmless } from "./vmless.js";
import { ignore } from "../util/ignore.js";

/** How long a destroyed sandbox's relay may take to end by itself. */
const ABORT_AFTER_MS = 10_000;
const NOT_HERE = "a delegated sandbox's snapshots, disk and VMM are with the service that runs it, and its relay ends with this server";

/** What a delegated VM does to its far sandbox. */
export interface FarSandbox {
  /** Renews its lifetime (called every keepaliveMs). */
  keep(): Promise<unknown>;
  keepaliveMs: number;
  /** Destroys it. */
  kill(): Promise<unknown>;
  /** Drops the VM from its provider's list. */
  forget(): void;
  /** Cuts the relay's connection. */
  abort(): void;
}

export class DelegatedVm extends Vmless implements Vm {
  protected readonly noVmm = NOT_HERE;
  private destroying: Promise<void> | null = null;
  private readonly keepalive: NodeJS.Timeout;

  constructor(
    readonly info: VmInfo,
    readonly guest: AgentChannel,
    private readonly console: ConsoleLog,
    readonly exited: Promise<void>,
    private readonly far: FarSandbox,
  ) {
    super();
    this.keepalive = setInterval(() => void far.keep().catch(ignore("a missed keepalive is retried at the next tick")), far.keepaliveMs);
    this.keepalive.unref();
    void exited.then(() => {
      clearInterval(this.keepalive);
      guest.close();
    });
  }

  consoleTail(bytes = 4096): string {
    return this.console.getTail(bytes);
  }

  destroy(): Promise<void> {
    this.destroying ??= (async () => {
      clearInterval(this.keepalive);
      this.guest.close();
      await this.far.kill().catch(ignore("the far sandbox may be gone already"));
      // The relay ends when the far agent does; a service that keeps it open is cut off.
      const late = setTimeout(() => this.far.abort(), ABORT_AFTER_MS);
      await this.exited;
      clearTimeout(late);
      this.console.close();
      await rm(this.info.dir, { recursive: true, force: true });
      this.far.forget();
    })();
    return this.destroying;
  }

  /** Nothing of it runs on this host. */
  async usage(): Promise<VmUsage | null> {
    return null;
  }
}
