// The build cache: for each step's key (its parent's key, its instruction, and the hash of what
// it reads), the layer it made and the image config after it. A hit costs a file read; the
// layer's blob must still be in the blob store (a pruned blob is a miss).
import { mkdir, readdir, readFile, rename, writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { BlobStore } from "../../images/blobs.js";
import type { Descriptor } from "../../images/oci.js";

export interface CachedStep {
  /** The layer it made; absent for a step that changes the config only. */
  layer?: Descriptor;
  diffId?: string;
  /** The image config doc after the step. */
  config: unknown;
  created: string;
}

export class BuildCache {
  constructor(
    private readonly dir: string,
    private readonly blobs: BlobStore,
  ) {}

  private file(key: string): string {
    return join(this.dir, `${key}.json`);
  }

  async get(key: string): Promise<CachedStep | null> {
    const raw = await readFile(this.file(key), "utf8").catch(() => null);
    if (!raw) return null;
    try {
      const step = JSON.parse(raw) as CachedStep;
      return !step.layer || (await this.blobs.has(step.layer.digest)) ? step : null;
    } catch {
      return null;
    }
  }

  async put(key: string, step: CachedStep): Promise<void> {
    await mkdir(this.dir, { recursive: true });
    const tmp = `${this.file(key)}.tmp`;
    await writeFile(tmp, JSON.stringify(step));
    await rename(tmp, this.file(key));
  }

  /** Layer digests the cache refers to (kept by blob pruning). */
  async layers(): Promise<string[]> {
    const out: string[] = [];
    for (const f of await readdir(this.dir).catch(() => [] as string[])) {
      if (!f.endsWith(".json")) continue;
      const s = await readFile(join(this.dir, f), "utf8").then(
        (t) => JSON.parse(t) as CachedStep,
        () => null,
      );
      if (s?.layer) out.push(s.layer.digest);
    }
    return out;
  }
}
