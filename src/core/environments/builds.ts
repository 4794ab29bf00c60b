// Environment builds: queued in the store, run `concurrency` at a time through the Dockerfile
// builder in VMs, then pushed to each target. A build goes queued → building → ready | failed |
// canceled and names the step it is at (STEPS). Its log is kept in memory while it runs
// (followers get each line as it comes) and written to the store at every step and every
// second; cancel aborts the builder (which kills the running step and removes its sandboxes and
// scratch images) and waits until it has stopped.
import { createHash, randomUUID } from "node:crypto";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { Credentials } from "../../images/registry.js";
import type { ArtifactStatus, EnvArtifactRow, EnvBuildRow, EnvBuildStatus, EnvironmentStore } from "../../store/environments.js";
import type { BuildOptions, BuildReport, BuildResult, BuildStep } from "../builder/builder.js";
import { toForgevmError } from "../error-map.js";
import { explainPackageFailure } from "./failures.js";
import { badRequest, conflict, ForgevmError, notFound } from "../../http/errors.js";
import type { RegistryConnections } from "./connections.js";
import { cleanSpec, type CleanSpec } from "./spec.js";
import { environmentDockerfile, type PackageSources } from "./steps.js";

export const STEPS = ["validate_spec", "generate_dockerfile", "build", "tag_and_push_targets", "finalize"] as const;
const ENDED: EnvBuildStatus[] = ["ready", "failed", "canceled"];
const MAX_LOG = 512 * 1024;
const MAX_LINE = 4096;
const FLUSH_MS = 1000;

/** What a build needs from the rest of the core. */
export interface EnvironmentWork {
  build(contextDir: string, o: BuildOptions, report: BuildReport, signal: AbortSignal): Promise<BuildResult>;
  push(image: string, reference: string, credentials: Credentials, log: (m: string) => void): Promise<{ digest: string }>;
  /** Which of `paths` a local image has; null when the image is not on this server. */
  imageHas(image: string, paths: string[]): Promise<Set<string> | null>;
  /** Bytes the image takes on disk. */
  imageBytes(image: string): Promise<number>;
  /** Where build contexts are written (inside the data directory). */
  scratchDir: string;
  memoryMb: number;
  concurrency: number;
}

export interface ArtifactView {
  target: string;
  image_ref: string;
  digest?: string;
  status: ArtifactStatus;
  error?: string;
  created_at: string;
  updated_at: string;
}

export interface EnvBuildView {
  id: string;
  spec_id: string;
  owner_id: string;
  status: EnvBuildStatus;
  current_step: string | null;
  log: string;
  image_size_bytes: number;
  digest_local?: string;
  error?: string;
  visibility?: string;
  /** The builder's steps: each instruction with pending, running, cached, done or error. */
  steps: BuildStep[];
  created_at: string;
  finished_at?: string;
  updated_at: string;
  artifacts: ArtifactView[];
}

interface Live {
  lines: string[];
  bytes: number;
  dropped: number;
  abort: AbortController;
  listeners: Set<(line: string | null) => void>;
  steps: BuildStep[];
  lastFlush: number;
  done?: Promise<void>;
}

const slug = (s: string) =>
  s
    .toLowerCase()
    .replace(/[^a-z0-9._-]+/g, "-")
    .replace(/^[^a-z0-9]+|[^a-z0-9]+$/g, "")
    .slice(0, 60) || "x";

/** The local image an environment builds into: one repository per owner and spec name, one tag per content. */
export function localImageName(spec: CleanSpec, dockerfile: string): string {
  return `forgevm/env-${slug(spec.owner_id)}-${slug(spec.name)}:${createHash("sha256").update(dockerfile).digest("hex").slice(0, 12)}`;
}

const artifactView = (a: EnvArtifactRow): ArtifactView => ({
  target: a.target,
  image_ref: a.image_ref,
  ...(a.digest ? { digest: a.digest } : {}),
  status: a.status,
  ...(a.error ? { error: a.error } : {}),
  created_at: a.created_at,
  updated_at: a.updated_at,
});

export class EnvironmentBuilds {
  private readonly live = new Map<string, Live>();
  private readonly queue: string[] = [];
  private running = 0;
  private closed = false;

  constructor(
    private readonly store: EnvironmentStore,
    private readonly connections: RegistryConnections,
    private readonly work: EnvironmentWork,
    private readonly sources: PackageSources,
  ) {
    // A build the server stopped during cannot go on: its builder and sandboxes are gone.
    for (const b of store.buildsIn(["queued", "building"])) {
      store.updateBuild(b.id, { status: "failed", error: "the server stopped during the build; start it again", finished_at: new Date().toISOString() });
      for (const a of store.artifacts(b.id))
        if (a.status === "pending" || a.status === "pushing") store.updateArtifact(b.id, a.target, { status: "failed", error: "the server stopped" });
    }
  }

  /** Queues a build of a spec to `targets` (default local); its artifacts start as pending. */
  create(specId: string, targets: string[] | undefined, visibility: string | undefined): EnvBuildView {
    if (this.closed) throw new ForgevmError("UNAVAILABLE", "the server is shutting down");
    if (typeof specId !== "string" || !specId.trim()) throw badRequest("spec_id: required");
    const specRow = this.store.spec(specId.trim());
    if (!specRow) throw notFound(`environment spec ${specId} not found`);
    const spec = cleanSpec(specRow);
    const wanted = [...new Set((targets?.length ? targets : ["local"]).map((t) => String(t).trim()).filter(Boolean))];
    if (!wanted.length) throw badRequest("targets: name at least one (local, ghcr, dockerhub or a registry connection id)");
    const id = randomUUID();
    const now = new Date().toISOString();
    const tag = `build-${id.replace(/-/g, "").slice(0, 12)}`;
    const { dockerfile } = environmentDockerfile(spec, this.sources);
    const artifacts: EnvArtifactRow[] = wanted.map((target, position) => {
      let imageRef: string;
      let connectionId: string | null = null;
      if (target === "local") imageRef = localImageName(spec, dockerfile);
      else {
        const c = this.connections.resolve(spec.owner_id, target);
        connectionId = c.id;
        imageRef = `${c.registry}/${slug(c.username)}/${slug(spec.name)}:${tag}`;
      }
      return { build_id: id, position, target, connection_id: connectionId, image_ref: imageRef, digest: null, status: "pending", error: null, created_at: now, updated_at: now };
    });
    const row: EnvBuildRow = {
      id,
      spec_id: specRow.id,
      owner_id: spec.owner_id,
      status: "queued",
      current_step: null,
      log: "",
      steps: null,
      image_size_bytes: 0,
      digest_local: null,
      error: null,
      visibility: visibility ?? null,
      created_at: now,
      finished_at: null,
      updated_at: now,
    };
    this.store.insertBuild(row, artifacts);
    this.live.set(id, { lines: [], bytes: 0, dropped: 0, abort: new AbortController(), listeners: new Set(), steps: [], lastFlush: 0 });
    this.queue.push(id);
    const view = this.view(id); // as queued: pump() may start it at once
    this.pump();
    return view;
  }

  /** A build as every interface shows it (its log live while it runs). */
  view(id: string): EnvBuildView {
    const b = this.store.build(id);
    if (!b) throw notFound(`environment build ${id} not found`);
    return this.viewOf(b);
  }

  private viewOf(b: EnvBuildRow): EnvBuildView {
    const live = this.live.get(b.id);
    return {
      id: b.id,
      spec_id: b.spec_id,
      owner_id: b.owner_id,
      status: b.status,
      current_step: b.current_step,
      log: live ? this.logText(live) : b.log,
      image_size_bytes: b.image_size_bytes,
      ...(b.digest_local ? { digest_local: b.digest_local } : {}),
      ...(b.error ? { error: b.error } : {}),
      ...(b.visibility ? { visibility: b.visibility } : {}),
      steps: (live?.steps.length ? live.steps : (b.steps as BuildStep[] | null)) ?? [],
      created_at: b.created_at,
      ...(b.finished_at ? { finished_at: b.finished_at } : {}),
      updated_at: b.updated_at,
      artifacts: this.store.artifacts(b.id).map(artifactView),
    };
  }

  /** Builds newest first (of one owner, or all), at most `limit`. */
  list(ownerId: string | undefined, limit = 30): EnvBuildView[] {
    if (!Number.isInteger(limit) || limit < 1 || limit > 200) throw badRequest("limit: must be 1 to 200");
    return this.store.builds(ownerId?.trim() || undefined, limit).map((b) => this.viewOf(b));
  }

  /** Stops a queued or running build and waits until it has; 409 once it has ended. */
  async cancel(id: string): Promise<EnvBuildView> {
    const b = this.store.build(id);
    if (!b) throw notFound(`environment build ${id} not found`);
    if (ENDED.includes(b.status)) throw conflict(`environment build ${id} is ${b.status} already`);
    const live = this.live.get(id);
    const q = this.queue.indexOf(id);
    if (q >= 0) {
      this.queue.splice(q, 1);
      this.end(id, "canceled", "canceled before it started");
    } else if (live) {
      this.log(id, "cancel: stopping the build");
      live.abort.abort();
      await Promise.race([live.done, new Promise((r) => setTimeout(r, 60_000).unref())]);
    }
    return this.view(id);
  }

  /** Calls `onLine` with each new log line, then null when the build ends; returns the unsubscribe. */
  follow(id: string, onLine: (line: string | null) => void): () => void {
    const live = this.live.get(id);
    if (!live) {
      onLine(null);
      return () => {};
    }
    live.listeners.add(onLine);
    return () => live.listeners.delete(onLine);
  }

  /** Cancels every build and waits for the running ones to stop (server shutdown). */
  async close(): Promise<void> {
    this.closed = true;
    for (const id of this.queue.splice(0)) this.end(id, "canceled", "the server shut down");
    const running = [...this.live.values()];
    for (const l of running) l.abort.abort();
    await Promise.all(running.map((l) => l.done));
  }

  private pump(): void {
    while (this.running < this.work.concurrency && this.queue.length) {
      const id = this.queue.shift()!;
      const live = this.live.get(id)!;
      this.running++;
      live.done = this.run(id, live).finally(() => {
        this.running--;
        this.pump();
      });
    }
  }

  private async run(id: string, live: Live): Promise<void> {
    const signal = live.abort.signal;
    let dir: string | null = null;
    let image: string | null = null;
    try {
      this.step(id, "validate_spec", "building");
      const specRow = this.store.spec(this.store.build(id)!.spec_id);
      if (!specRow) throw badRequest("the spec of this build was removed");
      const spec = cleanSpec(specRow);
      this.log(id, `spec ${specRow.id}: ${spec.owner_id}/${spec.name} from ${spec.base_image}`);
      if (spec.python_version) {
        const has = await this.work.imageHas(spec.base_image, [`/usr/bin/python${spec.python_version}`, `/usr/local/bin/python${spec.python_version}`]);
        if (has && !has.size)
          throw badRequest(`python_version: ${spec.base_image} has no Python ${spec.python_version}; choose a base image that has it, or leave python_version out`);
      }

      this.step(id, "generate_dockerfile");
      const { dockerfile, allow } = environmentDockerfile(spec, this.sources);
      image = localImageName(spec, dockerfile);
      dir = await mkdtemp(join(this.work.scratchDir, "env-build-"));
      await writeFile(join(dir, "Dockerfile"), dockerfile);
      for (const l of dockerfile.trimEnd().split("\n")) this.log(id, `  ${l.length > 300 ? `${l.slice(0, 300)}…` : l}`);
      this.log(id, `network: ${allow.length ? allow.join(", ") : "none"}`);

      this.step(id, "build");
      // The output of the builder's step in progress: what a failed package step is explained from.
      let stepLines: string[] = [];
      let stepText = "";
      const report: BuildReport = {
        steps: (list) => {
          live.steps = list.map((s) => ({ ...s }));
        },
        step: (i, patch) => {
          Object.assign(live.steps[i], patch);
          this.flush(id, live, true);
        },
        log: (line) => {
          const step = /^Step \d+\/\d+ \(line \d+\): (.*)/.exec(line);
          if (step) [stepText, stepLines] = [step[1], []];
          else if (stepLines.length < 2000) stepLines.push(line);
          this.log(id, line);
        },
      };
      const result = await this.work.build(dir, { tag: image, network: allow.length ? "allowlist" : "none", allow, memoryMb: this.work.memoryMb }, report, signal).catch((e) => {
        const why = signal.aborted || !stepText.startsWith("RUN ") ? null : explainPackageFailure(stepText.includes("apt-get") ? "apt" : "pip", stepLines, this.sources);
        throw why ? badRequest(why) : e;
      });
      const size = await this.work.imageBytes(result.image.name);
      this.store.updateBuild(id, { digest_local: result.digest, image_size_bytes: size });

      this.step(id, "tag_and_push_targets");
      const failures: string[] = [];
      for (const a of this.store.artifacts(id)) {
        if (signal.aborted) throw new ForgevmError("CONFLICT", "the build was cancelled");
        if (a.target === "local") {
          this.store.updateArtifact(id, a.target, { status: "ready", digest: result.digest, image_ref: result.image.name });
          continue;
        }
        this.store.updateArtifact(id, a.target, { status: "pushing" });
        try {
          const c = this.store.connection(a.connection_id ?? "");
          if (!c) throw badRequest(`registry connection ${a.connection_id} was deleted`);
          this.log(id, `push ${a.image_ref} (${c.provider} as ${c.username})`);
          const pushed = await this.work.push(result.image.name, a.image_ref, await this.connections.credentials(c), (m) => this.log(id, `  ${m}`));
          this.store.updateArtifact(id, a.target, { status: "ready", digest: pushed.digest });
          this.log(id, `pushed ${a.image_ref}@${pushed.digest}`);
        } catch (e) {
          const msg = toForgevmError(e).message;
          this.store.updateArtifact(id, a.target, { status: "failed", error: msg });
          this.log(id, `push to ${a.target} failed: ${msg}`);
          failures.push(`${a.target}: ${msg}`);
        }
      }

      this.step(id, "finalize");
      if (failures.length) this.end(id, "failed", `pushes failed: ${failures.join("; ")}`);
      else {
        this.log(id, `ready: ${result.image.name} (${result.digest}, ${size} bytes)`);
        this.end(id, "ready");
      }
    } catch (e) {
      const canceled = signal.aborted;
      const msg = canceled ? "canceled" : toForgevmError(e).message;
      if (!canceled) this.log(id, `error: ${msg}`);
      this.end(id, canceled ? "canceled" : "failed", msg);
    } finally {
      if (dir) await rm(dir, { recursive: true, force: true });
    }
  }

  private step(id: string, step: (typeof STEPS)[number], status?: EnvBuildStatus): void {
    this.log(id, `== ${step}`);
    this.store.updateBuild(id, { current_step: step, ...(status ? { status } : {}) });
    const live = this.live.get(id);
    if (live) this.flush(id, live, true);
  }

  private log(id: string, text: string): void {
    const live = this.live.get(id);
    if (!live) return;
    const line = text.length > MAX_LINE ? `${text.slice(0, MAX_LINE)}… (${text.length - MAX_LINE} more characters)` : text;
    live.lines.push(line);
    live.bytes += line.length + 1;
    while (live.bytes > MAX_LOG && live.lines.length > 1) {
      live.bytes -= live.lines.shift()!.length + 1;
      live.dropped++;
    }
    for (const l of live.listeners) l(line);
    this.flush(id, live, false);
  }

  private logText(live: Live): string {
    return (live.dropped ? `[${live.dropped} earlier lines dropped]\n` : "") + live.lines.map((l) => `${l}\n`).join("");
  }

  private flush(id: string, live: Live, now: boolean): void {
    if (!now && Date.now() - live.lastFlush < FLUSH_MS) return;
    live.lastFlush = Date.now();
    this.store.updateBuild(id, { log: this.logText(live), steps: live.steps });
  }

  // A build's end: its status, the artifacts it did not reach, the log in the store, followers told.
  private end(id: string, status: EnvBuildStatus, error?: string): void {
    const live = this.live.get(id);
    for (const a of this.store.artifacts(id))
      if (a.status === "pending" || a.status === "pushing")
        this.store.updateArtifact(id, a.target, { status: status === "canceled" ? "canceled" : "failed", error: error ?? "the build did not finish" });
    if (live) this.flush(id, live, true);
    this.store.updateBuild(id, { status, error: status === "ready" ? null : (error ?? null), finished_at: new Date().toISOString() });
    if (!live) return;
    this.live.delete(id);
    for (const l of live.listeners) l(null);
    live.listeners.clear();
  }
}
