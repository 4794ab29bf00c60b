// Egress rules: headers the egress proxy adds to a sandbox's requests bound for a destination,
// with secrets named by placeholders that it fills in on the host. A rule is keyed by a hostname
// or a "*.domain" wildcard; an exact host wins over a wildcard, and the longest wildcard over a
// shorter one. A header value may hold placeholders, `{{NAME}}` or E2B's `${e2b.secrets.NAME}`,
// anywhere and several times; other text is sent as written. Rules grant no access: a rule's
// destination must also be on the sandbox's allowlist (core/network.ts checks it).
import { isIP } from "node:net";
import { type Rule, normalHost, outside, parseAllowlist } from "./allowlist.js";

/** A sandbox's rules: destination → header name → value (placeholders kept as written). */
export type EgressRules = Record<string, Record<string, string>>;

/** Limits, as E2B's server has them. */
export const RULE_LIMITS = { domains: 10, domain: 128, headers: 20, headerName: 64, headerValue: 2048, secretsPerDomain: 32 };

/** Headers a rule may not set: they frame the request, or belong to the hop to the proxy. */
const FRAMING = new Set([
  "host",
  "content-length",
  "transfer-encoding",
  "connection",
  "keep-alive",
  "te",
  "trailer",
  "upgrade",
  "expect",
  "proxy-connection",
  "proxy-authorization",
  "proxy-authenticate",
]);
const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
// Visible ASCII, space and tab; no CR, LF or other control characters.
const FIELD_VALUE = /^[\t\x20-\x7e\x80-\xff]*$/;
const SECRET_NAME = /^[A-Za-z0-9_-]{1,128}$/;

/** A bad rule; the message names the field. */
export class RuleError extends Error {
  override name = "RuleError";
}

type Part = { text: string } | { secret: string };

/** A header value split into text and the secrets it names; throws RuleError on a malformed placeholder. */
export function parseValue(value: string, field: string): Part[] {
  const parts: Part[] = [];
  let i = 0;
  let text = "";
  while (i < value.length) {
    const e2b = value.startsWith("${e2b.", i);
    const ours = value.startsWith("{{", i);
    if (!e2b && !ours) {
      text += value[i++];
      continue;
    }
    const close = e2b ? "}" : "}}";
    const end = value.indexOf(close, i);
    const inner = end < 0 ? null : value.slice(i + (e2b ? 2 : 2), end);
    if (inner === null || inner.includes("{") || inner.includes("$")) throw new RuleError(`${field}: a malformed secret placeholder (write {{NAME}} or \${e2b.secrets.NAME})`);
    let name = inner.trim();
    if (e2b) {
      if (name.startsWith("e2b.identity.")) throw new RuleError(`${field}: workload identity tokens (\${e2b.identity.…}) are not supported by this server`);
      if (!name.startsWith("e2b.secrets.")) throw new RuleError(`${field}: a malformed secret placeholder (write \${e2b.secrets.NAME})`);
      name = name.slice("e2b.secrets.".length);
    }
    if (!SECRET_NAME.test(name)) throw new RuleError(`${field}: "${name.slice(0, 130)}" is not a secret's name (1 to 128 letters, digits, "_" or "-")`);
    if (text) parts.push({ text });
    text = "";
    parts.push({ secret: name.toLowerCase() });
    i = end + close.length;
  }
  if (text) parts.push({ text });
  return parts;
}

/** The secrets a rule set names, lower-cased, each once. */
export function secretsNamed(rules: EgressRules): string[] {
  const names = new Set<string>();
  for (const [host, headers] of Object.entries(rules)) {
    for (const [h, v] of Object.entries(headers)) for (const p of parseValue(v, `${host}.${h}`)) if ("secret" in p) names.add(p.secret);
  }
  return [...names];
}

/** Checks rules in our shape ({host: {headers: {…}}}), returns them normalized; throws RuleError naming the field. */
export function checkRules(raw: unknown, field: string): EgressRules {
  if (raw === null || typeof raw !== "object" || Array.isArray(raw)) throw new RuleError(`${field} must be an object of destination → {headers}`);
  const out: EgressRules = {};
  const entries = Object.entries(raw as Record<string, unknown>);
  if (entries.length > RULE_LIMITS.domains) throw new RuleError(`${field}: at most ${RULE_LIMITS.domains} destinations`);
  for (const [rawHost, rule] of entries) {
    const host = ruleHost(rawHost, field);
    const f = `${field}.${host}`;
    if (rule === null || typeof rule !== "object" || Array.isArray(rule)) throw new RuleError(`${f} must be an object with "headers"`);
    const extra = Object.keys(rule).filter((k) => k !== "headers");
    if (extra.length) throw new RuleError(`${f}: unknown field "${extra[0]}" (a rule has headers only)`);
    out[host] = checkHeaders((rule as { headers?: unknown }).headers ?? {}, `${f}.headers`);
  }
  return out;
}

/** A rule's destination in normal form; throws RuleError when it is not a hostname or *.domain. */
export function ruleHost(raw: string, field: string): string {
  const wild = raw.startsWith("*.");
  if (raw.length > RULE_LIMITS.domain) throw new RuleError(`${field}: a destination is at most ${RULE_LIMITS.domain} characters`);
  const h = normalHost(wild ? raw.slice(2) : raw);
  if (!h || (wild && !h.includes("."))) throw new RuleError(`${field}: "${raw.slice(0, 130)}" is not a hostname or *.domain (a bare * is not allowed)`);
  // The proxy finds a request's rule by the name it is sent to (its TLS certificate is made for a
  // name): a request to an address would never meet the rule, so an address is refused, not kept.
  if (isIP(h.replace(/^\[|\]$/g, "")))
    throw new RuleError(`${field}: "${raw.slice(0, 130)}" is an IP address; rules apply to host names: use the name the sandbox sends its requests to`);
  return wild ? `*.${h}` : h;
}

/** Checks one rule's headers; throws RuleError naming the field. */
export function checkHeaders(raw: unknown, field: string): Record<string, string> {
  if (raw === null || typeof raw !== "object" || Array.isArray(raw)) throw new RuleError(`${field} must be an object of header name → value`);
  const entries = Object.entries(raw as Record<string, unknown>);
  if (entries.length > RULE_LIMITS.headers) throw new RuleError(`${field}: at most ${RULE_LIMITS.headers} headers`);
  const out: Record<string, string> = {};
  const secrets = new Set<string>();
  for (const [name, value] of entries) {
    if (!TOKEN.test(name) || name.length > RULE_LIMITS.headerName)
      throw new RuleError(`${field}: "${name.slice(0, 70)}" is not a header name (an HTTP token of at most ${RULE_LIMITS.headerName} characters)`);
    if (FRAMING.has(name.toLowerCase()) || name.toLowerCase().startsWith("proxy-"))
      throw new RuleError(`${field}.${name}: this header frames the request and cannot be set by a rule`);
    if (typeof value !== "string" || value.length > RULE_LIMITS.headerValue || !FIELD_VALUE.test(value))
      throw new RuleError(`${field}.${name} must be a header value of at most ${RULE_LIMITS.headerValue} characters, with no control characters`);
    for (const p of parseValue(value, `${field}.${name}`)) if ("secret" in p) secrets.add(p.secret);
    out[name] = value;
  }
  if (secrets.size > RULE_LIMITS.secretsPerDomain) throw new RuleError(`${field}: at most ${RULE_LIMITS.secretsPerDomain} secrets per destination`);
  return out;
}

/** The destinations of `rules` that `allow` (parsed allowlist) does not reach, whatever the port. */
export function outsideAllowlist(rules: EgressRules, allow: Rule[]): string[] {
  const asked = Object.keys(rules).map((h) => ({ ...parseAllowlist([h], {})[0], ports: [] as number[] }));
  return outside(asked, allow);
}

/** The headers for a request to `host` (normal form): the exact rule, else the longest matching wildcard. */
export function ruleFor(rules: EgressRules | undefined, host: string): { key: string; headers: Record<string, string> } | null {
  if (!rules) return null;
  if (rules[host]) return { key: host, headers: rules[host] };
  let best: string | null = null;
  for (const k of Object.keys(rules)) {
    if (k.startsWith("*.") && host.endsWith(k.slice(1)) && (!best || k.length > best.length)) best = k;
  }
  return best ? { key: best, headers: rules[best] } : null;
}

/** A header value with its placeholders filled in; throws RuleError naming a secret that does not exist. */
export async function render(value: string, resolve: (name: string) => Promise<string | undefined>): Promise<string> {
  let out = "";
  for (const p of parseValue(value, "header")) {
    if ("text" in p) out += p.text;
    else {
      const v = await resolve(p.secret);
      if (v === undefined) throw new RuleError(`the secret "${p.secret}" a rule names does not exist`);
      out += v;
    }
  }
  // A value with a line break would end the header and start another: never sent.
  if (!FIELD_VALUE.test(out)) throw new RuleError("a secret a rule names holds a control character, which a header cannot carry");
  return out;
}
