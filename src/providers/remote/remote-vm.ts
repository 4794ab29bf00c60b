// One sandbox of the remote provider: the relayed agent's channel, the far sandbox kept alive
// while this one runs, and destroyed with it. Snapshots, disk copies and re-attaching stay with
// the far server; core refuses them before they reach here (the provider's features say so).
import { rm } from "node:fs/promises";
import type { AgentChannel } from "../../agent-client/index.js";
import type { ConsoleLog } from "../console-log.js";
import type { CaptureResult, Vm, VmInfo, VmUsage } from "../provider.js";
import type { ForgevmApi } from "./forgevm-api.js";

const NOT_HERE = "a remote sandbox's snapshots, disk and VMM are on the remote server";

export interface FarSandbox {
  farId: string;
  api: ForgevmApi;
  /** How often the far sandbox's lifetime is renewed, and by how much. */
  keepaliveMs: number;
  ttl: string;
  forget: () => void;
}

export class RemoteVm implements Vm {
  private destroying: Promise<void> | null = null;
  private readonly keepalive: NodeJS.Timeout;

  constructor(
    readonly info: VmInfo,
    readonly channel: AgentChannel,
    private readonly console: ConsoleLog,
    readonly exited: Promise<void>,
    private readonly far: FarSandbox,
  ) {
    this.keepalive = setInterval(() => void far.api.call("POST", `/sandboxes/${far.farId}/extend`, { body: { ttl: far.ttl } }).catch(() => {}), far.keepaliveMs);
    this.keepalive.unref();
    void exited.then(() => {
      clearInterval(this.keepalive);
      channel.close();
    });
  }

  consoleTail(bytes = 4096): string {
    return this.console.getTail(bytes);
  }

  destroy(): Promise<void> {
    this.destroying ??= (async () => {
      clearInterval(this.keepalive);
      this.channel.close();
      await this.far.api.call("DELETE", `/sandboxes/${this.far.farId}`).catch(() => {});
      await this.exited;
      this.console.close();
      await rm(this.info.dir, { recursive: true, force: true });
      this.far.forget();
    })();
    return this.destroying;
  }

  release(): void {
    throw new Error("a remote sandbox's relay cannot outlive its server");
  }

  async snapshot(): Promise<CaptureResult> {
    throw new Error(NOT_HERE);
  }

  async prepareSnapshot(): Promise<null> {
    throw new Error(NOT_HERE);
  }

  async freeze(): Promise<CaptureResult> {
    throw new Error(NOT_HERE);
  }

  async copyDisk(): Promise<null> {
    throw new Error(NOT_HERE);
  }

  async setNice(): Promise<void> {}

  /** Nothing of it runs on this host. */
  async usage(): Promise<VmUsage | null> {
    return null;
  }
}
