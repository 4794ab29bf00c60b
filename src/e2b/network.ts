// E2B's network configuration as ours: `allowOut`/`denyOut`/`allow_internet_access` as a network
// mode and allowlist, and `rules` (`{domain: [{transform: {headers}}]}`, at most one transform per
// domain, as E2B's server allows) as our egress rules; and back again for getInfo.
import type { NetworkRecord } from "../core/types.js";
import { badRequest } from "../http/errors.js";

/** Everything-denied as E2B writes it (denyOut entries that close all egress). */
export const DENY_ALL = new Set(["0.0.0.0/0", "::/0", "*"]);

export interface E2bNetwork {
  allowOut?: string[];
  denyOut?: string[];
  rules?: unknown;
  [k: string]: unknown;
}

/**
 * E2B's network and identity fields this server does not implement yet, each refused by name with
 * a 400 (never ignored: a caller who asked for a tunnel or a token must not get traffic without
 * it). `allowPublicTraffic: true` is what a server without a port proxy does anyway.
 */
export function refuseUnsupported(b: Record<string, unknown>, network: Record<string, unknown> | undefined, where: string): void {
  if (b.iam !== undefined) throw badRequest("iam: workload identity tokens are not supported by this server");
  if (!network) return;
  for (const field of ["egressProxy", "maskRequestHost", "httpsPorts"]) {
    if (network[field] !== undefined) throw badRequest(`${where}${field} is not supported by this server yet`);
  }
  if (network.allowPublicTraffic === false) throw badRequest(`${where}allowPublicTraffic: false (a traffic access token on sandbox ports) is not supported by this server yet`);
}

/** E2B's `rules` in our shape ({host: {headers}}); a 400 naming the field when it is not E2B's shape. */
export function rulesOf(raw: unknown, field: string): Record<string, { headers: Record<string, string> }> | undefined {
  if (raw === undefined || raw === null) return undefined;
  if (typeof raw !== "object" || Array.isArray(raw)) throw badRequest(`${field} must be an object of domain → [rule]`);
  const out: Record<string, { headers: Record<string, string> }> = {};
  for (const [domain, list] of Object.entries(raw as Record<string, unknown>)) {
    if (!Array.isArray(list)) throw badRequest(`${field}.${domain} must be a list of rules`);
    if (list.length > 1) throw badRequest(`${field}.${domain}: at most 1 transform per domain`);
    const rule = (list[0] ?? {}) as { transform?: { headers?: unknown } };
    if (typeof rule !== "object" || rule === null) throw badRequest(`${field}.${domain}[0] must be an object`);
    const headers = rule.transform?.headers ?? {};
    out[domain] = { headers: headers as Record<string, string> };
  }
  return out;
}

/** Our egress rules in E2B's shape, placeholders as they were written. */
export function rulesView(rules: NetworkRecord["rules"]): Record<string, { transform: { headers: Record<string, string> } }[]> | undefined {
  if (!rules) return undefined;
  return Object.fromEntries(Object.entries(rules).map(([host, headers]) => [host, [{ transform: { headers } }]]));
}

/** E2B's network fields as our network mode, allowlist and egress rules. */
export function networkOf(
  net: E2bNetwork | undefined,
  allowInternet: boolean | undefined,
): { network?: string; allow?: string[]; egressRules?: Record<string, { headers: Record<string, string> }> } {
  const allowOut = net?.allowOut ?? [];
  const denyOut = net?.denyOut ?? [];
  const denyAll = denyOut.some((d) => DENY_ALL.has(d));
  const egressRules = rulesOf(net?.rules, "network.rules");
  if (denyOut.length && !denyAll) throw badRequest("network.denyOut: only a deny-all entry (0.0.0.0/0) is supported; list what the sandbox may reach in network.allowOut");
  if (allowInternet === false) {
    if (allowOut.length) throw badRequest("network.allowOut needs allow_internet_access");
    if (egressRules) throw badRequest("network.rules: rules grant no access; list their domains in network.allowOut (with denyOut 0.0.0.0/0)");
    return { network: "none" };
  }
  if (allowOut.length || denyAll) return { network: "allowlist", allow: allowOut, ...(egressRules ? { egressRules } : {}) };
  if (egressRules) throw badRequest('network.rules: rules grant no access; list their domains in network.allowOut, with denyOut ["0.0.0.0/0"]');
  if (allowInternet === true) return { network: "full" };
  return {};
}
