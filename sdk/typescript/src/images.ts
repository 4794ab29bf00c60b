// Images on the server: list, pull (a job whose progress is reported as it goes), import an
// archive by uploading it, export one as an OCI archive, push one to a registry, remove.
import { errorFromBody } from "./errors.js";
import type { Transport } from "./http.js";
import { ndjson } from "./ndjson.js";
import type { BuildJob, BuildOptions, ImageInfo, PullJob, PushResult } from "./types.js";

export class Images {
  /** @internal */
  constructor(private readonly http: Transport) {}

  list(): Promise<ImageInfo[]> {
    return this.http.json("GET", "/images");
  }

  /**
   * Pulls an image from its registry and resolves once it is installed; `onProgress` gets each
   * progress line (layers fetched, root filesystem built) as the server reports it.
   */
  async pull(reference: string, opts: { onProgress?: (line: string) => void; pollMs?: number } = {}): Promise<PullJob> {
    let job = await this.http.json<PullJob>("POST", "/images/pull", { body: { image: reference } });
    let seen = 0;
    for (;;) {
      // The server keeps the latest lines and counts them all: report those not seen yet.
      const fresh = Math.min(job.progress.length, job.progress_total - seen);
      for (const line of job.progress.slice(job.progress.length - fresh)) opts.onProgress?.(line);
      seen = job.progress_total;
      if (job.state === "done") return job;
      if (job.state === "error") throw errorFromBody({ code: job.error_code, message: job.error });
      await new Promise((r) => setTimeout(r, opts.pollMs ?? 250));
      job = await this.http.json<PullJob>("GET", `/images/pulls/${encodeURIComponent(job.id)}`);
    }
  }

  /**
   * Imports an image from an archive: a `docker save` tarball, a skopeo docker-archive, or an
   * OCI archive (a tarred OCI layout). `name` names the result (a docker save archive carries
   * its own), `tag` its tag, `ref` picks one image of several in the archive.
   */
  import(archive: Uint8Array | ReadableStream<Uint8Array> | AsyncIterable<Uint8Array>, opts: { name?: string; tag?: string; ref?: string } = {}): Promise<ImageInfo> {
    return this.http.json("POST", "/images/import", { raw: archive, contentType: "application/x-tar", query: opts, timeoutMs: null });
  }

  /**
   * Builds an image from a Dockerfile: `context` is the build context as a tar (bytes or a
   * stream). Resolves with the finished job (state "done", "error" or "cancelled"); `onLog` gets
   * each log line as the server writes it.
   */
  async build(context: Uint8Array | ReadableStream<Uint8Array> | AsyncIterable<Uint8Array>, opts: BuildOptions, onLog?: (line: string) => void): Promise<BuildJob> {
    const job = await this.startBuild(context, opts);
    const res = await this.http.send("GET", `/builds/${encodeURIComponent(job.id)}/log`, { timeoutMs: null });
    for await (const m of ndjson<{ line?: string; done?: boolean }>(res)) if (m.line !== undefined) onLog?.(m.line);
    return this.buildJob(job.id);
  }

  /** Starts a build and returns its job at once (poll with `buildJob`, stop with `cancelBuild`). */
  startBuild(context: Uint8Array | ReadableStream<Uint8Array> | AsyncIterable<Uint8Array>, opts: BuildOptions): Promise<BuildJob> {
    const query = {
      tag: opts.tag,
      dockerfile: opts.dockerfile,
      build_arg: opts.buildArgs ? Object.entries(opts.buildArgs).map(([k, v]) => `${k}=${v}`) : undefined,
      network: opts.network,
      allow: opts.allow,
      no_cache: opts.noCache ? "true" : undefined,
      target: opts.target,
      memory_mb: opts.memory_mb !== undefined ? String(opts.memory_mb) : undefined,
    };
    return this.http.json("POST", "/builds", { raw: context, contentType: "application/x-tar", query, timeoutMs: null });
  }

  buildJob(id: string): Promise<BuildJob> {
    return this.http.json("GET", `/builds/${encodeURIComponent(id)}`);
  }

  /** Cancels a running build: its RUN is killed and its sandboxes removed. */
  cancelBuild(id: string): Promise<BuildJob> {
    return this.http.json("DELETE", `/builds/${encodeURIComponent(id)}`);
  }

  /** An image as an OCI archive stream (also readable by `docker load`, skopeo and Podman). */
  async export(name: string): Promise<ReadableStream<Uint8Array>> {
    const res = await this.http.send("GET", `/images/${encodeURIComponent(name)}/export`, { timeoutMs: null });
    if (!res.body) throw new TypeError("the server sent no archive body");
    return res.body;
  }

  /** Pushes a local image to a registry: `reference` (default: the image's own name), with the server's registry credentials. */
  push(name: string, reference?: string): Promise<PushResult> {
    return this.http.json("POST", `/images/${encodeURIComponent(name)}/push`, { body: reference ? { reference } : {}, timeoutMs: null });
  }

  /** Removes a local image (refused while a sandbox uses it) and the blobs no image needs any more. */
  remove(name: string): Promise<{ status: "deleted"; pruned_blobs: number }> {
    return this.http.json("DELETE", `/images/${encodeURIComponent(name)}`);
  }
}
