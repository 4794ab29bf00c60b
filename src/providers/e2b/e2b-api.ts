// The calls the e2b provider makes to an E2B-compatible service: the control plane (create, set
// timeout, kill) with the API key, and a sandbox's envd (file upload; process start with stdin,
// send input, close stdin) over the Connect protocol with JSON messages.
import { RemoteError } from "../relayed-agent.js";

export interface E2bEndpoints {
  /** The control plane, e.g. https://api.e2b.app or a ForgeVM server's root. */
  apiUrl: string;
  apiKey: string;
  /** One address for every sandbox's envd, told apart by headers (E2B_SANDBOX_URL); else https://49983-<id>.<domain>. */
  sandboxUrl?: string;
  /** The sandboxes' domain when the create response names none (e.g. e2b.app). */
  domain?: string;
}

export interface E2bSandbox {
  sandboxID: string;
  envdAccessToken?: string;
  domain?: string | null;
}

/** One event of a process started through envd. */
export type ProcessEvent = { start: { pid: number } } | { data: { stdout?: string; stderr?: string } } | { end: { exitCode?: number; error?: string } } | { keepalive: object };

const ENVD_PORT = 49983;
/** envd's own user for "root": the agent needs it to run processes as any user. */
const ROOT = `Basic ${Buffer.from("root:").toString("base64")}`;

export class E2bApi {
  constructor(private readonly e: E2bEndpoints) {}

  get apiUrl(): string {
    return this.e.apiUrl;
  }

  /** A control-plane call. */
  async control<T = any>(method: string, path: string, body?: unknown): Promise<T> {
    const res = await this.fetch(`${this.e.apiUrl.replace(/\/+$/, "")}${path}`, {
      method,
      headers: { "X-API-Key": this.e.apiKey, ...(body !== undefined ? { "Content-Type": "application/json" } : {}) },
      body: body !== undefined ? JSON.stringify(body) : undefined,
    });
    return (await this.json(res)) as T;
  }

  /** Writes a file into the sandbox (as root). */
  async upload(sb: E2bSandbox, path: string, bytes: Buffer): Promise<void> {
    const form = new FormData();
    form.append("file", new Blob([new Uint8Array(bytes)]), path);
    const res = await this.fetch(`${this.envd(sb)}/files?${new URLSearchParams({ path, username: "root" })}`, { method: "POST", headers: this.envdHeaders(sb), body: form });
    await this.json(res);
  }

  /** Starts a process as root with its stdin open; yields its events until it ends. */
  async *start(sb: E2bSandbox, cmd: string, args: string[], signal?: AbortSignal): AsyncGenerator<ProcessEvent> {
    const msg = Buffer.from(JSON.stringify({ process: { cmd, args }, stdin: true }));
    const envelope = Buffer.concat([Buffer.from([0, 0, 0, 0, 0]), msg]);
    envelope.writeUInt32BE(msg.length, 1);
    const res = await this.fetch(`${this.envd(sb)}/process.Process/Start`, {
      method: "POST",
      headers: { ...this.envdHeaders(sb), "Content-Type": "application/connect+json", "Keepalive-Ping-Interval": "50" },
      body: envelope,
      signal,
    });
    if (!res.ok || !res.body) {
      await this.json(res);
      return;
    }
    let buf = Buffer.alloc(0);
    for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
      buf = Buffer.concat([buf, chunk]);
      while (buf.length >= 5 && buf.length >= 5 + buf.readUInt32BE(1)) {
        const flag = buf[0];
        const body = JSON.parse(buf.subarray(5, 5 + buf.readUInt32BE(1)).toString() || "{}");
        buf = buf.subarray(5 + buf.readUInt32BE(1));
        if (flag & 2) {
          if (body.error) throw new RemoteError(`envd: ${body.error.code}: ${body.error.message}`, 0);
          return;
        }
        if (body.event) yield body.event as ProcessEvent;
      }
    }
  }

  /** Sends bytes to a process's stdin. */
  async sendInput(sb: E2bSandbox, pid: number, bytes: Buffer): Promise<void> {
    await this.unary(sb, "process.Process/SendInput", { process: { pid }, input: { stdin: bytes.toString("base64") } });
  }

  async closeStdin(sb: E2bSandbox, pid: number): Promise<void> {
    await this.unary(sb, "process.Process/CloseStdin", { process: { pid } });
  }

  private async unary(sb: E2bSandbox, method: string, body: unknown): Promise<unknown> {
    const res = await this.fetch(`${this.envd(sb)}/${method}`, {
      method: "POST",
      headers: { ...this.envdHeaders(sb), "Content-Type": "application/json" },
      body: JSON.stringify(body),
    });
    return this.json(res);
  }

  private envd(sb: E2bSandbox): string {
    if (this.e.sandboxUrl) return this.e.sandboxUrl.replace(/\/+$/, "");
    const domain = sb.domain || this.e.domain;
    if (!domain) throw new RemoteError("e2b: the sandbox has no domain; set providers.e2b.domain or sandbox_url", 0);
    return `https://${ENVD_PORT}-${sb.sandboxID}.${domain}`;
  }

  private envdHeaders(sb: E2bSandbox): Record<string, string> {
    return {
      "E2b-Sandbox-Id": sb.sandboxID,
      "E2b-Sandbox-Port": String(ENVD_PORT),
      Authorization: ROOT,
      ...(sb.envdAccessToken ? { "X-Access-Token": sb.envdAccessToken } : {}),
    };
  }

  private async fetch(url: string, init: RequestInit): Promise<Response> {
    try {
      return await fetch(url, init);
    } catch (e) {
      throw new RemoteError(`${url.split("?")[0]} cannot be reached: ${(e as Error).message}`, 0);
    }
  }

  private async json(res: Response): Promise<unknown> {
    const text = await res.text();
    let body: any = text;
    try {
      body = text ? JSON.parse(text) : null;
    } catch {
      // not JSON
    }
    if (!res.ok) throw new RemoteError(`${res.url.split("?")[0]} answered ${res.status}: ${body?.message ?? String(text).slice(0, 200)}`, res.status);
    return body;
  }
}
