// One HTTP transport for the client and its sandboxes: base URL, headers, timeouts, and the
// mapping of failures to typed errors.
import { ConnectionError, errorFrom } from "./errors.js";
import type { ClientOptions } from "./types.js";

export const DEFAULT_TIMEOUT_MS = 30_000;
/** Spawns may boot a VM (or pull an image) first. */
export const SPAWN_TIMEOUT_MS = 300_000;

export interface RequestOptions {
  body?: unknown;
  /** Raw body sent as application/octet-stream (or `contentType`): bytes, or a stream of them. */
  raw?: Uint8Array | ReadableStream<Uint8Array> | AsyncIterable<Uint8Array>;
  contentType?: string;
  /** Query parameters; a list repeats its parameter. */
  query?: Record<string, string | string[] | undefined>;
  timeoutMs?: number | null;
  /** Aborts the request (and a streamed response) when it fires. */
  signal?: AbortSignal;
  /** Which sandbox the request is about (for messages). */
  sandboxId?: string;
}

export class Transport {
  readonly baseUrl: string;
  readonly timeoutMs: number;
  private readonly headers: Record<string, string> = {};

  constructor(opts: string | ClientOptions = {}) {
    const o = typeof opts === "string" ? { baseUrl: opts } : opts;
    // As the CLI does: FORGEVM_URL (Node) serves every client that names no server.
    const envUrl = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process?.env?.FORGEVM_URL;
    this.baseUrl = (o.baseUrl ?? (o.host || o.port ? undefined : envUrl || undefined) ?? `http://${o.host ?? "localhost"}:${o.port ?? 7423}`).replace(/\/+$/, "");
    this.timeoutMs = o.timeout ?? DEFAULT_TIMEOUT_MS;
    // As the CLI does: a key in the environment (Node) serves every client that names none.
    const envKey = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process?.env?.FORGEVM_API_KEY;
    const apiKey = o.apiKey ?? (envKey || undefined);
    if (apiKey) this.headers["X-API-Key"] = apiKey;
    if (o.userId) this.headers["X-User-ID"] = o.userId;
  }

  /** Sends a request; resolves with the successful response, throws a ForgevmError otherwise. */
  async send(method: string, path: string, o: RequestOptions = {}): Promise<Response> {
    const url = new URL(`${this.baseUrl}/api/v1${path}`);
    for (const [k, v] of Object.entries(o.query ?? {})) {
      if (Array.isArray(v)) for (const x of v) url.searchParams.append(k, x);
      else if (v !== undefined) url.searchParams.set(k, v);
    }
    const headers: Record<string, string> = { ...this.headers };
    let body: string | Uint8Array | ReadableStream<Uint8Array> | AsyncIterable<Uint8Array> | undefined;
    if (o.raw) {
      headers["Content-Type"] = o.contentType ?? "application/octet-stream";
      body = o.raw;
    } else if (o.body !== undefined) {
      headers["Content-Type"] = "application/json";
      body = JSON.stringify(o.body);
    }
    const timeout = o.timeoutMs === undefined ? this.timeoutMs : o.timeoutMs;
    let res: Response;
    try {
      // A streamed body needs half-duplex (Node's fetch); bytes and text are sent whole.
      const streamed = body !== undefined && typeof body !== "string" && !(body instanceof Uint8Array);
      res = await fetch(url, { method, headers, body: body as BodyInit | undefined, signal: signalOf(timeout, o.signal), ...(streamed ? { duplex: "half" } : {}) } as RequestInit);
    } catch (e) {
      const err = e as Error;
      if (err.name === "TimeoutError") throw new ConnectionError(`${method} ${url.pathname} got no answer from the ForgeVM server at ${this.baseUrl} within ${timeout} ms`);
      const cause = (err as { cause?: { code?: string; message?: string } }).cause;
      throw new ConnectionError(`cannot reach the ForgeVM server at ${this.baseUrl}: ${cause?.code ?? cause?.message ?? err.message} (is \`forgevm serve\` running?)`);
    }
    if (!res.ok) throw await errorFrom(res);
    return res;
  }

  async json<T>(method: string, path: string, o: RequestOptions = {}): Promise<T> {
    return (await (await this.send(method, path, o)).json()) as T;
  }
}

function signalOf(timeout: number | null, given?: AbortSignal): AbortSignal | undefined {
  const t = timeout === null ? undefined : AbortSignal.timeout(timeout);
  if (!given) return t;
  return t ? AbortSignal.any([t, given]) : given;
}
