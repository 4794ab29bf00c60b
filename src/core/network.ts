// Sandbox networking. `none` has only loopback; `allowlist` adds one way out, a listener on the
// guest's 127.0.0.1:3128 whose connections the agent hands to the host's egress proxy, tagged
// with the sandbox they came from; published ports go the other way through the same channel.
// `full` is the exception: a network device on QEMU's user-mode network, whose VMM the host
// firewall keeps off the host and private networks (providers/qemu/firewall.ts). Every rule
// about what is reachable is enforced on the host, where the guest cannot change it.
import type { Duplex } from "node:stream";
import type { GuestListener } from "../agent-client/index.js";
import type { Guest } from "../providers/guest.js";
import type { Vm } from "../providers/provider.js";
import { AllowlistError, matchHost, outside, parseAllowlist, type Presets } from "../net/allowlist.js";
import type { EgressProxy } from "../net/egress-proxy.js";
import type { EgressEntry } from "../net/egress-log.js";
import { PortError, PublishedPorts, parsePortSpec, type PortMapping } from "../net/ports.js";
import { checkRules, type EgressRules, outsideAllowlist, RuleError } from "../net/egress-rules.js";
import { tunnelDuplex } from "../net/tunnel.js";
import { AddressSet } from "../net/addresses.js";
import { trustEnv } from "./guest/trust.js";
import type { NetworkRecord } from "../store/sandboxes.js";
import { badRequest, conflict, notFound, sandboxGone } from "../http/errors.js";
import { GUEST_PROXY_ADDR, GUEST_PROXY_PORT } from "../schemas/guest-egress.js";

export type NetworkMode = NetworkRecord["mode"];
export const NETWORK_MODES: NetworkMode[] = ["none", "allowlist", "full"];

/** No network: what a sandbox that asked for none has, and what a row without one means. */
export const NO_NETWORK: NetworkRecord = { mode: "none", allow: [], ports: [] };

/** Environment that points HTTP clients in the guest at the egress proxy. */
export function proxyEnv(): Record<string, string> {
  const url = `http://${GUEST_PROXY_ADDR}:${GUEST_PROXY_PORT}`;
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
  /** Allowlist mode: open egress but for these addresses and networks (NetworkRecord.deny). */
  deny?: string[] | null;
  /** Port traffic served by Host: whether it needs the traffic token, and the Host the guest sees. */
  portAccess?: { private?: boolean; maskHost?: string };
}

/** What a running sandbox's egress may be changed to; a field left out keeps its value. */
export interface EgressUpdate {
  /** "full" only for a VM made with a network device; "none" and "allowlist" for any. */
  mode?: NetworkMode;
  allow?: string[];
  /** null: only the allowlist; a list: open egress but for these. */
  deny?: string[] | null;
  /** Our shape; null or {} clears them. */
  rules?: unknown;
}

/** What a sandbox's network needs of the rest of the core. */
export interface NetworkHooks {
  /** Puts the egress CA in the guest's trust stores (guest/trust.ts). */
  trust: (id: string, vm: Vm) => Promise<void>;
  /** Gives a running sandbox's later execs this network environment (the proxy's address, the CA's files). */
  env: (id: string, env: Record<string, string>) => void;
}

/** Whether a sandbox's VM has a network device (made with network "full", whatever its mode now). */
export function hasNic(r: Pick<NetworkRecord, "mode" | "nic"> | null | undefined): boolean {
  return r?.mode === "full" || !!r?.nic;
}

/** The environment every exec of a sandbox with this network gets under its own. */
export function networkEnv(r: NetworkRecord | null | undefined): Record<string, string> {
  return r?.mode === "allowlist" ? { ...proxyEnv(), ...(r.rules ? trustEnv() : {}) } : {};
}

/** What a masked Host header writes for the port the traffic is for (E2B's syntax). */
// biome-ignore lint/suspicious/noTemplateCurlyInString: E2B's placeholder, literal text
export const PORT_PLACEHOLDER = "${PORT}";

/** A Host header value with an optional port placeholder, or a 400 naming the field. */
function checkMaskHost(h: string): string {
  const filled = h.replaceAll(PORT_PLACEHOLDER, "1");
  if (filled.length > 255 || !/^[A-Za-z0-9.-]+(:\d{1,5})?$|^\[[0-9a-fA-F:]+\](:\d{1,5})?$/.test(filled))
    throw badRequest(`maskRequestHost: "${h.slice(0, 100)}" is not a host[:port] (\${PORT} stands for the port)`);
  return h;
}

/** A deny list of addresses and networks (no names: what a name resolves to is what is denied); a 400 naming `field`. */
function checkDeny(deny: unknown, field: string): string[] {
  if (!Array.isArray(deny)) throw badRequest(`${field} must be a list of IP addresses or CIDR networks`);
  if (deny.length > 500) throw badRequest(`${field}: at most 500 entries`);
  const set = new AddressSet();
  for (const d of deny) {
    try {
      if (typeof d !== "string") throw new RangeError("not a string");
      set.add(d);
    } catch {
      throw badRequest(`${field}: "${String(d).slice(0, 100)}" is not an IP address or CIDR network (a name cannot be denied: deny its addresses)`);
    }
  }
  return deny as string[];
}

interface Attached {
  id: string;
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
    private readonly hooks: NetworkHooks = { trust: async () => {}, env: () => {} },
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
    if (req.deny != null && mode !== "allowlist") throw badRequest(`deny needs network "allowlist" (network is "${mode}"): only the egress proxy can deny some destinations`);
    const deny = req.deny != null ? checkDeny(req.deny, "deny") : null;
    const rules = this.rules(req.rules, mode, allow, deny, "egress_rules");
    return {
      mode,
      allow: mode === "allowlist" ? allow : [],
      ports,
      ...(cache ? { cache: true } : {}),
      ...(rules ? { rules } : {}),
      ...(deny ? { deny } : {}),
      ...(mode === "full" ? { nic: true } : {}),
      ...(req.portAccess?.private ? { private_ports: true } : {}),
      ...(req.portAccess?.maskHost ? { mask_host: checkMaskHost(req.portAccess.maskHost) } : {}),
    };
  }

  /** Checks egress rules' shape, a 400 naming `field` (for interfaces that name it otherwise). */
  checkRules(raw: unknown, field: string): void {
    this.rules(raw, "allowlist", [], [], field);
  }

  /** Egress rules checked against the mode and the allowlist (unless egress is open); null when there are none. */
  private rules(raw: unknown, mode: NetworkMode, allow: string[], deny: string[] | null, field: string): EgressRules | null {
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
    const outside = deny ? [] : outsideAllowlist(rules, this.parse(allow));
    if (outside.length) throw badRequest(`${field}: ${outside.join(", ")} is not on the sandbox's allowlist (rules grant no access; allow it too)`);
    // A secret a rule names need not exist yet (as on E2B): the proxy resolves it at each request,
    // and refuses one whose secret is missing with a 502 and a line in the egress log, sending nothing.
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

  /** Gives a started VM its network (proxy listener, published ports); the record with the ports bound, a taken one a 409. */
  async attach(id: string, vm: Vm, record: NetworkRecord): Promise<NetworkRecord> {
    const a: Attached = {
      id,
      record: { ...record, ports: [] },
      vm,
      ports: new PublishedPorts(
        () => vm.guest,
        () => this.onConnection(id),
      ),
      listener: null,
    };
    this.attached.set(id, a);
    try {
      if (record.mode === "allowlist") {
        this.proxy.setPolicy(id, this.parse(record.allow), !!record.cache, record.deny);
        this.proxy.setRules(id, record.rules);
        if (record.rules) await this.hooks.trust(id, vm);
        await this.listen(a);
      }
      // A restored VM's device comes back up: a sandbox whose egress was narrowed since gets it cut again.
      if (hasNic(record) && record.mode !== "full") await this.setLink(a, false);
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

  /** Whether a running sandbox's egress lets it reach `host` (a name) on `port`: git credential forwarding asks. */
  allowsHost(id: string, host: string, port: number): boolean {
    const r = this.attached.get(id)?.record;
    if (!r || r.mode === "none") return false;
    if (r.mode === "full" || r.deny) return true;
    return matchHost(this.parse(r.allow), host, port) !== null;
  }

  /** The network of a running sandbox. */
  get(id: string): NetworkRecord {
    return this.of(id).record;
  }

  /** Replaces a running sandbox's allowlist; the next proxy request is decided by the new one. */
  async setAllow(id: string, allow: string[]): Promise<NetworkRecord> {
    const a = this.of(id);
    if (a.record.mode !== "allowlist") throw conflict(`sandbox ${id} has network "${a.record.mode}"; an allowlist applies only to network "allowlist"`);
    return this.setEgress(id, { allow });
  }

  /**
   * Changes a running sandbox's egress (a field left out keeps its value), effective on its next
   * connection: its mode ("none" and "allowlist" for any VM, since both go through the agent;
   * "full" only for a VM with a network device, whose link is cut while the mode is another),
   * allowlist, deny list and rules. A guest given rules for the first time gets the CA first.
   */
  async setEgress(id: string, change: EgressUpdate): Promise<NetworkRecord> {
    const a = this.of(id);
    const mode = change.mode ?? a.record.mode;
    if (!NETWORK_MODES.includes(mode)) throw badRequest(`mode must be one of ${NETWORK_MODES.join(", ")}, got "${mode}"`);
    if (mode === "full" && !hasNic(a.record))
      throw conflict(
        `sandbox ${id} was made without a network device, which network "full" needs from boot; use network "allowlist" with an empty deny list for open egress through the proxy`,
      );
    if (mode !== "allowlist" && (change.allow?.length || change.deny != null || (change.rules != null && Object.keys(change.rules).length)))
      throw badRequest(`allow, deny and egress_rules need network "allowlist" (network would be "${mode}")`);
    const allow = mode === "allowlist" ? (change.allow ?? a.record.allow) : [];
    this.parse(allow);
    const denyAsked = change.deny !== undefined ? change.deny : (a.record.deny ?? null);
    const deny = mode === "allowlist" && denyAsked != null ? checkDeny(denyAsked, "deny") : null;
    const rules = mode === "allowlist" ? this.rules(change.rules === undefined ? (a.record.rules ?? null) : change.rules, mode, allow, deny, "egress_rules") : null;
    if (rules && !a.record.rules) await this.hooks.trust(id, a.vm);
    if (mode === "allowlist") {
      this.proxy.setPolicy(id, this.parse(allow), !!a.record.cache, deny);
      this.proxy.setRules(id, rules ?? undefined);
      await this.listen(a);
    } else {
      this.proxy.forget(id);
      a.listener?.close();
      a.listener = null;
    }
    if (hasNic(a.record)) await this.setLink(a, mode === "full");
    const { rules: _r, deny: _d, cache, ...rest } = a.record;
    a.record = {
      ...rest,
      mode,
      allow: [...allow],
      ...(mode === "allowlist" && cache ? { cache } : {}),
      ...(rules ? { rules } : {}),
      ...(deny ? { deny: [...deny] } : {}),
      ...(hasNic(a.record) ? { nic: true } : {}),
    };
    this.hooks.env(id, networkEnv(a.record));
    this.save(id, a.record);
    return a.record;
  }

  /** Starts the guest's proxy listener, unless it runs. */
  private async listen(a: Attached): Promise<void> {
    if (a.listener) return;
    const id = a.id;
    a.listener = listenForProxy(a.vm.guest, (duplex) => this.proxy.handle(id, duplex));
    await a.listener.listening;
  }

  private async setLink(a: Attached, up: boolean): Promise<void> {
    if (!a.vm.setLink) throw conflict(`sandbox ${a.id}: its provider cannot cut its network device, so its egress cannot be narrowed while it runs`);
    await a.vm.setLink(up);
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

  /** A connection to a port in a running sandbox through its agent (traffic for its idle policy); null when nothing listens. */
  async openPort(id: string, port: number): Promise<Duplex | null> {
    const a = this.of(id);
    if (!Number.isInteger(port) || port < 1 || port > 65535) throw badRequest(`port must be 1-65535, got ${port}`);
    if (!a.vm.guest.isOpen) throw sandboxGone(id, `sandbox ${id} is not running`);
    const t = a.vm.guest.connect({ addr: "127.0.0.1", port });
    const closed = this.onConnection(id);
    const d = tunnelDuplex(t);
    d.once("close", closed);
    try {
      await t.connected;
    } catch {
      d.destroy();
      return null;
    }
    return d;
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
function listenForProxy(guest: Guest, onConnection: (d: ReturnType<typeof tunnelDuplex>) => void): GuestListener {
  return guest.listen({ addr: GUEST_PROXY_ADDR, port: GUEST_PROXY_PORT }, (conn) => {
    if (!guest.isOpen) return;
    onConnection(tunnelDuplex(guest.connect({ conn })));
  });
}
