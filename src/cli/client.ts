// A small HTTP client of the REST API for the CLI commands that talk to a running server.
export class ApiClient {
  constructor(
    readonly baseUrl: string,
    private readonly apiKey?: string,
  ) {}

  private headers(json: boolean): Record<string, string> {
    return { ...(json ? { "Content-Type": "application/json" } : {}), ...(this.apiKey ? { "X-API-Key": this.apiKey } : {}) };
  }

  async request<T>(method: string, path: string, body?: unknown): Promise<T> {
    const res = await this.fetch(method, path, body);
    const text = await res.text();
    const data = text ? JSON.parse(text) : null;
    if (!res.ok) throw new Error(data?.message ? `${data.message} (${data.code ?? res.status})` : `HTTP ${res.status}`);
    return data as T;
  }

  async fetch(method: string, path: string, body?: unknown): Promise<Response> {
    const url = `${this.baseUrl.replace(/\/$/, "")}/api/v1${path}`;
    try {
      return await fetch(url, { method, headers: this.headers(body !== undefined), body: body === undefined ? undefined : JSON.stringify(body) });
    } catch (e) {
      throw new Error(
        `cannot reach the ForgeVM server at ${this.baseUrl} (${(e as Error & { cause?: Error }).cause?.message ?? (e as Error).message}); start it with: forgevm serve`,
      );
    }
  }
}
