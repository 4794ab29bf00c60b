// What a Dockerfile build is made of, apart from running its steps (builder.ts): its options,
// steps and report, what it needs from the rest of core, the check of its Dockerfile, and the
// start of each stage from its FROM image.

import { createHash } from "node:crypto";
import { readFile } from "node:fs/promises";
import { join, posix } from "node:path";
import type { FileIndex } from "../../images/file-index.js";
import type { Descriptor } from "../../images/oci.js";
import { DockerfileError, parseDockerfile, type Dockerfile, type Stage } from "../../images/dockerfile.js";
import { resolveImage, type LocalImage } from "../../images/store.js";
import type { Paths } from "../../config/paths.js";
import { badRequest } from "../../http/errors.js";
import { baseConfigDoc, imageLayers, type ImageWork } from "../images/image-layers.js";
import type { Sandbox } from "../guest/sandbox.js";
import type { BuildCache } from "./cache.js";
import type { BuildContext } from "./context.js";
import { imageName } from "../images/commit.js";

export interface BuildOptions {
  /** NAME[:TAG] of the result. */
  tag: string;
  /** The Dockerfile's path in the context (default "Dockerfile"). */
  dockerfile?: string;
  buildArgs?: Record<string, string>;
  /** Network of the build sandboxes: "none" (default), "allowlist" (with `allow`) or "full". */
  network?: string;
  allow?: string[];
  noCache?: boolean;
  /** Build up to this stage (by name) instead of the last one. */
  target?: string;
  memoryMb?: number;
}

export type StepStatus = "pending" | "running" | "cached" | "done" | "error";

export interface BuildStep {
  stage: number;
  line: number;
  instruction: string;
  status: StepStatus;
  duration_ms?: number;
}

/** Where a build reports as it goes. */
export interface BuildReport {
  steps(list: BuildStep[]): void;
  step(i: number, patch: Partial<BuildStep>): void;
  log(line: string): void;
}

export interface BuildResult {
  image: LocalImage;
  digest: string;
  steps: BuildStep[];
}

/** What a build needs from Forge beyond commit's needs. */
export interface BuildWork extends ImageWork {
  cache: BuildCache;
  pull: (ref: string) => Promise<LocalImage>;
  spawnBuild: (image: string, o: { network?: string; allow?: string[]; memoryMb?: number; buildId: string }) => Promise<Sandbox>;
  removeImage: (name: string) => Promise<void>;
}

// One stage's image so far, and the build sandbox that holds it when `synced`.
export interface StageState {
  stage: Stage;
  base: LocalImage | null;
  baseLayers: number;
  layers: Descriptor[];
  config: any;
  key: string;
  sb: Sandbox | null;
  synced: boolean;
  index: FileIndex | null;
  shell: string[];
  args: Map<string, string>;
}

export const hashOf = (...parts: string[]) => createHash("sha256").update(parts.join("\0")).digest("hex");
/** The parsed Dockerfile of a build and the stage it ends with, or a 400 that names the problem (and its line). */
export async function checkDockerfile(ctx: BuildContext, o: BuildOptions): Promise<{ df: Dockerfile; targetIndex: number }> {
  imageName(o.tag);
  if (o.network && !["none", "allowlist", "full"].includes(o.network)) throw badRequest(`network: must be none, allowlist or full, got "${o.network}"`);
  const dfPath = posix.normalize(o.dockerfile ?? "Dockerfile");
  if (dfPath.startsWith("..") || dfPath.startsWith("/")) throw badRequest(`dockerfile: ${o.dockerfile} must be a path inside the context`);
  const text = await readFile(join(ctx.dir, dfPath), "utf8").catch(() => null);
  if (text === null) throw badRequest(`dockerfile: there is no ${dfPath} in the build context`);
  let df: Dockerfile;
  try {
    df = parseDockerfile(text, o.buildArgs);
  } catch (e) {
    if (e instanceof DockerfileError) throw badRequest(e.message);
    throw e;
  }
  let targetIndex = df.stages.length - 1;
  if (o.target) {
    targetIndex = df.stages.findIndex((s) => s.name === o.target!.toLowerCase());
    if (targetIndex < 0) throw badRequest(`target: no stage is named "${o.target}" (stages: ${df.stages.map((s) => s.name ?? s.index).join(", ")})`);
  }
  return { df, targetIndex };
}

/** Why a RUN failed, in one line: its command cut short (it may be kilobytes), and what a build without network cannot do. */
export function runFailed(command: string, code: number, network: string): string {
  const shown = command.length > 160 ? `${command.slice(0, 160)}… (${command.length} characters)` : command;
  const hint = network === "none" ? "; RUN has no network in this build: if it fetched something, allow it (--network allowlist --allow HOST, or --network full)" : "";
  return `RUN ${shown} exited with code ${code}${hint}`;
}

/** A stage's starting point: its FROM image (a previous stage, a local or pulled image, or scratch). */
export async function startStage(paths: Paths, work: BuildWork, stage: Stage, states: StageState[], report: BuildReport): Promise<StageState> {
  const prev = states.find((s) => s.stage.name === stage.from.toLowerCase());
  const common = { stage, sb: null, synced: false, index: null, shell: ["/bin/sh", "-c"], args: new Map<string, string>() };
  if (prev) {
    return { ...common, base: prev.base, baseLayers: prev.baseLayers, layers: [...prev.layers], config: structuredClone(prev.config), key: prev.key, shell: [...prev.shell] };
  }
  if (stage.from === "scratch")
    return {
      ...common,
      base: null,
      baseLayers: 0,
      layers: [],
      config: { architecture: "amd64", os: "linux", config: {}, rootfs: { type: "layers", diff_ids: [] }, history: [] },
      key: hashOf("scratch"),
    };
  const base = await resolveImage(paths, stage.from).catch((e) => {
    if (stage.from.startsWith("forgevm/")) throw badRequest(`FROM ${stage.from}: ${(e as Error).message}`);
    return work.pull(stage.from);
  });
  const { parent } = await imageLayers(work, base, (m) => report.log(`  ${m}`), false);
  return {
    ...common,
    base,
    baseLayers: parent.manifest.layers.length,
    layers: [...parent.manifest.layers],
    config: parent.configDoc ?? baseConfigDoc(base),
    key: hashOf("from", parent.manifestDigest),
  };
}

/** A config doc whose diff ids are complete (an image pulled without them gets none). */
export function fixDiffIds(config: any): any {
  return { ...config, rootfs: { type: "layers", diff_ids: config.rootfs?.diff_ids ?? [] } };
}
