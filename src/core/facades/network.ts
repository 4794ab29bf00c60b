// A running sandbox's network: its mode, egress allowlist, published ports and egress log.
import type { Duplex } from "node:stream";
import type { EgressEntry } from "../../net/egress-log.js";
import type { PortMapping } from "../../net/ports.js";
import type { NetworkRecord } from "../../store/sandboxes.js";
import type { Networks } from "../network.js";
import type { EgressUpdate } from "../network.js";
import type { SandboxLookup } from "./lookup.js";

/** What the network operations use: the networks of the running sandboxes. */
export interface NetworkDeps {
  readonly networks: Networks;
}

export class NetworkFacade {
  constructor(
    private readonly core: NetworkDeps,
    private readonly sandboxes: SandboxLookup,
  ) {}

  /**
   * A sandbox's network mode, allowlist and published ports: a running one's as they are now, a
   * paused or stopped one's as it keeps them for when it runs again.
   */
  get(id: string): NetworkRecord {
    const row = this.sandboxes.get(id);
    if (row.state !== "running" && row.network && (row.state === "paused" || row.state === "stopped")) return row.network;
    return this.core.networks.get(this.sandboxes.running(id).id);
  }

  /** Replaces a running sandbox's egress allowlist; effective on its next request. */
  setAllowlist(id: string, allow: string[]): Promise<NetworkRecord> {
    return this.core.networks.setAllow(this.sandboxes.running(id).id, allow);
  }

  /** Changes a running sandbox's egress: mode, allowlist, deny list, rules (a field left out is kept); effective on its next connection. */
  setEgress(id: string, change: EgressUpdate): Promise<NetworkRecord> {
    return this.core.networks.setEgress(this.sandboxes.running(id).id, change);
  }

  /** Checks egress rules' shape; a 400 naming `field`. */
  checkRules(rules: unknown, field: string): void {
    this.core.networks.checkRules(rules, field);
  }

  /** The entries of allowlist `asked` that reach beyond allowlist `pinned` (presets expanded); a bad entry is a 400. */
  allowlistOutside(asked: string[], pinned: string[]): string[] {
    return this.core.networks.outside(asked, pinned);
  }

  /** The network mode spawns get when they name none and have no allowlist. */
  get defaultMode(): string {
    return this.core.networks.defaultNetwork;
  }

  /** Publishes a port of a running sandbox ("8080:80"); 409 if the host port is taken. */
  async publishPort(id: string, spec: string): Promise<PortMapping> {
    return this.core.networks.addPort(this.sandboxes.running(id).id, spec);
  }

  /** Stops publishing a host port of a running sandbox. */
  async unpublishPort(id: string, hostPort: number): Promise<void> {
    await this.core.networks.removePort(this.sandboxes.running(id).id, hostPort);
  }

  /** A connection to a port inside a running sandbox (its idle clock sees it); null when nothing listens there. */
  openPort(id: string, port: number): Promise<Duplex | null> {
    return this.core.networks.openPort(this.sandboxes.running(id).id, port);
  }

  /** The last `lines` egress decisions of a sandbox (kept with its history after it is destroyed). */
  async egressLog(id: string, lines = 100): Promise<EgressEntry[]> {
    return this.core.networks.egressLog(this.sandboxes.get(id).id, lines);
  }
}
