// Egress allowlists: which destinations a sandbox's proxy requests may reach. Entries are
// hostnames ("pypi.org"), wildcards for subdomains ("*.github.com", never the bare domain),
// IP addresses or networks ("203.0.113.7", "198.51.100.0/24", "fd00::/8"), each with an optional
// ":port" (":*" for any), and presets ("@pypi") from presets.json or the operator's own file.
// An entry without a port allows 80 and 443 only.
import { readFileSync } from "node:fs";
import { isIP } from "node:net";
import { AddressSet } from "./addresses.js";
import builtInPresets from "./presets.json" with { type: "json" };

export const DEFAULT_PORTS = [80, 443];

export type Ports = number[] | "*";

export type Rule =
  | { kind: "host"; host: string; ports: Ports; entry: string }
  | { kind: "suffix"; suffix: string; ports: Ports; entry: string }
  | { kind: "net"; net: AddressSet; ports: Ports; entry: string };

export type Presets = Record<string, string[]>;

/** A bad allowlist entry; the message names it. */
export class AllowlistError extends Error {
  override name = "AllowlistError";
}

const LABEL = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;

/** The normal form of a hostname (lower case, no trailing dot), or null if it is not one. */
export function normalHost(host: string): string | null {
  const h = host.toLowerCase().replace(/\.$/, "");
  if (h.length === 0 || h.length > 253) return null;
  return h.split(".").every((l) => LABEL.test(l)) ? h : null;
}

/** Built-in presets, with the operator's file (a JSON object of name → entries) on top. */
export function loadPresets(extraFile?: string): Presets {
  const builtIn: Presets = builtInPresets;
  if (!extraFile) return builtIn;
  let extra: unknown;
  try {
    extra = JSON.parse(readFileSync(extraFile, "utf8"));
  } catch (e) {
    throw new AllowlistError(`egress presets file ${extraFile}: ${(e as Error).message}`);
  }
  if (typeof extra !== "object" || extra === null || Array.isArray(extra)) throw new AllowlistError(`egress presets file ${extraFile} must hold a JSON object`);
  const out: Presets = { ...builtIn };
  for (const [name, entries] of Object.entries(extra)) {
    if (!/^@[a-z0-9][a-z0-9_-]*$/.test(name)) throw new AllowlistError(`egress presets file ${extraFile}: preset names look like "@name", got "${name}"`);
    if (!Array.isArray(entries) || !entries.every((e) => typeof e === "string" && !e.startsWith("@"))) {
      throw new AllowlistError(`egress presets file ${extraFile}: ${name} must be a list of entries (no presets)`);
    }
    out[name] = entries;
  }
  return out;
}

function parsePort(s: string, entry: string): Ports {
  if (s === "*") return "*";
  const n = Number(s);
  if (!/^\d+$/.test(s) || n < 1 || n > 65535) throw new AllowlistError(`allow entry "${entry}": port must be 1-65535 or *`);
  return [n];
}

/** Parses allowlist entries (presets expanded); throws AllowlistError naming a bad one. */
export function parseAllowlist(entries: string[], presets: Presets): Rule[] {
  const rules: Rule[] = [];
  for (const raw of entries) {
    const entry = raw.trim();
    if (entry.startsWith("@")) {
      const expanded = presets[entry.toLowerCase()];
      if (!expanded) throw new AllowlistError(`allow entry "${entry}": unknown preset (known: ${Object.keys(presets).sort().join(", ")})`);
      rules.push(...parseAllowlist(expanded, presets).map((r) => ({ ...r, entry: `${entry} (${r.entry})` })));
      continue;
    }
    rules.push(parseEntry(entry));
  }
  return rules;
}

function parseEntry(entry: string): Rule {
  let target = entry;
  let ports: Ports = DEFAULT_PORTS;
  const bracket = /^\[([^\]]+)\](?::(.+))?$/.exec(entry);
  if (bracket) {
    target = bracket[1];
    if (bracket[2] !== undefined) ports = parsePort(bracket[2], entry);
  } else if ((entry.match(/:/g) ?? []).length === 1) {
    const i = entry.lastIndexOf(":");
    target = entry.slice(0, i);
    ports = parsePort(entry.slice(i + 1), entry);
  }
  const addr = target.split("/")[0];
  if (isIP(addr)) {
    const net = new AddressSet();
    try {
      net.add(target);
    } catch (e) {
      throw new AllowlistError(`allow entry "${entry}": ${(e as Error).message}`);
    }
    return { kind: "net", net, ports, entry };
  }
  if (target.startsWith("*.")) {
    const suffix = normalHost(target.slice(2));
    if (!suffix?.includes(".")) throw new AllowlistError(`allow entry "${entry}": a wildcard needs a domain with a dot, like *.example.com`);
    return { kind: "suffix", suffix, ports, entry };
  }
  const host = normalHost(target);
  if (!host) throw new AllowlistError(`allow entry "${entry}": not a hostname, *.domain, IP address or network`);
  return { kind: "host", host, ports, entry };
}

function portOk(ports: Ports, port: number): boolean {
  return ports === "*" || ports.includes(port);
}

/** The rule that lets a request for `host` (a normal hostname) on `port` through, or null. */
export function matchHost(rules: Rule[], host: string, port: number): Rule | null {
  for (const r of rules) {
    if (!portOk(r.ports, port)) continue;
    if (r.kind === "host" && r.host === host) return r;
    // "*.example.com" matches a.example.com and a.b.example.com, never example.com or
    // badexample.com: the match is on a whole label boundary.
    if (r.kind === "suffix" && host.endsWith(`.${r.suffix}`)) return r;
  }
  return null;
}

/** The rule that lets a request for the IP literal `ip` on `port` through, or null. */
export function matchAddress(rules: Rule[], ip: string, port: number): Rule | null {
  return rules.find((r) => r.kind === "net" && portOk(r.ports, port) && r.net.has(ip)) ?? null;
}

function portsWithin(asked: Ports, pinned: Ports): boolean {
  return pinned === "*" || (asked !== "*" && asked.every((p) => pinned.includes(p)));
}

/** Whether everything rule `a` lets through, some rule of `pinned` lets through too. */
function covered(a: Rule, pinned: Rule[]): boolean {
  return pinned.some((p) => {
    if (!portsWithin(a.ports, p.ports)) return false;
    if (a.kind === "host") return (p.kind === "host" && p.host === a.host) || (p.kind === "suffix" && a.host.endsWith(`.${p.suffix}`));
    if (a.kind === "suffix") return p.kind === "suffix" && (a.suffix === p.suffix || a.suffix.endsWith(`.${p.suffix}`));
    return p.kind === "net" && a.net.within(p.net);
  });
}

/** The entries of `asked` that reach somewhere `pinned` does not (an allowlist may only narrow another). */
export function outside(asked: Rule[], pinned: Rule[]): string[] {
  return [...new Set(asked.filter((a) => !covered(a, pinned)).map((a) => a.entry))];
}
