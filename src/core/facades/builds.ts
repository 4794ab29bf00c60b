// Dockerfile builds: from a context directory on this host, or from an uploaded context as a job
// whose log can be followed and which can be cancelled (build/).
import type { SandboxTable } from "../sandboxes/table.js";
import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { ForgevmError } from "../../http/errors.js";
import { build, checkDockerfile, type BuildHost, type BuildOptions, type BuildReport, type BuildResult, type BuildWork } from "../builder/builder.js";
import type { BuildCache } from "../builder/cache.js";
import { BuildContext, unpackContext } from "../builder/context.js";
import { BuildJobs, removeDir, type BuildJob } from "../builder/jobs.js";
import type { DiskSpace } from "../host/disk-space.js";
import type { Sandbox } from "../guest/sandbox.js";
import type { SpawnOptions } from "../options.js";
import type { ImagesFacade } from "./images.js";

/** What builds need from outside the core context. */
export interface BuildHooks {
  cache: BuildCache;
  images: ImagesFacade;
  spawn: (opts: SpawnOptions) => Promise<Sandbox>;
}

/** What the build operations use: where images live, where "image.built" goes, the disk's room, and whether the core is closing. */
export interface BuildsDeps extends BuildHost {
  readonly disk: DiskSpace;
  /** Whether the core is closing (nothing new starts). */
  readonly table: Pick<SandboxTable, "closed">;
}

export class BuildsFacade {
  private readonly jobs = new BuildJobs();

  constructor(
    private readonly core: BuildsDeps,
    private readonly hooks: BuildHooks,
  ) {}

  /** Builds an image from the Dockerfile in a context directory on this host, waiting for it. */
  async run(
    contextDir: string,
    opts: BuildOptions,
    report: BuildReport = { steps: () => {}, step: () => {}, log: () => {} },
    signal: AbortSignal = new AbortController().signal,
  ): Promise<BuildResult> {
    const ctx = await BuildContext.open(contextDir);
    return build(this.core, this.work(), ctx, opts, report, signal);
  }

  /** Starts a build of an uploaded context (a tar stream) as a job; returns it once the context is unpacked. */
  async start(context: AsyncIterable<Buffer>, opts: BuildOptions): Promise<BuildJob> {
    this.core.disk.require("a build");
    if (this.core.table.closed) throw new ForgevmError("UNAVAILABLE", "the server is shutting down");
    const dir = join(this.core.paths.dataDir, `.build-context-${randomBytes(6).toString("hex")}`);
    try {
      await unpackContext(context, dir);
      const ctx = await BuildContext.open(dir);
      await checkDockerfile(ctx, opts); // a Dockerfile that cannot be built is a 400 now, not a failed job
      return this.jobs.start(opts, (o, report, signal) => build(this.core, this.work(), ctx, o, report, signal), removeDir(dir));
    } catch (e) {
      await removeDir(dir)();
      throw e;
    }
  }

  /** A build job by id. */
  job(id: string): BuildJob {
    return this.jobs.get(id);
  }

  /** Cancels a running build job. */
  cancel(id: string): BuildJob {
    return this.jobs.cancel(id);
  }

  /** Calls `onLine` with each new line of a build's log, then null when it ends; returns the unsubscribe. */
  follow(id: string, onLine: (line: string | null) => void): () => void {
    return this.jobs.follow(id, onLine);
  }

  /** Cancels every running build and waits for them to end (the server is closing). */
  closeAll(): Promise<void> {
    return this.jobs.closeAll();
  }

  private work(): BuildWork {
    const images = this.hooks.images;
    return {
      ...images.work(),
      cache: this.hooks.cache,
      pull: (ref) => images.pull(ref),
      spawnBuild: (image, o) =>
        this.hooks.spawn({ image, network: o.network ?? "none", allow: o.allow, memoryMb: o.memoryMb, ttlMs: 2 * 60 * 60_000, metadata: { "forgevm.build": o.buildId } }),
      removeImage: (n) => images.remove(n),
    };
  }
}
