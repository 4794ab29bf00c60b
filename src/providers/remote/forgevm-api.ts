// The few calls the remote provider makes to another ForgeVM server's REST API, with its key;
// a failed call is an Error that carries the server's own message and status.
import WebSocket from "ws";
import { RemoteError } from "../relayed-agent.js";

export class ForgevmApi {
  private readonly base: string;

  constructor(
    url: string,
    private readonly apiKey: string,
    private readonly timeoutMs = 120_000,
  ) {
    this.base = `${url.replace(/\/+$/, "")}/api/v1`;
  }

  /** Where the server is (for messages). */
  get url(): string {
    return this.base;
  }

  /** A JSON call; `raw` sends bytes as the body instead, with `query`. */
  async call<T = any>(method: string, path: string, o: { body?: unknown; raw?: Buffer; query?: Record<string, string> } = {}): Promise<T> {
    const q = o.query ? `?${new URLSearchParams(o.query)}` : "";
    let res: Response;
    try {
      res = await fetch(`${this.base}${path}${q}`, {
        method,
        headers: {
          ...(this.apiKey ? { "X-API-Key": this.apiKey } : {}),
          ...(o.raw ? { "Content-Type": "application/octet-stream" } : o.body !== undefined ? { "Content-Type": "application/json" } : {}),
        },
        body: o.raw ? new Uint8Array(o.raw) : o.body !== undefined ? JSON.stringify(o.body) : undefined,
        signal: AbortSignal.timeout(this.timeoutMs),
      });
    } catch (e) {
      throw new RemoteError(`${this.base} cannot be reached: ${(e as Error).message}`, 0);
    }
    const text = await res.text();
    let body: any = text;
    try {
      body = text ? JSON.parse(text) : null;
    } catch {
      // not JSON: kept as text
    }
    if (!res.ok) throw new RemoteError(`${this.base} answered ${res.status}: ${body?.message ?? String(text).slice(0, 200)}`, res.status);
    return body as T;
  }

  /** Opens a WebSocket on `path` with the key. */
  socket(path: string): WebSocket {
    const url = `${this.base.replace(/^http/, "ws")}${path}`;
    return new WebSocket(url, { headers: this.apiKey ? { "X-API-Key": this.apiKey } : {}, maxPayload: 8 * 1024 * 1024 });
  }
}
