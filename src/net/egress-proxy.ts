// Past 400 lines because forward requests and CONNECT tunnels share one check, connect and log path.
// The egress proxy: the only way out of an `allowlist` sandbox. Each client connection arrives
// through one sandbox's agent channel, so the caller names the sandbox (the guest cannot forge
// it). Speaks HTTP/1.x forward proxying (absolute-form requests) and CONNECT tunnels; resolves
// names on the host, re-checks every resolved address against the blocked ranges (so DNS cannot
// smuggle a private address through), connects to the address it checked, and logs every
// decision as one JSON line per sandbox. Package files fetched over plain HTTP by sandboxes that
// use the package cache are answered from it, or fetched once and kept (package-cache.ts).
// Past 400 lines because every way a request leaves (refused, passed through, intercepted for
// egress rules, answered from the cache) is decided in this one place, where the checks can be read
// side by side; the TLS interception and the cache themselves live in their own modules.
import { lookup } from "node:dns/promises";
import { createReadStream } from "node:fs";
import { request as httpRequest } from "node:http";
import { connect, isIP, type Socket } from "node:net";
import type { Duplex } from "node:stream";
import { AddressSet, blockedAddresses } from "./addresses.js";
import { matchAddress, matchHost, normalHost, type Rule } from "./allowlist.js";
import { EgressLog, type EgressEntry } from "./egress-log.js";
import type { EgressCa } from "./egress-ca.js";
import { type EgressRules, render, ruleFor } from "./egress-rules.js";
import { readHead, reply } from "./http-head.js";
import { whenConnected } from "./connected.js";
import { hostHeaderIs, interceptTls, rewriteHead, trustStore } from "./intercept.js";
import { cacheable, storable, type PackageCache } from "./package-cache.js";

const CONNECT_TIMEOUT_MS = 10_000;

export interface EgressProxyOptions {
  /** Told of every decision (for counters). */
  onDecision?: (decision: "allow" | "deny") => void;
  /** Directory of the per-sandbox decision logs. */
  logDir: string;
  /** Networks the operator lets guests reach although they are private or the host's own. */
  allowPrivate?: string[];
  /**
   * Names resolved to these addresses instead of through DNS, and trusted as if the operator had
   * allowed them (network.hosts; in tests, a local server standing in for a public host).
   */
  hostsOverride?: Record<string, string>;
  /** Resolver (default: the system's, via getaddrinfo). */
  resolve?: (host: string) => Promise<string[]>;
  /** The package cache, for sandboxes whose policy asks for it. */
  cache?: PackageCache;
  /** The egress CA, for HTTPS destinations with egress rules. */
  ca?: EgressCa;
  /** The value of a secret a rule names (undefined: there is none). */
  secret?: (name: string) => Promise<string | undefined>;
  /** Extra CAs (PEM) the proxy trusts for upstreams it reads requests to: the operator's private ones. */
  upstreamCa?: string;
}

interface Target {
  method: string;
  host: string; // normal hostname or IP literal
  port: number;
  /** Forward requests: the head to send upstream, rewritten to origin form. */
  head?: Buffer;
  /** Forward requests: the URL and the headers (lower-case names) sent on. */
  url?: URL;
  headers?: Map<string, string>;
  /** Forward requests: the header lines as they came (hop headers dropped). */
  lines?: string[];
}

/** A sandbox's egress policy: its allowlist, and with `deny`, open egress but for those addresses. */
interface Policy {
  allow: Rule[];
  deny: AddressSet | null;
}

/** The rule open egress lets a destination through by. */
const OPEN: Rule = { kind: "suffix", suffix: "", ports: "*", entry: "* (open egress)" };

/** Refused before any upstream connection: `status` goes back to the client. */
class Refusal extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

export class EgressProxy {
  private readonly policies = new Map<string, Policy>();
  private readonly blocked = blockedAddresses();
  private readonly operatorAllowed = new AddressSet();
  private readonly log: EgressLog;
  private readonly resolve: (host: string) => Promise<string[]>;
  private readonly clients = new Set<Duplex>();
  private readonly caching = new Set<string>();
  private readonly rules = new Map<string, EgressRules>();

  private readonly trust: string[];

  constructor(private readonly opts: EgressProxyOptions) {
    this.trust = trustStore(opts.upstreamCa);
    for (const cidr of opts.allowPrivate ?? []) this.operatorAllowed.add(cidr);
    this.log = new EgressLog(opts.logDir);
    this.resolve = opts.resolve ?? (async (host) => (await lookup(host, { all: true, verbatim: true })).map((a) => a.address));
  }

  /**
   * Sets (or replaces, effective on the next request) a sandbox's parsed allowlist and whether it
   * uses the package cache. With `deny` (addresses and networks), what the allowlist does not
   * name is let through unless it is in `deny`: open egress with exceptions.
   */
  setPolicy(sandboxId: string, rules: Rule[], cache?: boolean, deny?: string[] | null): void {
    let denied: AddressSet | null = null;
    if (deny) {
      denied = new AddressSet();
      for (const d of deny) denied.add(d);
    }
    this.policies.set(sandboxId, { allow: rules, deny: denied });
    if (cache !== undefined) {
      if (cache && this.opts.cache) this.caching.add(sandboxId);
      else this.caching.delete(sandboxId);
    }
  }

  /** Sets (or with none, clears) a sandbox's egress rules, effective on its next connection. */
  setRules(sandboxId: string, rules: EgressRules | undefined): void {
    if (rules && Object.keys(rules).length) this.rules.set(sandboxId, rules);
    else this.rules.delete(sandboxId);
  }

  /** Forgets a sandbox: later connections from it are refused. Its log stays until removeLog. */
  forget(sandboxId: string): void {
    this.policies.delete(sandboxId);
    this.rules.delete(sandboxId);
    this.caching.delete(sandboxId);
  }

  /** The last `lines` decisions for a sandbox, oldest first. */
  entries(sandboxId: string, lines: number): Promise<EgressEntry[]> {
    return this.log.tail(sandboxId, lines);
  }

  /** Deletes a sandbox's decision log. */
  removeLog(sandboxId: string): Promise<void> {
    return this.log.remove(sandboxId);
  }

  /** Serves one client connection that came from `sandboxId`'s guest. */
  handle(sandboxId: string, client: Duplex): void {
    this.clients.add(client);
    client.on("close", () => this.clients.delete(client));
    client.on("error", () => client.destroy());
    void this.serve(sandboxId, client).catch(() => client.destroy());
  }

  /** Ends every client connection (server shutdown). */
  close(): void {
    for (const c of this.clients) c.destroy();
    this.log.close();
  }

  private async serve(sandboxId: string, client: Duplex): Promise<void> {
    const got = await readHead(client);
    if (!got) return void client.destroy();
    const { head, rest } = got;
    let target: Target;
    try {
      target = parseRequest(head);
    } catch (e) {
      const r = e as Refusal;
      this.record(sandboxId, { method: "?", host: "", port: 0, decision: "deny", reason: r.message });
      return reply(client, r.status ?? 400, r.message);
    }
    let address: string;
    let rule: Rule;
    try {
      ({ address, rule } = await this.decide(sandboxId, target));
    } catch (e) {
      if (!(e instanceof Refusal)) throw e;
      this.record(sandboxId, { method: target.method, host: target.host, port: target.port, decision: "deny", reason: e.message });
      return reply(client, e.status, e.message);
    }
    const base = { method: target.method, host: target.host, port: target.port, address, rule: rule.entry };
    const injecting = isIP(target.host) ? null : ruleFor(this.rules.get(sandboxId), target.host);
    if (injecting) return this.serveInjected(sandboxId, client, target, address, rest, injecting, base);
    if (this.opts.cache && this.caching.has(sandboxId) && target.url && target.headers && cacheable(target.method, target.url, target.headers)) {
      return this.serveCached(sandboxId, client, target, address, base);
    }
    let upstream: Socket;
    try {
      upstream = await openUpstream(address, target.port);
    } catch (e) {
      this.record(sandboxId, { ...base, decision: "allow", reason: "allowed", error: (e as Error).message });
      return reply(client, 502, `cannot connect to ${target.host}:${target.port}: ${(e as Error).message}`);
    }
    this.record(sandboxId, { ...base, decision: "allow", reason: "allowed" });
    if (client.destroyed) return void upstream.destroy();
    if (target.method === "CONNECT") client.write("HTTP/1.1 200 Connection Established\r\n\r\n");
    else upstream.write(target.head!);
    if (rest.length) upstream.write(rest);
    splice(client, upstream);
  }

  // A destination with egress rules: the request is read and the rule's headers added, over plain
  // HTTP as it came, over HTTPS by terminating the guest's TLS (intercept.ts). Never cached.
  private async serveInjected(
    sandboxId: string,
    client: Duplex,
    t: Target,
    address: string,
    rest: Buffer,
    match: { key: string; headers: Record<string, string> },
    base: Omit<EgressEntry, "ts" | "decision" | "reason">,
  ): Promise<void> {
    const headers = async () => {
      const out: Record<string, string> = {};
      for (const [k, v] of Object.entries(match.headers)) out[k] = await render(v, this.opts.secret ?? (async () => undefined));
      return out;
    };
    const done = (r: { added?: string[]; refused?: string; error?: string }) => {
      if (r.refused) this.record(sandboxId, { ...base, decision: "deny", reason: r.refused });
      else this.record(sandboxId, { ...base, decision: "allow", reason: "allowed", injected: match.key, headers: r.added, ...(r.error ? { error: r.error } : {}) });
    };
    if (t.method === "CONNECT") {
      if (!this.opts.ca) {
        done({ refused: "this server has no egress CA to read HTTPS requests with" });
        return reply(client, 502, "this server cannot add egress headers to HTTPS requests");
      }
      client.write("HTTP/1.1 200 Connection Established\r\n\r\n");
      if (rest.length) client.unshift(rest);
      return interceptTls(client, { host: t.host, port: t.port, address }, this.opts.ca, { headers, trust: this.trust, done });
    }
    const hosts = t.lines!.filter((l) => /^host\s*:/i.test(l));
    if (hosts.length !== 1 || !hostHeaderIs(hosts[0].slice(hosts[0].indexOf(":") + 1), t.host, t.port)) {
      done({ refused: `the request's Host is not ${t.host}, the host its URL names` });
      return reply(client, 421, `the request's Host is not ${t.host}, the host its URL names`);
    }
    let inject: Record<string, string>;
    try {
      inject = await headers();
    } catch (e) {
      done({ refused: (e as Error).message });
      return reply(client, 502, (e as Error).message);
    }
    let upstream: Socket;
    try {
      upstream = await openUpstream(address, t.port);
    } catch (e) {
      done({ error: (e as Error).message });
      return reply(client, 502, `cannot connect to ${t.host}:${t.port}: ${(e as Error).message}`);
    }
    done({ added: Object.keys(inject) });
    if (client.destroyed) return void upstream.destroy();
    upstream.write(rewriteHead(`${t.method} ${t.url!.pathname}${t.url!.search} HTTP/1.1`, t.lines!, inject));
    if (rest.length) upstream.write(rest);
    splice(client, upstream);
  }

  // A cacheable GET: the cached file, or the upstream response passed on and kept as it goes.
  private async serveCached(sandboxId: string, client: Duplex, t: Target, address: string, base: Omit<EgressEntry, "ts" | "decision" | "reason">): Promise<void> {
    const cache = this.opts.cache!;
    const url = t.url!.toString();
    const hit = await cache.lookup(url);
    if (hit) {
      this.record(sandboxId, { ...base, decision: "allow", reason: "allowed", cache: "hit" });
      client.write(`HTTP/1.1 200 OK\r\nContent-Type: ${hit.meta.contentType}\r\nContent-Length: ${hit.meta.size}\r\nX-Forgevm-Cache: hit\r\nConnection: close\r\n\r\n`);
      const body = createReadStream(hit.file);
      body.on("error", () => client.destroy());
      body.pipe(client);
      return;
    }
    const headers: Record<string, string> = {};
    for (const [k, v] of t.headers!) headers[k] = v;
    headers.connection = "close";
    const req = httpRequest({ host: address, port: t.port, method: "GET", path: `${t.url!.pathname}${t.url!.search}`, headers, setHost: false, timeout: CONNECT_TIMEOUT_MS });
    req.on("timeout", () => req.destroy(new Error("timed out")));
    req.on("error", (e) => {
      this.record(sandboxId, { ...base, decision: "allow", reason: "allowed", error: e.message });
      if (!client.writableEnded) reply(client, 502, `cannot fetch ${url}: ${e.message}`);
    });
    client.on("close", () => req.destroy());
    req.on("response", async (res) => {
      this.record(sandboxId, { ...base, decision: "allow", reason: "allowed", cache: "miss" });
      const length = res.headers["content-length"] !== undefined ? Number(res.headers["content-length"]) : null;
      const writer = storable(res.statusCode ?? 0, res.headers) ? await cache.store(url, String(res.headers["content-type"] ?? "application/octet-stream"), length) : null;
      // Passed on close-delimited (HTTP/1.1 allows it): the body arrives decoded from chunks.
      const keep = ["content-type", "content-length", "etag", "last-modified", "location", "content-encoding"];
      const lines = [`HTTP/1.1 ${res.statusCode} ${res.statusMessage ?? ""}`];
      for (const k of keep) if (res.headers[k] !== undefined) lines.push(`${k}: ${res.headers[k]}`);
      client.write(`${[...lines, "X-Forgevm-Cache: miss", "Connection: close", "", ""].join("\r\n")}`);
      res.on("data", (c: Buffer) => {
        writer?.write(c);
        client.write(c);
      });
      let ended = false;
      res.on("end", () => {
        ended = true;
        client.end();
        void writer?.commit();
      });
      // Cut short (the client left, the upstream broke): nothing is kept.
      res.on("close", () => {
        if (ended) return;
        client.destroy();
        void writer?.abort();
      });
    });
    req.end();
  }

  /** Allowed destination address and the rule that allows it, or a Refusal saying why not. */
  private async decide(sandboxId: string, t: Target): Promise<{ address: string; rule: Rule }> {
    const policy = this.policies.get(sandboxId);
    if (!policy) throw new Refusal(403, "this sandbox has no egress allowlist");
    const { allow: rules, deny } = policy;
    if (isIP(t.host)) {
      // A raw address is only reachable when an IP/network entry names it, or egress is open and it is not denied.
      let rule = matchAddress(rules, t.host, t.port);
      if (!rule && !deny) throw new Refusal(403, `${t.host}:${t.port} is an IP address not on this sandbox's allowlist`);
      if (!rule && deny?.has(t.host)) throw new Refusal(403, `${t.host} is denied to this sandbox (denyOut)`);
      rule ??= OPEN;
      if (this.blocked.has(t.host) && !this.operatorAllowed.has(t.host)) throw new Refusal(403, `${t.host} is a private, local or reserved address`);
      return { address: t.host, rule };
    }
    const listed = matchHost(rules, t.host, t.port);
    if (!listed && !deny) throw new Refusal(403, `${t.host}:${t.port} is not on this sandbox's allowlist`);
    const rule = listed ?? OPEN;
    // A name the operator mapped (network.hosts) is trusted for its own name only, never for the address it maps to.
    const override = this.opts.hostsOverride?.[t.host];
    if (override) {
      if (!listed && deny?.has(override) && !matchAddress(rules, override, t.port))
        throw new Refusal(403, `${t.host} resolves to an address denied to this sandbox (denyOut: ${override})`);
      return { address: override, rule };
    }
    let addresses: string[];
    try {
      addresses = await this.resolve(t.host);
    } catch (e) {
      throw new Refusal(502, `cannot resolve ${t.host}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
    }
    // Re-checked after resolution: an allowed name that resolves to a private address (DNS
    // rebinding, or a hostile record) is refused rather than followed.
    const reachable = addresses.filter((a) => !this.blocked.has(a) || this.operatorAllowed.has(a));
    if (!reachable.length) throw new Refusal(403, `${t.host} resolves to a private, local or reserved address (${addresses.join(", ")})`);
    // Let through by open egress: the addresses it is denied are not used, whatever the name, but those the allowlist names.
    const usable = listed ? reachable : reachable.filter((a) => !deny?.has(a) || matchAddress(rules, a, t.port));
    if (!usable.length) throw new Refusal(403, `${t.host} resolves to addresses denied to this sandbox (denyOut: ${reachable.join(", ")})`);
    return { address: usable[0], rule };
  }

  private record(sandboxId: string, e: Omit<EgressEntry, "ts">): void {
    this.log.append(sandboxId, { ts: new Date().toISOString(), ...e });
    this.opts.onDecision?.(e.decision);
  }
}

const HOP_HEADERS = new Set(["proxy-connection", "proxy-authorization", "connection", "keep-alive", "te", "trailer", "upgrade"]);

/** What a request head asks for; throws a Refusal for anything that is not a proxy request. */
function parseRequest(head: string): Target {
  const lines = head.split("\r\n");
  const m = /^([A-Z]{1,16}) (\S+) HTTP\/1\.[01]$/.exec(lines[0]);
  if (!m) throw new Refusal(400, "not an HTTP/1.x request");
  const [, method, uri] = m;
  if (method === "CONNECT") {
    const a = /^(?:\[([0-9a-fA-F:.]+)\]|([^:\s/@]+)):(\d{1,5})$/.exec(uri);
    if (!a) throw new Refusal(400, `CONNECT needs host:port, got "${uri.slice(0, 200)}"`);
    return { method, host: hostOf(a[1] ?? a[2]), port: portOf(a[3]) };
  }
  if (!/^http:\/\//i.test(uri)) {
    throw new Refusal(400, /^https:\/\//i.test(uri) ? "use CONNECT for https" : "send requests through the proxy in absolute form (http://host/path)");
  }
  let url: URL;
  try {
    url = new URL(uri);
  } catch {
    throw new Refusal(400, `malformed URL "${uri.slice(0, 200)}"`);
  }
  if (url.username || url.password) throw new Refusal(400, "credentials in the URL are not forwarded");
  const host = hostOf(url.hostname.replace(/^\[|\]$/g, ""));
  const port = url.port ? portOf(url.port) : 80;
  // One request per connection upstream: a later request on this connection could name another
  // host, so the upstream is told to close and the head is rebuilt in origin form.
  const headers = lines.slice(1).filter((l) => l && !HOP_HEADERS.has(l.slice(0, l.indexOf(":")).trim().toLowerCase()));
  if (!headers.some((l) => /^host\s*:/i.test(l))) headers.unshift(`Host: ${url.host}`);
  const out = [`${method} ${url.pathname}${url.search} HTTP/1.1`, ...headers, "Connection: close", "", ""].join("\r\n");
  const map = new Map(headers.map((l) => [l.slice(0, l.indexOf(":")).trim().toLowerCase(), l.slice(l.indexOf(":") + 1).trim()] as [string, string]));
  return { method, host, port, head: Buffer.from(out, "latin1"), url, headers: map, lines: headers };
}

function hostOf(raw: string): string {
  if (isIP(raw)) return raw.toLowerCase();
  const h = normalHost(raw);
  if (!h) throw new Refusal(400, `"${raw.slice(0, 200)}" is not a valid hostname`);
  return h;
}

function portOf(s: string): number {
  const n = Number(s);
  if (!Number.isInteger(n) || n < 1 || n > 65535) throw new Refusal(400, `port ${s} is out of range`);
  return n;
}

function openUpstream(address: string, port: number): Promise<Socket> {
  return whenConnected(connect({ host: address, port }), "connect", CONNECT_TIMEOUT_MS);
}

/** Pipes both ways with half-close, and tears both down when either fails. */
function splice(client: Duplex, upstream: Socket): void {
  upstream.on("error", () => client.destroy());
  client.on("error", () => upstream.destroy());
  client.on("close", () => upstream.destroy());
  upstream.on("close", () => {
    if (!client.writableEnded) client.end();
  });
  client.pipe(upstream);
  upstream.pipe(client);
  client.resume();
}
