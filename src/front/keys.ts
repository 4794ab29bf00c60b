// Who may use a front, and the cluster's API keys. The operator's key (auth.api_key, shared with
// the nodes) may do everything, keys included; a cluster key (made at a front, kept in the
// catalogue) may do everything else. A request let in with a cluster key goes on to its node with
// the operator's key instead, since nodes know no other.
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Socket } from "node:net";
import type { Duplex } from "node:stream";
import type { ClusterKeys } from "../core/cluster/api-keys.js";
import type { ErrorCode } from "../http/errors.js";
import { keyMatches } from "../http/api-key.js";
import { browserStreamKeys } from "../http/browser-keys.js";
import { ON_BEHALF_HEADER } from "../http/api-key.js";
import { readBody } from "./proxy.js";

const KEYS = /^\/api\/v1\/cluster\/keys(?:\/([^/]+))?$/;

/** Who a request is: the operator, a holder of a cluster key, or nobody. */
export type Caller = "operator" | "cluster-key" | null;

/** The keys a request presents: X-API-Key, a bearer token, and on browser streams the query or cookie. */
function presented(req: IncomingMessage): string[] {
  const out: string[] = [];
  const given = req.headers["x-api-key"];
  if (typeof given === "string") out.push(given);
  const bearer = /^Bearer\s+(.+)$/i.exec(String(req.headers.authorization ?? ""))?.[1];
  if (bearer) out.push(bearer);
  return [...out, ...browserStreamKeys(req.url ?? "/", req.headers.cookie)];
}

/** The cluster key each request let in with one presented. */
const keyOfRequest = new WeakMap<IncomingMessage, string>();

/** Decides who `req` is; with no operator key set, everyone is the operator (as on a node). */
export async function callerOf(req: IncomingMessage, operatorKey: string, keys: ClusterKeys): Promise<Caller> {
  if (!operatorKey) return "operator";
  const given = presented(req);
  if (given.some((k) => keyMatches(k, operatorKey))) return "operator";
  for (const k of given) {
    if (await keys.accepts(k)) {
      keyOfRequest.set(req, k);
      return "cluster-key";
    }
  }
  return null;
}

/**
 * The connections open under a cluster key (an event stream, a WebSocket, a long exec): when
 * the key is revoked, each is closed within the keys' refresh, as a new request would be refused.
 */
export class KeyedConnections {
  private readonly open = new Map<Socket | Duplex, string>();
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly keys: ClusterKeys,
    everyMs = 1000,
  ) {
    this.timer = setInterval(() => void this.sweep(), everyMs);
    this.timer.unref();
  }

  /** Watches the connection of a request let in with a cluster key (nothing for the operator's). */
  track(req: IncomingMessage, socket: Socket | Duplex = req.socket): void {
    const key = keyOfRequest.get(req);
    if (!key || this.open.has(socket)) return;
    this.open.set(socket, key);
    socket.once("close", () => this.open.delete(socket));
  }

  private async sweep(): Promise<void> {
    for (const [socket, key] of this.open) {
      if (await this.keys.accepts(key).catch(() => true)) continue;
      this.open.delete(socket);
      socket.destroy();
    }
  }

  close(): void {
    clearInterval(this.timer);
  }
}

/** Rewrites a request let in with a cluster key to carry the operator's key to the node. */
export function asOperator(req: IncomingMessage, operatorKey: string): void {
  const url = new URL(req.url ?? "/", "http://x");
  if (url.searchParams.has("api_key")) {
    url.searchParams.delete("api_key");
    req.url = `${url.pathname}${url.search}`;
  }
  req.headers["x-api-key"] = operatorKey;
  // The node must never show the key it now sees to this caller (E2B's team list would).
  req.headers[ON_BEHALF_HEADER] = "cluster-key";
  delete req.headers.authorization;
  delete req.headers.cookie;
  // A WebSocket upgrade is replayed from the raw headers.
  const raw: string[] = [];
  for (let i = 0; i < req.rawHeaders.length; i += 2) {
    const name = req.rawHeaders[i].toLowerCase();
    if (name !== "x-api-key" && name !== "authorization" && name !== "cookie" && name !== ON_BEHALF_HEADER) raw.push(req.rawHeaders[i], req.rawHeaders[i + 1]);
  }
  raw.push("X-API-Key", operatorKey, ON_BEHALF_HEADER, "cluster-key");
  req.rawHeaders.splice(0, req.rawHeaders.length, ...raw);
}

/** Answers /api/v1/cluster/keys (the operator's alone); false for other paths. */
export async function handleKeys(
  req: IncomingMessage,
  res: ServerResponse,
  path: string,
  c: {
    keys: ClusterKeys;
    caller: Caller;
    operatorKey: string;
    send(res: ServerResponse, status: number, body: unknown): void;
    problem(res: ServerResponse, code: ErrorCode, message: string): void;
  },
): Promise<boolean> {
  const m = KEYS.exec(path);
  if (!m) return false;
  if (!c.operatorKey) {
    c.problem(res, "BAD_REQUEST", "cluster API keys need the operator's key first: set auth.api_key on every front and node");
    return true;
  }
  if (c.caller !== "operator") {
    c.problem(res, "FORBIDDEN", "only the operator's key (auth.api_key) manages the cluster's API keys");
    return true;
  }
  if (!m[1] && req.method === "GET") {
    c.send(res, 200, await c.keys.list());
    return true;
  }
  if (!m[1] && req.method === "POST") {
    let name: unknown;
    try {
      name = (JSON.parse((await readBody(req)).toString() || "{}") as { name?: unknown }).name;
    } catch {
      c.problem(res, "BAD_REQUEST", 'the body must be JSON: {"name": "who the key is for"}');
      return true;
    }
    if (typeof name !== "string" || !/^[\w .@-]{1,64}$/.test(name)) {
      c.problem(res, "BAD_REQUEST", "name: say who the key is for (1 to 64 letters, digits, spaces, _ . @ -)");
      return true;
    }
    c.send(res, 201, await c.keys.create(name));
    return true;
  }
  if (m[1] && req.method === "DELETE") {
    if (!(await c.keys.revoke(decodeURIComponent(m[1])))) c.problem(res, "NOT_FOUND", `API key ${m[1].slice(0, 64)} not found`);
    else c.send(res, 200, { status: "revoked" });
    return true;
  }
  c.problem(res, "METHOD_NOT_ALLOWED", `${req.method} ${path}: GET or POST /cluster/keys, DELETE /cluster/keys/{id}`);
  return true;
}
