// Reading a request on its way out, to add an egress rule's headers. For HTTPS the proxy answers
// the guest's TLS itself with a certificate from the egress CA for the CONNECT target only (a
// guest that names another host in its SNI gets no certificate at all), then opens its own TLS
// connection to the real host, verified against the host's trust store and the operator's extra
// CAs. Only the first request of a connection is read and given headers, and only when its Host is
// the destination the connection was allowed for; the upstream is told to close after it, so a
// request sent after it on the same connection reaches the same host unread and without them.
import { createSecureContext, connect as tlsConnect, rootCertificates, type SecureContext, TLSSocket } from "node:tls";
import type { Duplex } from "node:stream";
import type { Socket } from "node:net";
import type { EgressCa } from "./egress-ca.js";
import { readHead, reply } from "./http-head.js";
import { whenConnected } from "./connected.js";

const HEAD_TIMEOUT_MS = 30_000;
const CONNECT_TIMEOUT_MS = 10_000;

/** Headers of the hop to the proxy, never passed on. */
const HOP = new Set(["proxy-connection", "proxy-authorization", "connection", "keep-alive", "te", "trailer", "upgrade"]);

/** A request refused before anything was sent upstream. */
export class InterceptRefusal extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/**
 * Whether a Host header names `host` (with `port`, or with no port: the connection is pinned to
 * its port already, and what must not differ is the name).
 */
export function hostHeaderIs(value: string | undefined, host: string, port: number): boolean {
  if (value === undefined) return false;
  const v = value
    .trim()
    .toLowerCase()
    .replace(/\.(?=:|$)/, "");
  return v === `${host}:${port}` || v === host;
}

/**
 * A request head with `inject` added (replacing same-named headers, whatever their case), the hop
 * headers dropped and `Connection: close` set. `lines` is the head split on CRLF, request line first.
 */
export function rewriteHead(requestLine: string, headerLines: string[], inject: Record<string, string>): Buffer {
  const replaced = new Set(Object.keys(inject).map((k) => k.toLowerCase()));
  const kept = headerLines.filter((l) => {
    const name = l.slice(0, l.indexOf(":")).trim().toLowerCase();
    return l && !HOP.has(name) && !replaced.has(name);
  });
  const added = Object.entries(inject).map(([k, v]) => `${k}: ${v}`);
  return Buffer.from([requestLine, ...kept, ...added, "Connection: close", "", ""].join("\r\n"), "latin1");
}

export interface TlsTarget {
  host: string;
  port: number;
  /** The address the proxy checked and will connect to. */
  address: string;
}

export interface InterceptHooks {
  /** The rule's headers for this destination, filled in; throws (a 502 to the guest) when a secret is missing. */
  headers: () => Promise<Record<string, string>>;
  /** Trusted CAs for the upstream (PEM): the host's, plus the operator's. */
  trust: string[];
  /** Told of the outcome, once: the names of the headers added, or why nothing was sent. */
  done: (r: { added?: string[]; refused?: string; error?: string }) => void;
}

/** Serves a CONNECT tunnel whose destination has rules: TLS with the guest, one read request, TLS upstream. */
export async function interceptTls(client: Duplex, t: TlsTarget, ca: EgressCa, hooks: InterceptHooks): Promise<void> {
  let ctx: SecureContext;
  try {
    const leaf = await ca.leaf(t.host);
    ctx = createSecureContext({ cert: leaf.cert, key: leaf.key });
  } catch (e) {
    hooks.done({ error: `no certificate for ${t.host}: ${(e as Error).message}` });
    return void client.destroy();
  }
  let sniRefused: string | null = null;
  const guest = new TLSSocket(client as unknown as Socket, {
    isServer: true,
    secureContext: ctx,
    ALPNProtocols: ["http/1.1"],
    // Called before any certificate is sent: a name other than the CONNECT target gets none.
    SNICallback: (name, cb) => {
      if (name.toLowerCase().replace(/\.$/, "") === t.host) return cb(null, ctx);
      sniRefused = name;
      cb(new Error("server name does not match the CONNECT target"));
    },
  });
  const secure = await new Promise<boolean>((resolve) => {
    const timer = setTimeout(() => resolve(false), HEAD_TIMEOUT_MS);
    guest.once("secure", () => {
      clearTimeout(timer);
      resolve(true);
    });
    guest.once("error", () => {
      clearTimeout(timer);
      resolve(false);
    });
    guest.once("close", () => {
      clearTimeout(timer);
      resolve(false);
    });
  });
  if (!secure) {
    hooks.done({ refused: sniRefused ? `TLS server name "${String(sniRefused).slice(0, 200)}" is not the CONNECT target ${t.host}` : "the guest's TLS handshake did not finish" });
    guest.destroy();
    return void client.destroy();
  }
  guest.on("error", () => guest.destroy());
  const got = await readHead(guest);
  if (!got) {
    hooks.done({ refused: "no request came" });
    return void guest.destroy();
  }
  let head: Buffer;
  let added: string[];
  try {
    const lines = got.head.split("\r\n");
    const m = /^([A-Z]{1,16}) (\S+) HTTP\/1\.[01]$/.exec(lines[0]);
    if (!m) throw new InterceptRefusal(400, "not an HTTP/1.x request");
    let [, method, target] = m;
    if (/^https:\/\//i.test(target)) {
      const u = new URL(target);
      if (!hostHeaderIs(u.host, t.host, t.port)) throw new InterceptRefusal(421, `the request names ${u.host.slice(0, 200)}, not ${t.host}`);
      target = `${u.pathname}${u.search}`;
    } else if (!target.startsWith("/") && target !== "*") throw new InterceptRefusal(400, "a request in a tunnel is in origin form (/path)");
    const headerLines = lines.slice(1).filter(Boolean);
    const hosts = headerLines.filter((l) => /^host\s*:/i.test(l));
    if (hosts.length !== 1 || !hostHeaderIs(hosts[0].slice(hosts[0].indexOf(":") + 1), t.host, t.port)) {
      throw new InterceptRefusal(421, `the request's Host is not ${t.host}, the destination this connection was opened for`);
    }
    let inject: Record<string, string>;
    try {
      inject = await hooks.headers();
    } catch (e) {
      throw new InterceptRefusal(502, (e as Error).message);
    }
    added = Object.keys(inject);
    head = rewriteHead(`${method} ${target} HTTP/1.1`, headerLines, inject);
  } catch (e) {
    if (!(e instanceof InterceptRefusal)) throw e;
    hooks.done({ refused: e.message });
    return reply(guest, e.status, e.message);
  }
  let upstream: Socket;
  try {
    upstream = await openTls(t, hooks.trust);
  } catch (e) {
    hooks.done({ added, error: (e as Error).message });
    return reply(guest, 502, `cannot connect to ${t.host}:${t.port}: ${(e as Error).message}`);
  }
  hooks.done({ added });
  upstream.write(head);
  if (got.rest.length) upstream.write(got.rest);
  upstream.on("error", () => guest.destroy());
  guest.on("close", () => upstream.destroy());
  upstream.on("close", () => {
    if (!guest.writableEnded) guest.end();
  });
  guest.pipe(upstream);
  upstream.pipe(guest);
  guest.resume();
}

/** TLS to the real host, verified for its name against `trust`. */
function openTls(t: TlsTarget, trust: string[]): Promise<Socket> {
  return whenConnected(tlsConnect({ host: t.address, port: t.port, servername: t.host, ca: trust, ALPNProtocols: ["http/1.1"] }), "secureConnect", CONNECT_TIMEOUT_MS);
}

/** The host's trust store with the operator's extra CAs on top. */
export function trustStore(extraPem?: string): string[] {
  return extraPem ? [...rootCertificates, extraPem] : [...rootCertificates];
}
