// Relaying one request to a node as it comes: the body streamed up, the response (NDJSON streams,
// SSE, file downloads) streamed back without buffering, and WebSocket upgrades spliced at the
// byte level once the node has answered the upgrade.
import { request, type IncomingMessage, type ServerResponse } from "node:http";
import { connect, type Socket } from "node:net";
import type { Duplex } from "node:stream";

/** Headers that belong to one connection, never forwarded (RFC 9110 §7.6.1). */
const HOP = new Set(["connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade", "host"]);

function forwardable(h: IncomingMessage["headers"], nodeId: string): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const [k, v] of Object.entries(h)) if (v !== undefined && !HOP.has(k)) out[k] = v;
  out["x-forgevm-front"] = nodeId;
  return out;
}

/** The key header of a request the front makes to a node on a caller's behalf (the caller's is the operator's by now). */
export function nodeAuth(req: IncomingMessage): Record<string, string> {
  const key = req.headers["x-api-key"];
  return typeof key === "string" ? { "X-API-Key": key } : {};
}

/** Errors that mean the request never reached the node, so that sending it elsewhere cannot do it twice. */
const NOT_DELIVERED = new Set(["ECONNREFUSED", "EHOSTUNREACH", "ENETUNREACH", "ENOTFOUND", "EAI_AGAIN"]);

/** Whether a relay's rejection means the node never got the request. */
export function notDelivered(e: unknown): boolean {
  return NOT_DELIVERED.has((e as NodeJS.ErrnoException)?.code ?? "");
}

/** How one relay differs from a plain one. */
export interface RelayOptions {
  /** The request's body, when the front has read it already. */
  body?: Buffer;
  /** A connection of its own, so that a refusal is not a kept-alive connection the node was closing. */
  fresh?: boolean;
  /** Changes the headers sent to the node / the headers of its answer. */
  requestHeaders?(h: Record<string, string | string[]>): void;
  responseHeaders?(h: Record<string, string | string[]>): void;
}

/** Sends `req` to the node at `base` and streams its answer back; rejects only when the node gave no answer. */
export function relay(req: IncomingMessage, res: ServerResponse, base: string, nodeId: string, o: RelayOptions = {}): Promise<void> {
  const url = new URL(req.url ?? "/", base);
  const sent = forwardable(req.headers, nodeId);
  o.requestHeaders?.(sent);
  const body = o.body;
  return new Promise<void>((resolve, reject) => {
    const up = request(url, { method: req.method, headers: sent, ...(o.fresh ? { agent: false } : {}) }, (ures) => {
      const headers: Record<string, string | string[]> = {};
      for (const [k, v] of Object.entries(ures.headers)) if (v !== undefined && !HOP.has(k)) headers[k] = v;
      o.responseHeaders?.(headers);
      res.writeHead(ures.statusCode ?? 502, headers);
      ures.pipe(res);
      ures.on("error", () => res.destroy());
      // The node answered: from here a failure is the response's, not a reason to try another node.
      resolve();
    });
    up.on("error", (e) => (res.headersSent ? res.destroy() : reject(e)));
    // The client left: whatever the node streams for it stops too.
    res.on("close", () => {
      if (!res.writableFinished) up.destroy();
    });
    if (body) up.end(body);
    else req.pipe(up);
  });
}

/** Splices a WebSocket upgrade to the node at `base`: the request head is replayed, then bytes flow both ways. */
export function relayUpgrade(req: IncomingMessage, client: Duplex, head: Buffer, base: string, onUnreachable: () => void): void {
  const url = new URL(req.url ?? "/", base);
  const up: Socket = connect(Number(url.port || 80), url.hostname);
  const lines = [`${req.method} ${url.pathname}${url.search} HTTP/1.1`, `Host: ${url.host}`];
  for (let i = 0; i < req.rawHeaders.length; i += 2) if (req.rawHeaders[i].toLowerCase() !== "host") lines.push(`${req.rawHeaders[i]}: ${req.rawHeaders[i + 1]}`);
  let connected = false;
  up.once("connect", () => {
    connected = true;
    up.write(`${lines.join("\r\n")}\r\n\r\n`);
    if (head.length) up.write(head);
    up.pipe(client);
    client.pipe(up);
  });
  up.on("error", () => {
    if (!connected) onUnreachable();
    client.destroy();
  });
  client.on("error", () => up.destroy());
  client.on("close", () => up.destroy());
  up.on("close", () => client.destroy());
}

/** One request to a node whose (small, JSON) answer the front reads before it answers: status and body. */
export async function ask(req: IncomingMessage, base: string, nodeId: string, body?: Buffer): Promise<{ status: number; body: Buffer; type: string }> {
  const headers = forwardable(req.headers, nodeId);
  delete headers["content-length"];
  const r = await fetch(new URL(req.url ?? "/", base), { method: req.method, headers: headers as Record<string, string>, body: body?.length ? body : undefined });
  return { status: r.status, body: Buffer.from(await r.arrayBuffer()), type: r.headers.get("content-type") ?? "application/json" };
}

/** Bodies a front reads itself (creates, template writes, an MCP initialize) are small. */
const MAX_READ_BODY = 1024 * 1024;

/** Reads a request's body, up to 1 MiB (a RangeError past it). */
export async function readBody(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let n = 0;
  for await (const c of req) {
    n += (c as Buffer).length;
    if (n > MAX_READ_BODY) throw new RangeError("request body too large");
    chunks.push(c as Buffer);
  }
  return Buffer.concat(chunks);
}
