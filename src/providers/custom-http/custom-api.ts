// A client of the ForgeVM Custom HTTP provider protocol (docs/custom-http.md): JSON requests with
// X-API-Key when a key is set, a status of 400 or more a failure whose body is shown verbatim,
// each call bounded by the configured timeout.

/** A failure the backend answered, its status and body as it sent them. */
export class CustomHttpError extends Error {
  override name = "CustomHttpError";
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** A file as the protocol describes it (keys matched without regard to case). */
export interface CustomFileInfo {
  path: string;
  size: number;
  mode: string;
  isDir: boolean;
  modTime: string;
}

/** The protocol's keys, whatever their case (`Path`, `path`, `PATH`); underscores are not ignored. */
function fileInfoOf(raw: unknown): CustomFileInfo {
  const o = Object.fromEntries(Object.entries((raw ?? {}) as Record<string, unknown>).map(([k, v]) => [k.toLowerCase(), v]));
  return { path: String(o.path ?? ""), size: Number(o.size ?? 0), mode: String(o.mode ?? ""), isDir: o.isdir === true, modTime: String(o.modtime ?? "") };
}

export class CustomApi {
  constructor(
    private readonly baseUrl: string,
    private readonly apiKey: string,
    private readonly timeoutMs: number,
  ) {}

  private async send(method: string, path: string, body?: unknown, timeoutMs = this.timeoutMs): Promise<Response> {
    const headers: Record<string, string> = { "content-type": "application/json" };
    if (this.apiKey) headers["x-api-key"] = this.apiKey;
    let r: Response;
    try {
      r = await fetch(`${this.baseUrl.replace(/\/+$/, "")}${path}`, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: AbortSignal.timeout(timeoutMs),
      });
    } catch (e) {
      const err = e as Error;
      throw new CustomHttpError(0, err.name === "TimeoutError" ? `${method} ${path}: no answer within ${timeoutMs} ms` : `${method} ${path}: ${err.message}`);
    }
    if (r.status >= 400) throw new CustomHttpError(r.status, `${method} ${path}: ${r.status} ${(await r.text()).slice(0, 2000)}`);
    return r;
  }

  private async json<T>(method: string, path: string, body?: unknown, timeoutMs?: number): Promise<T> {
    return (await (await this.send(method, path, body, timeoutMs)).json()) as T;
  }

  private q(params: Record<string, string>): string {
    return `?${new URLSearchParams(params)}`;
  }

  async health(): Promise<void> {
    await this.send("GET", "/health");
  }

  async spawn(body: { image: string; memory_mb?: number; vcpus?: number; disk_size_mb?: number; metadata?: Record<string, string> }): Promise<string> {
    const r = await this.json<{ id?: unknown }>("POST", "/spawn", body);
    if (typeof r.id !== "string" || !r.id) throw new CustomHttpError(502, "POST /spawn: the backend answered without an id");
    return r.id;
  }

  async exec(sandboxId: string, command: string, args: string[] | undefined, env: Record<string, string> | undefined, workdir: string | undefined, timeoutMs: number) {
    const r = await this.json<{ exit_code?: number; stdout?: string; stderr?: string }>(
      "POST",
      "/exec",
      { sandbox_id: sandboxId, command, ...(args ? { args } : {}), ...(env && Object.keys(env).length ? { env } : {}), ...(workdir ? { workdir } : {}) },
      timeoutMs,
    );
    return { exitCode: Number(r.exit_code ?? -1), stdout: String(r.stdout ?? ""), stderr: String(r.stderr ?? "") };
  }

  async writeFile(sandboxId: string, path: string, content: string, mode?: number): Promise<void> {
    await this.send("POST", "/files", { sandbox_id: sandboxId, path, content, ...(mode !== undefined ? { mode: mode.toString(8).padStart(4, "0") } : {}) });
  }

  /** A file's bytes as the backend sends them, chunk by chunk (never the whole file in memory). */
  async readFile(sandboxId: string, path: string): Promise<AsyncIterable<Uint8Array>> {
    const r = await this.send("GET", `/files${this.q({ sandbox_id: sandboxId, path })}`);
    return (r.body ?? []) as AsyncIterable<Uint8Array>;
  }

  async list(sandboxId: string, path: string): Promise<CustomFileInfo[]> {
    const r = await this.json<unknown>("GET", `/files/list${this.q({ sandbox_id: sandboxId, path })}`);
    if (!Array.isArray(r)) throw new CustomHttpError(502, "GET /files/list: the backend answered something other than an array");
    return r.map(fileInfoOf);
  }

  async stat(sandboxId: string, path: string): Promise<CustomFileInfo> {
    return fileInfoOf(await this.json<unknown>("GET", `/files/stat${this.q({ sandbox_id: sandboxId, path })}`));
  }

  async glob(sandboxId: string, pattern: string): Promise<string[]> {
    const r = await this.json<unknown>("GET", `/files/glob${this.q({ sandbox_id: sandboxId, pattern })}`);
    if (!Array.isArray(r)) throw new CustomHttpError(502, "GET /files/glob: the backend answered something other than an array");
    return r.map(String);
  }

  async remove(sandboxId: string, path: string, recursive: boolean): Promise<void> {
    await this.send("DELETE", "/files", { sandbox_id: sandboxId, path, recursive });
  }

  async move(sandboxId: string, from: string, to: string): Promise<void> {
    await this.send("POST", "/files/move", { sandbox_id: sandboxId, old_path: from, new_path: to });
  }

  async chmod(sandboxId: string, path: string, mode: number): Promise<void> {
    await this.send("POST", "/files/chmod", { sandbox_id: sandboxId, path, mode: mode.toString(8) });
  }

  async status(sandboxId: string): Promise<string> {
    const r = await this.json<Record<string, unknown>>("GET", `/status/${encodeURIComponent(sandboxId)}`);
    const state = Object.entries(r).find(([k]) => k.toLowerCase() === "state")?.[1];
    return String(state ?? "unknown");
  }

  async destroy(sandboxId: string): Promise<void> {
    await this.send("DELETE", `/sandboxes/${encodeURIComponent(sandboxId)}`);
  }
}
