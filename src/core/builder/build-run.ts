// One Dockerfile build in progress: the stages built so far, the build sandboxes and temporary
// images it holds (and gives back at the end), and the three things every step kind needs of it —
// a sandbox holding a stage's image so far, a layer from what a step changed in it, and the cache.
// builder.ts drives it through the Dockerfile; steps/ has one file per kind of step.
import { randomBytes } from "node:crypto";
import type { Paths } from "../../config/paths.js";
import type { Dockerfile } from "../../images/dockerfile.js";
import { diffFiles, indexOf } from "../../images/file-index.js";
import { installImage } from "../../images/install.js";
import { childConfig, storeImage, storeLayer } from "../../images/oci-build.js";
import { parseImageConfig } from "../../images/oci.js";
import { ForgevmError } from "../../http/errors.js";
import { ignore } from "../../util/ignore.js";
import type { EventBus } from "../events.js";
import { layerTar } from "../guest/guest-layer.js";
import { scanGuest } from "../guest/guest-scan.js";
import type { Sandbox } from "../guest/sandbox.js";
import type { BuildContext } from "./context.js";
import { fixDiffIds, type BuildOptions, type BuildReport, type BuildWork, type StageState } from "./stages.js";

/** What a build takes from the server beyond its work ports: where images live, and where "image.built" goes. */
export interface BuildHost {
  paths: Paths;
  events: EventBus;
}

export class BuildRun {
  readonly buildId = randomBytes(4).toString("hex");
  /** The stages started so far, in order. */
  readonly states: StageState[] = [];
  /** Sandboxes of images named by COPY --from, destroyed at the end. */
  readonly helpers: Sandbox[] = [];
  private readonly tempImages: string[] = [];

  constructor(
    readonly host: BuildHost,
    readonly work: BuildWork,
    readonly ctx: BuildContext,
    readonly o: BuildOptions,
    readonly report: BuildReport,
    readonly signal: AbortSignal,
    readonly df: Dockerfile,
    /** The result's name. */
    readonly name: string,
  ) {}

  /** A 409 once the build was cancelled. */
  check(): void {
    if (this.signal.aborted) throw new ForgevmError("CONFLICT", "the build was cancelled");
  }

  /** A sandbox holding `st`'s image so far: the one it has, or a new one of the layers flattened. */
  async sandboxOf(st: StageState): Promise<Sandbox> {
    if (st.sb && st.synced) return st.sb;
    if (st.sb) await this.work.destroyHelper(st.sb.id).catch(ignore("the helper may be gone already"));
    st.sb = null;
    let image: string;
    if (st.base && st.layers.length === st.baseLayers) image = st.base.name;
    else {
      image = `forgevm/build-${this.buildId}-${this.states.indexOf(st)}-${st.layers.length}:tmp`;
      const stored = await storeImage(this.work.blobs, fixDiffIds(st.config), st.layers);
      this.report.log(`  (flattening ${st.layers.length} layers into a build image)`);
      await installImage(this.host.paths, this.work.blobs, {
        name: image,
        source: `build:${this.buildId}`,
        manifestDigest: stored.manifestDigest,
        manifest: stored.manifest,
        config: parseImageConfig(stored.configBytes),
        manifestBytes: stored.manifestBytes,
        configBytes: stored.configBytes,
      });
      this.tempImages.push(image);
    }
    st.sb = await this.work.spawnBuild(image, { network: this.o.network, allow: this.o.allow, memoryMb: this.o.memoryMb, buildId: this.buildId });
    st.index = indexOf(await scanGuest(st.sb));
    st.synced = true;
    return st.sb;
  }

  /** The layer a step made in `st`'s sandbox, cached under `key`. */
  async finishLayer(st: StageState, key: string, createdBy: string): Promise<void> {
    const sb = st.sb!;
    const scanned = await scanGuest(sb);
    const diff = diffFiles(st.index, scanned);
    const layer = await storeLayer(this.work.blobs, layerTar(sb, diff.changed, diff.removed));
    st.index = indexOf(scanned);
    st.layers.push(layer.descriptor);
    st.config = childConfig(st.config, { diffId: layer.diffId, createdBy }, {});
    st.key = key;
    await this.work.cache.put(key, { layer: layer.descriptor, diffId: layer.diffId, config: st.config, created: new Date().toISOString() });
    this.report.log(`  ---> layer ${layer.descriptor.digest.slice(7, 19)} (${diff.changed.length} changed, ${diff.removed.length} removed)`);
  }

  /** Whether the cache had the layer of `key`; if so, `st` has it now (its sandbox no longer does). */
  async fromCache(st: StageState, key: string): Promise<boolean> {
    if (this.o.noCache) return false;
    const hit = await this.work.cache.get(key);
    if (!hit?.layer) return false;
    st.layers.push(hit.layer);
    st.config = hit.config;
    st.key = key;
    st.synced = false;
    this.report.log(`  ---> CACHED ${hit.layer.digest.slice(7, 19)}`);
    return true;
  }

  /** Gives back every build sandbox, helper and temporary image. */
  async release(): Promise<void> {
    for (const s of this.states) if (s.sb) await this.work.destroyHelper(s.sb.id).catch(ignore("the helper may be gone already"));
    for (const h of this.helpers) await this.work.destroyHelper(h.id).catch(ignore("the helper may be gone already"));
    for (const t of this.tempImages) await this.work.removeImage(t).catch(ignore("the temporary image may be gone already"));
  }
}
