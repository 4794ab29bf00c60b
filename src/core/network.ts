// Sandbox networking. `none` has only loopback; `allowlist` adds one way out, a listener on the
// guest's 127.0.0.1:3128 whose connections the agent hands to the host's egress proxy, tagged
// with the sandbox they came from; published ports go the other way through the same channel.
// `full` is the exception: a network device on QEMU's user-mode network, whose VMM the host
// firewall keeps off the host and private networks (providers/qemu/firewall.ts). Every rule
// about what is reachable is enforced on the host, where the guest cannot change it.
import type { AgentChannel, GuestListener } from "../agent-client/index.js";
import type { Vm } from "../providers/provider.js";
import { AllowlistError, outside, parseAllowlist, type Presets } from "../net/allowlist.js";
import type { EgressProxy } from "../net/egress-proxy.js";
import type { EgressEntry } from "../net/egress-log.js";
import { PortError, PublishedPorts, parsePortSpec, type PortMapping } from "../net/ports.js";
import { checkRules, type EgressRules, outsideAllowlist, RuleError, secretsNamed } from "../net/egress-rules.js";
import { tunnelDuplex } from "../net/tunnel.js";
import type { NetworkRecord } from "../store/sandboxes.js";
import { badRequest, conflict, notFound, sandboxGone } from "../http/errors.js";

export type NetworkMode = NetworkRecord["mode"];
export const NETWORK_MODES: NetworkMode[] = ["none", "allowlist", "full"];

/** Where the egress proxy answers inside the guest. */
export const PROXY_ADDR = "127.0.0.1";
export const PROXY_PORT = 3128;

/** Environment that points HTTP clients in the guest at the egress proxy. */
export function proxyEnv(): Record<string, string> {
  const url = `http://${PROXY_ADDR}:${PROXY_PORT}`;
  const none = "localhost,127.0.0.1,::1";
  return { HTTP_PROXY: url, HTTPS_PROXY: url, http_proxy: url, https_proxy: url, NO_PROXY: none, no_proxy: none };
}

/** What a spawn asks for; validated by `Networks.plan`. */
export interface NetworkRequest {
  mode?: string;
  allow?: string[];
  ports?: string[];
  /** Use the package cache (allowlist mode); default from the config. */
  cache?: boolean;
  /** Egress rules in our shape ({host: {headers}}), allowlist mode only. */
  rules?: unknown;
}

/** What a running sandbox's egress may be changed to: a new allowlist, new rules, or both. */
export interface EgressUpdate {
  allow?: string[];
  /** Our shape; null or {} clears them. */
  rules?: unknown;
}

interface Attached {
  record: NetworkRecord;
  vm: Vm;
  ports: PublishedPorts;
  listener: GuestListener | null;
}

/** The networks of all running sandboxes of one server. */
export class Networks {
  private readonly attached = new Map<string, Attached>();

  constructor(
    private readonly proxy: EgressProxy,
    private readonly presets: Presets,
    /** Mode of spawns that name none. */
    private readonly defaultMode: NetworkMode,
    /** Called whenever a sandbox's allowlist or ports change, to store them. */
    private readonly save: (id: string, record: NetworkRecord) => void,
    /** Called when a connection to a sandbox's published port opens; returns what to call when it closes. */
    private readonly onConnection: (id: string) => () => void = () => () => {},
    /** Whether allowlisted sandboxes use the package cache unless they say otherwise. */
    private readonly cacheDefault = false,
    /** Egress rules' needs: whether a secret exists, and the trust a guest with rules gets (guest/trust.ts). */
    private readonly egress: { secretExists: (name: string) => boolean; trust: (id: string, vm: Vm) => Promise<void> } = { secretExists: () => false, trust: async () => {} },
  ) {}

  /** Validates a spawn's network request (template values under it); throws a 400 naming the field. */
  plan(req: NetworkRequest, template?: { allow?: string[] | null }): NetworkRecord {
    const allow = req.allow ?? template?.allow ?? [];
    const mode = (req.mode ?? (allow.length ? "allowlist" : this.defaultMode)) as NetworkMode;
    if (!NETWORK_MODES.includes(mode)) throw badRequest(`network must be one of ${NETWORK_MODES.join(", ")}, got "${mode}"`);
    if (mode !== "allowlist" && req.allow?.length) throw badRequest(`allow needs network "allowlist" (network is "${mode}")`);
    this.parse(allow);
    if (req.cache && mode !== "allowlist") throw badRequest(`cache needs network "allowlist" (network is "${mode}"): the package cache is part of the egress proxy`);
    const ports = (req.ports ?? []).map((spec) => portSpec(spec, "ports"));
    const cache = mode === "allowlist" && (req.cache ?? this.cacheDefault);
    const rules = this.rules(req.rules, mode, allow, "egress_rules");
    return { mode, allow: mode === "allowlist" ? allow : [], ports, ...(cache ? { cache: true } : {}), ...(rules ? { rules } : {}) };
  }

  /** Egress rules checked against the mode, the allowlist and the secrets there are; null when there are none. */
  private rules(raw: unknown, mode: NetworkMode, allow: string[], field: string): EgressRules | null {
    if (raw === undefined || raw === null) return null;
    let rules: EgressRules;
    try {
      rules = checkRules(raw, field);
    } catch (e) {
      if (e instanceof RuleError) throw badRequest(e.message);
      throw e;
    }
    if (!Object.keys(rules).length) return null;
    if (mode !== "allowlist") throw badRequest(`${field} needs network "allowlist" (network is "${mode}"): only the egress proxy can add headers`);
    const outside = outsideAllowlist(rules, this.parse(allow));
    if (outside.length) throw badRequest(`${field}: ${outside.join(", ")} is not on the sandbox's allowlist (rules grant no access; allow it too)`);
    for (const name of secretsNamed(rules)) {
      if (!this.egress.secretExists(name)) throw badRequest(`${field}: no secret "${name}" (add it with forgevm secret add ${name}, or POST /api/v1/secrets)`);
    }
    return rules;
  }

  /** The entries of `asked` that reach beyond `pinned` (both validated; a bad entry is a 400). */
  outside(asked: string[], pinned: string[]): string[] {
    return outside(this.parse(asked), this.parse(pinned));
  }

  /** The network mode of spawns that name none. */
  get defaultNetwork(): NetworkMode {
    return this.defaultMode;
  }

  private parse(allow: string[]) {
    try {
      return parseAllowlist(allow, this.presets);
    } catch (e) {
      if (e instanceof AllowlistError) throw badRequest(e.message);
      throw e;
    }
  }

  /**
   * Gives a started VM its network: the proxy listener in the guest and the published ports.
   * Returns the record with the ports really bound; a port already taken fails with 409.
   */
  async attach(id: string, vm: Vm, record: NetworkRecord): Promise<NetworkRecord> {
    const a: Attached = {
      record: { ...record, ports: [] },
      vm,
      ports: new PublishedPorts(
        () => vm.channel,
        () => this.onConnection(id),
      ),
      listener: null,
    };
    this.attached.set(id, a);
    try {
      if (record.mode === "allowlist") {
        this.proxy.setPolicy(id, this.parse(record.allow), !!record.cache);
        this.proxy.setRules(id, record.rules);
        a.record.rules = record.rules;
        if (record.rules) await this.egress.trust(id, vm);
        a.listener = listenForProxy(vm.channel, (duplex) => this.proxy.handle(id, duplex));
        await a.listener.listening;
      }
      for (const m of record.ports) a.record.ports.push(await this.publish(a, m));
    } catch (e) {
      await this.detach(id);
      throw e;
    }
    return a.record;
  }

  /** Takes a sandbox's network down (the sandbox is going away). */
  async detach(id: string): Promise<void> {
    const a = this.attached.get(id);
    if (!a) return;
    this.attached.delete(id);
    this.proxy.forget(id);
    a.listener?.close();
    await a.ports.close();
  }

  /** The network of a running sandbox. */
  get(id: string): NetworkRecord {
    return this.of(id).record;
  }

  /** Replaces a running sandbox's allowlist; the next proxy request is decided by the new one. */
  setAllow(id: string, allow: string[]): NetworkRecord {
    const a = this.of(id);
    if (a.record.mode !== "allowlist") throw conflict(`sandbox ${id} has network "${a.record.mode}"; an allowlist applies only to network "allowlist"`);
    return this.update(id, allow, this.rules(a.record.rules, "allowlist", allow, "allow"));
  }

  /**
   * Replaces a running sandbox's allowlist and egress rules (a field left out keeps its value);
   * effective on the next connection. A guest given rules for the first time gets the CA first.
   */
  async setEgress(id: string, change: EgressUpdate): Promise<NetworkRecord> {
    const a = this.of(id);
    if (a.record.mode !== "allowlist") throw conflict(`sandbox ${id} has network "${a.record.mode}"; an allowlist and egress rules apply only to network "allowlist"`);
    const allow = change.allow ?? a.record.allow;
    const rules = change.rules === undefined ? (a.record.rules ?? null) : change.rules;
    const checked = this.rules(rules, "allowlist", allow, "egress_rules");
    if (checked && !a.record.rules) await this.egress.trust(id, a.vm);
    return this.update(id, allow, checked);
  }

  /** Sets a checked allowlist and rules on the proxy and in the store. */
  private update(id: string, allow: string[], rules: EgressRules | null): NetworkRecord {
    const a = this.of(id);
    this.proxy.setPolicy(id, this.parse(allow));
    this.proxy.setRules(id, rules ?? undefined);
    const { rules: _old, ...rest } = a.record;
    a.record = { ...rest, allow: [...allow], ...(rules ? { rules } : {}) };
    this.save(id, a.record);
    return a.record;
  }

  /** Publishes one more port of a running sandbox. */
  async addPort(id: string, spec: string): Promise<PortMapping> {
    const a = this.of(id);
    const bound = await this.publish(a, portSpec(spec, "port"));
    a.record = { ...a.record, ports: [...a.record.ports, bound] };
    this.save(id, a.record);
    return bound;
  }

  /** Stops publishing a host port; 404 if it was not published. */
  async removePort(id: string, hostPort: number): Promise<void> {
    const a = this.of(id);
    if (!(await a.ports.remove(hostPort))) throw notFound(`sandbox ${id} does not publish host port ${hostPort}`);
    a.record = { ...a.record, ports: a.record.ports.filter((p) => p.host_port !== hostPort) };
    this.save(id, a.record);
  }

  /** The sandbox's last `lines` egress decisions. */
  egressLog(id: string, lines: number): Promise<EgressEntry[]> {
    return this.proxy.entries(id, lines);
  }

  private async publish(a: Attached, m: PortMapping): Promise<PortMapping> {
    try {
      return await a.ports.add(m);
    } catch (e) {
      if (e instanceof PortError) throw e.conflict ? conflict(`ports: ${e.message}`) : badRequest(`ports: ${e.message}`);
      throw e;
    }
  }

  private of(id: string): Attached {
    const a = this.attached.get(id);
    if (!a) throw sandboxGone(id, `sandbox ${id} is not running`);
    return a;
  }
}

/** A port spec parsed, or a 400 naming the field it came in. */
function portSpec(spec: string, field: string): PortMapping {
  try {
    return parsePortSpec(spec);
  } catch (e) {
    throw badRequest(`${field}: ${(e as Error).message}`);
  }
}

/** Listens on the guest's proxy port and hands each connection over as a duplex stream. */
function listenForProxy(channel: AgentChannel, onConnection: (d: ReturnType<typeof tunnelDuplex>) => void): GuestListener {
  return channel.listen({ addr: PROXY_ADDR, port: PROXY_PORT }, (conn) => {
    if (!channel.isOpen) return;
    onConnection(tunnelDuplex(channel.connect({ conn })));
  });
}
