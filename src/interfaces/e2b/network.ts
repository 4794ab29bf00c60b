// E2B's network configuration as ours, at create and in updateNetwork, and back for getInfo.
// E2B: `allowOut` entries (IPs, CIDRs, domains) always win over `denyOut` entries (IPs and CIDRs
// only); with a deny-all (`0.0.0.0/0`) only `allowOut` is reachable, which is our strict allowlist;
// with narrower `denyOut` ranges everything else stays reachable, which is our allowlist mode
// with a deny list (open egress through the proxy); `allow_internet_access: false` is a deny-all.
// `rules` (`{domain: [{transform: {headers}}]}`, one transform per domain) become our egress
// rules, which only the proxy can apply. updateNetwork replaces the whole configuration: what it
// leaves out is cleared, so `{}` is unrestricted egress.
import { isIP } from "node:net";
import type { EgressUpdate } from "../../core/network.js";
import type { NetworkRecord } from "../../core/types.js";
import { badRequest } from "../../http/errors.js";

/** Everything-denied as E2B writes it (denyOut entries that close all egress). */
export const DENY_ALL = new Set(["0.0.0.0/0", "::/0", "*"]);

export interface E2bNetwork {
  allowOut?: string[];
  denyOut?: string[];
  rules?: unknown;
  [k: string]: unknown;
}

type Rules = Record<string, { headers: Record<string, string> }>;

/**
 * E2B's network and identity fields this server does not implement, each refused by name with a
 * 400 (never ignored: a caller who asked for a tunnel or a token must not get traffic without it).
 */
export function refuseUnsupported(b: Record<string, unknown>, network: Record<string, unknown> | undefined, where: string): void {
  if (b.iam !== undefined) throw badRequest("iam: workload identity tokens are not supported by this server");
  if (!network) return;
  if (network.egressProxy !== undefined)
    throw badRequest(`${where}egressProxy is not supported by this server: a sandbox's egress leaves through this host's own proxy, never through a SOCKS5 upstream`);
  if (network.httpsPorts !== undefined) throw badRequest(`${where}httpsPorts is not supported by this server: its port traffic is plain HTTP`);
}

/** `allowPublicTraffic` and `maskRequestHost` (create only) as our port access settings. */
export function portAccessOf(net: Record<string, unknown> | undefined): { private?: boolean; maskHost?: string } | undefined {
  if (!net) return undefined;
  const pub = net.allowPublicTraffic;
  const mask = net.maskRequestHost;
  if (pub !== undefined && typeof pub !== "boolean") throw badRequest("network.allowPublicTraffic must be a boolean");
  if (mask !== undefined && (typeof mask !== "string" || !mask)) throw badRequest("network.maskRequestHost must be a host[:port]");
  if (pub !== false && mask === undefined) return undefined;
  return { ...(pub === false ? { private: true } : {}), ...(mask ? { maskHost: mask as string } : {}) };
}

/** E2B's `rules` in our shape ({host: {headers}}); a 400 naming the field when it is not E2B's shape. */
export function rulesOf(raw: unknown, field: string): Rules | undefined {
  if (raw === undefined || raw === null) return undefined;
  if (typeof raw !== "object" || Array.isArray(raw)) throw badRequest(`${field} must be an object of domain → [rule]`);
  const out: Rules = {};
  for (const [domain, list] of Object.entries(raw as Record<string, unknown>)) {
    if (!Array.isArray(list)) throw badRequest(`${field}.${domain} must be a list of rules`);
    if (list.length > 1) throw badRequest(`${field}.${domain}: at most 1 transform per domain`);
    const rule = list[0] ?? {};
    if (typeof rule !== "object" || rule === null || Array.isArray(rule)) throw badRequest(`${field}.${domain}[0] must be an object`);
    const transform = (rule as { transform?: unknown }).transform ?? {};
    if (typeof transform !== "object" || transform === null || Array.isArray(transform)) throw badRequest(`${field}.${domain}[0].transform must be an object`);
    out[domain] = { headers: ((transform as { headers?: unknown }).headers ?? {}) as Record<string, string> };
  }
  return out;
}

/** Our egress rules in E2B's shape, placeholders as they were written. */
export function rulesView(rules: NetworkRecord["rules"]): Record<string, { transform: { headers: Record<string, string> } }[]> | undefined {
  if (!rules) return undefined;
  return Object.fromEntries(Object.entries(rules).map(([host, headers]) => [host, [{ transform: { headers } }]]));
}

/** Whether an entry is an address or network (E2B's IP or CIDR), not a name. */
function isAddress(e: string): boolean {
  return isIP(e.split("/")[0]) !== 0;
}

/** An allowOut entry as our allowlist's: an address or network on every port, as E2B lets it through. */
function allowEntry(e: string): string {
  if (!isAddress(e)) return e;
  return isIP(e.split("/")[0]) === 6 ? `[${e}]:*` : `${e}:*`;
}

/** Our allowlist entry as E2B wrote it. */
function allowOutEntry(e: string): string {
  const m = /^\[(.+)\]:\*$/.exec(e) ?? /^([^:]+):\*$/.exec(e);
  return m && isAddress(m[1]) ? m[1] : e;
}

/** The egress an E2B configuration asks for, or null for none in particular (unrestricted). */
function egressOf(net: E2bNetwork | undefined, allowInternet: boolean | undefined, where: string): EgressUpdate | null {
  const allowOut = net?.allowOut ?? [];
  const denyOut = net?.denyOut ?? [];
  if (!Array.isArray(allowOut) || allowOut.some((e) => typeof e !== "string")) throw badRequest(`${where}allowOut must be a list of strings`);
  if (!Array.isArray(denyOut) || denyOut.some((e) => typeof e !== "string")) throw badRequest(`${where}denyOut must be a list of strings`);
  const named = denyOut.find((d) => !DENY_ALL.has(d) && !isAddress(d));
  if (named !== undefined) throw badRequest(`${where}denyOut: "${named.slice(0, 100)}" is not an IP address or CIDR range (only addresses can be denied)`);
  const rules = rulesOf(net?.rules, `${where}rules`);
  const denyAll = allowInternet === false || denyOut.some((d) => DENY_ALL.has(d));
  const domain = allowOut.find((e) => !isAddress(e));
  if (domain !== undefined && !denyAll)
    throw badRequest(`${where}allowOut: when specifying allowed domains in allow out, you must include 'ALL_TRAFFIC' in deny out to block all other traffic`);
  if (denyAll) return { mode: "allowlist", allow: allowOut.map(allowEntry), deny: null, rules: rules ?? null };
  if (denyOut.length || rules) return { mode: "allowlist", allow: allowOut.map(allowEntry), deny: [...denyOut], rules: rules ?? null };
  // allowOut without denyOut restricts nothing, as in E2B.
  return null;
}

/** E2B's network fields at create as our spawn options. */
export function networkOf(net: E2bNetwork | undefined, allowInternet: boolean | undefined): { network?: string; allow?: string[]; deny?: string[]; egressRules?: Rules } {
  const e = egressOf(net, allowInternet, "network.");
  if (!e) return allowInternet === true ? { network: "full" } : {};
  // Nothing allowed at all, and no rules: the sandbox needs no way out.
  if (e.deny === null && !e.allow?.length && !e.rules) return { network: "none" };
  return { network: "allowlist", allow: e.allow, ...(e.deny ? { deny: e.deny as string[] } : {}), ...(e.rules ? { egressRules: e.rules as Rules } : {}) };
}

/**
 * updateNetwork's body as the whole egress configuration: unrestricted when nothing restricts it
 * (the network device's own egress where the VM has one, else open egress through the proxy).
 */
export function networkUpdateOf(body: E2bNetwork & { allow_internet_access?: unknown }, hasNic: boolean): EgressUpdate {
  const allowInternet = body.allow_internet_access;
  if (allowInternet !== undefined && typeof allowInternet !== "boolean") throw badRequest("allow_internet_access must be a boolean");
  const e = egressOf(body, allowInternet, "");
  if (e) return e;
  return hasNic ? { mode: "full", allow: [], deny: null, rules: null } : { mode: "allowlist", allow: [], deny: [], rules: null };
}

/** A sandbox's network in E2B's shape (getInfo), or undefined where E2B shows none (unrestricted). */
export function networkView(net: NetworkRecord | null | undefined): Record<string, unknown> | undefined {
  if (!net) return undefined;
  const out: Record<string, unknown> = {};
  if (net.mode === "allowlist") {
    if (net.allow.length) out.allowOut = net.allow.map(allowOutEntry);
    if (!net.deny) out.denyOut = ["0.0.0.0/0"];
    else if (net.deny.length) out.denyOut = [...net.deny];
    if (net.rules) out.rules = rulesView(net.rules);
  }
  if (net.private_ports) out.allowPublicTraffic = false;
  if (net.mask_host) out.maskRequestHost = net.mask_host;
  return Object.keys(out).length ? out : undefined;
}
