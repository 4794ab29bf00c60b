// The console's one way to the server: the same REST API a script calls, with the API key the
// person typed (kept in this browser's storage, and as a cookie for the two routes a browser
// cannot send headers to: the event stream and the exec WebSocket). Never in a URL.
export { bytes } from "../../src/util/units";

const KEY = "forgevm_api_key";

export function apiKey(): string {
  return localStorage.getItem(KEY) ?? "";
}

export function setApiKey(key: string): void {
  if (key) localStorage.setItem(KEY, key);
  else localStorage.removeItem(KEY);
  // biome-ignore lint/suspicious/noDocumentCookie: the Cookie Store API is not in every browser yet
  document.cookie = key ? `${KEY}=${encodeURIComponent(key)}; path=/api/v1; SameSite=Strict` : `${KEY}=; path=/api/v1; max-age=0; SameSite=Strict`;
}

/** An error the API answered with: its code and message, shown as they are. */
export class ApiError extends Error {
  constructor(
    message: string,
    readonly status: number,
    readonly code: string,
  ) {
    super(message);
  }
}

function headers(extra: Record<string, string> = {}): Record<string, string> {
  const key = apiKey();
  return { ...(key ? { "X-API-Key": key } : {}), ...extra };
}

async function failure(r: Response): Promise<ApiError> {
  const text = await r.text().catch(() => "");
  try {
    const b = JSON.parse(text);
    return new ApiError(b.message ?? text, r.status, b.code ?? String(r.status));
  } catch {
    return new ApiError(text || r.statusText, r.status, String(r.status));
  }
}

/** Calls the API; resolves with the parsed JSON (or text), rejects with an ApiError. */
export async function api<T = any>(method: string, path: string, body?: unknown): Promise<T> {
  const r = await fetch(`/api/v1${path}`, {
    method,
    headers: headers(body !== undefined ? { "Content-Type": "application/json" } : {}),
    body: body !== undefined ? JSON.stringify(body) : undefined,
  });
  if (!r.ok) throw await failure(r);
  const text = await r.text();
  return (r.headers.get("content-type")?.includes("json") && text ? JSON.parse(text) : text) as T;
}

/** A response body as it streams (downloads, NDJSON logs). */
export async function apiStream(method: string, path: string, body?: BodyInit, contentType?: string): Promise<Response> {
  const r = await fetch(`/api/v1${path}`, { method, headers: headers(contentType ? { "Content-Type": contentType } : {}), body });
  if (!r.ok) throw await failure(r);
  return r;
}

/** Uploads bytes with progress (fetch cannot report upload progress). */
export function upload(path: string, data: Blob, onProgress: (sent: number, total: number) => void): Promise<void> {
  return new Promise((resolve, reject) => {
    const x = new XMLHttpRequest();
    x.open("POST", `/api/v1${path}`);
    for (const [k, v] of Object.entries(headers({ "Content-Type": "application/octet-stream" }))) x.setRequestHeader(k, v);
    x.upload.onprogress = (e) => onProgress(e.loaded, e.total);
    x.onload = () => {
      if (x.status < 300) return resolve();
      try {
        const b = JSON.parse(x.responseText);
        reject(new ApiError(b.message, x.status, b.code));
      } catch {
        reject(new ApiError(x.responseText || `HTTP ${x.status}`, x.status, String(x.status)));
      }
    };
    x.onerror = () => reject(new ApiError("the upload failed: the server could not be reached", 0, "NETWORK"));
    x.send(data);
  });
}

export const q = encodeURIComponent;

/** "3m ago", "in 25m". */
export function relative(iso: string | null | undefined): string {
  if (!iso) return "–";
  const d = (Date.parse(iso) - Date.now()) / 1000;
  const a = Math.abs(d);
  const t = a < 60 ? `${Math.round(a)}s` : a < 3600 ? `${Math.round(a / 60)}m` : a < 86400 ? `${Math.round(a / 3600)}h` : `${Math.round(a / 86400)}d`;
  return d < 0 ? `${t} ago` : `in ${t}`;
}

export interface ServerEvent {
  id: string;
  type: string;
  sandbox_id: string | null;
  timestamp: string;
  [k: string]: unknown;
}

/** Follows the server's event stream (SSE) until `signal` aborts, reconnecting after a drop. */
export async function followEvents(onEvent: (e: ServerEvent) => void, signal: AbortSignal): Promise<void> {
  let last: string | null = null;
  while (!signal.aborted) {
    try {
      const r = await fetch(`/api/v1/events?${last ? `last_event_id=${last}` : "tail=100"}`, { headers: headers(), signal });
      if (!r.ok) throw await failure(r);
      const reader = r.body!.getReader();
      const dec = new TextDecoder();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        let end: number;
        while ((end = buf.indexOf("\n\n")) >= 0) {
          const frame = buf.slice(0, end);
          buf = buf.slice(end + 2);
          const data = frame
            .split("\n")
            .filter((l) => l.startsWith("data: "))
            .map((l) => l.slice(6))
            .join("\n");
          if (!data) continue;
          const e = JSON.parse(data) as ServerEvent;
          last = e.id;
          onEvent(e);
        }
      }
    } catch {
      if (signal.aborted) return;
    }
    await new Promise((r) => setTimeout(r, 2000));
  }
}
