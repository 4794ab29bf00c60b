// Daytona's signed preview URLs: a URL to one port of a sandbox that works on its own, with no
// header and no path, until it expires. Daytona puts the token in the host name; a wildcard name
// needs DNS this server cannot count on (getaddrinfo does not resolve `*.localhost` here), so each
// signed (sandbox, port) gets a listener of its own on the server's address, and the token rides
// in the query (`?DAYTONA_SANDBOX_AUTH_KEY=…`). Clients that keep only the scheme, host, port
// and query of the URL (the OpenAI Agents SDK's) reach it as it is. A browser that follows links
// loses the query, so a valid one also sets a cookie for that listener.
//
// A token is `<expiry>.<mac>`: the MAC is the sandbox's access token for this port and expiry,
// so nothing is stored per token but the revoked ones. A listener closes when its last token
// expires, when its sandbox is destroyed, and with the server; a restarted server has none, so
// URLs signed before a restart stop working (ask for a new one).
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { Forge } from "../../core/forge.js";
import { forwardRaw } from "../../http/forward.js";
import { ignore } from "../../util/ignore.js";
import { PREVIEW_TOKEN_QUERY } from "./preview.js";

/** Daytona's default and longest lifetimes of a signed URL. */
export const SIGNED_DEFAULT_S = 60;
export const SIGNED_MAX_S = 24 * 3600;
const COOKIE = "forgevm_signed_preview";

interface Listener {
  server: Server;
  port: number;
  /** When its last token expires (ms). */
  until: number;
  timer: NodeJS.Timeout;
}

const json = (res: ServerResponse, status: number, message: string) => {
  if (res.headersSent) return void res.destroy();
  res.writeHead(status, { "content-type": "application/json", connection: "close" });
  res.end(JSON.stringify({ statusCode: status, error: status === 401 ? "Unauthorized" : status === 404 ? "Not Found" : "Bad Gateway", message }));
};

export class SignedPreviews {
  private readonly listeners = new Map<string, Listener>();
  /** Tokens expired early, until they would have expired anyway. */
  private readonly revoked = new Map<string, number>();
  /** Set once the first URL is signed: until then there is nothing to close. */
  private unsubscribe: (() => void) | null = null;

  constructor(
    private readonly forge: Forge,
    /** The address the server listens on; each listener takes a free port on it. */
    private readonly bindHost: string,
  ) {}

  private mac(id: string, port: number, expiry: number): string {
    return this.forge.sandboxes.accessToken(id, `daytona-signed:${port}:${expiry}`);
  }

  /** Whether `token` lets a request reach `port` of sandbox `id` now. */
  private valid(id: string, port: number, token: string): boolean {
    const m = /^(\d{10,13})\.([A-Za-z0-9_-]{8,128})$/.exec(token);
    if (!m || this.revoked.has(token)) return false;
    const expiry = Number(m[1]);
    return expiry * 1000 > Date.now() && this.forge.sandboxes.checkAccessToken(id, `daytona-signed:${port}:${expiry}`, m[2]);
  }

  /** A new token for `port` of sandbox `id`, and the port of the listener that takes it. */
  async sign(id: string, port: number, seconds: number): Promise<{ token: string; listenPort: number }> {
    this.unsubscribe ??= this.forge.events.subscribe((e) => {
      if ((e.type === "sandbox.destroyed" || e.type === "sandbox.expired") && e.sandbox_id)
        for (const key of this.listeners.keys()) if (key.startsWith(`${e.sandbox_id}:`)) this.close(key);
    });
    const expiry = Math.floor(Date.now() / 1000) + seconds;
    const token = `${expiry}.${this.mac(id, port, expiry)}`;
    const l = await this.listener(id, port);
    if (expiry * 1000 > l.until) {
      l.until = expiry * 1000;
      this.arm(`${id}:${port}`, l);
    }
    return { token, listenPort: l.port };
  }

  /** Ends a token before its time. */
  expire(id: string, port: number, token: string): boolean {
    if (!this.valid(id, port, token)) return false;
    this.revoked.set(token, Number(token.split(".")[0]) * 1000);
    return true;
  }

  private async listener(id: string, port: number): Promise<Listener> {
    const key = `${id}:${port}`;
    const have = this.listeners.get(key);
    if (have) return have;
    const server = createServer((req, res) => void this.serve(id, port, req, res));
    server.on("clientError", (_e, socket) => socket.destroy());
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(0, this.bindHost, () => resolve());
    });
    // A second sign for the same port may have raced this one: keep the first listener.
    const raced = this.listeners.get(key);
    if (raced) {
      server.close();
      return raced;
    }
    const l: Listener = { server, port: (server.address() as AddressInfo).port, until: Date.now(), timer: setTimeout(() => {}, 0) };
    this.listeners.set(key, l);
    return l;
  }

  private arm(key: string, l: Listener): void {
    clearTimeout(l.timer);
    // Timers take at most 2^31-1 ms; the longest lifetime is a day, well under it.
    l.timer = setTimeout(() => this.close(key), Math.max(0, l.until - Date.now()) + 1000);
    l.timer.unref();
  }

  private close(key: string): void {
    const l = this.listeners.get(key);
    if (!l) return;
    this.listeners.delete(key);
    clearTimeout(l.timer);
    l.server.close();
    l.server.closeAllConnections();
    const now = Date.now();
    for (const [t, until] of this.revoked) if (until < now) this.revoked.delete(t);
  }

  /** Closes every listener (the server is stopping). */
  closeAll(): void {
    this.unsubscribe?.();
    this.unsubscribe = null;
    for (const key of [...this.listeners.keys()]) this.close(key);
  }

  private async serve(id: string, port: number, req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? "/", "http://x");
    const fromQuery = url.searchParams.get(PREVIEW_TOKEN_QUERY);
    const fromCookie = new RegExp(`(?:^|;\\s*)${COOKIE}=([^;]+)`).exec(String(req.headers.cookie ?? ""))?.[1];
    const token = [fromQuery, fromCookie].find((t): t is string => !!t && this.valid(id, port, t));
    if (!token) {
      req.resume();
      return json(res, 401, `this signed preview URL has expired or is not valid: ask for a new one (getSignedPreviewUrl(${port}))`);
    }
    let row: ReturnType<Forge["sandboxes"]["get"]>;
    try {
      row = this.forge.sandboxes.get(id);
    } catch {
      req.resume();
      return json(res, 404, `sandbox ${id} not found`);
    }
    await this.forge.sandboxes.wake(row.id, "preview").catch(ignore("a sandbox that cannot wake is answered as unreachable below"));
    const conn = await this.forge.network.openPort(row.id, port).catch(() => null);
    if (!conn) {
      req.resume();
      return json(res, 502, `port ${port} of sandbox ${id} is closed or the sandbox is not running`);
    }
    url.searchParams.delete(PREVIEW_TOKEN_QUERY);
    if (fromQuery === token) {
      const maxAge = Number(token.split(".")[0]) - Math.floor(Date.now() / 1000);
      res.setHeader("set-cookie", `${COOKIE}=${token}; Path=/; Max-Age=${maxAge}; HttpOnly; SameSite=Lax`);
    }
    // The guest sees neither the token nor this listener's cookie.
    const cookie = String(req.headers.cookie ?? "")
      .split(/;\s*/)
      .filter((c) => c && !c.startsWith(`${COOKIE}=`))
      .join("; ");
    if (cookie) req.headers.cookie = cookie;
    else delete req.headers.cookie;
    forwardRaw(req, res, conn, `${url.pathname}${url.search}`, `localhost:${port}`);
  }
}
