// Dockerfile builds in VMs. Each stage runs its RUN and COPY steps in a build sandbox of the image
// so far; after each such step the sandbox is scanned and what changed becomes a layer (the same
// diff as commit). Steps are cached by their parent's key, their instruction and the hash of what
// they read: a hit adds the cached layer without running anything. After a hit, the next step
// that must run gets a sandbox of an image flattened from the layers so far. The result is an
// image whose manifest lists the base's layers and one per step, and whose root filesystem is the
// last build sandbox's disk (or, when every step came from the cache, the layers flattened).
import { randomBytes } from "node:crypto";
import { createReadStream } from "node:fs";
import { copyFile, rm } from "node:fs/promises";
import { join, posix } from "node:path";
import { createGunzip } from "node:zlib";
import type { Readable } from "node:stream";
import { repairExt4 } from "../../images/ext4.js";
import { diffFiles, indexOf, loadIndex, saveIndex } from "../../images/file-index.js";
import { installImage, installRootfs } from "../../images/install.js";
import { childConfig, storeImage, storeLayer, type ImageChanges } from "../../images/oci-build.js";
import { parseImageConfig } from "../../images/oci.js";
import { DockerfileError, type Instruction } from "../../images/dockerfile.js";
import { listImages, resolveImage, type LocalImage } from "../../images/store.js";
import type { Core } from "../core.js";
import { packArchive, unpackArchive } from "../guest/archive.js";
import { badRequest, conflict, ForgevmError } from "../../http/errors.js";
import { layerTar } from "../guest/guest-layer.js";
import { scanGuest } from "../guest/guest-scan.js";
import type { Sandbox } from "../guest/sandbox.js";
import type { BuildContext } from "./context.js";
import { chown, destPath, envOf, retarget, substituteEnv } from "./step-helpers.js";
import { imageName } from "../images/commit.js";
import { ignore } from "../../util/ignore.js";
import { familiarName } from "../images/image-reference.js";
import {
  checkDockerfile,
  fixDiffIds,
  hashOf,
  runFailed,
  startStage,
  type BuildOptions,
  type BuildReport,
  type BuildResult,
  type BuildStep,
  type BuildWork,
  type StageState,
  type StepStatus,
} from "./stages.js";

export { checkDockerfile, runFailed } from "./stages.js";
export type { BuildOptions, BuildReport, BuildResult, BuildStep, BuildWork, StepStatus } from "./stages.js";

const RUN_TIMEOUT_MS = 60 * 60_000;
const MAX_LINE = 64 * 1024;
const TAR_SUFFIX = /\.(tar|tar\.gz|tgz)$/i;

/** Builds an image from a Dockerfile in `ctx`. */
export async function build(core: Core, work: BuildWork, ctx: BuildContext, o: BuildOptions, report: BuildReport, signal: AbortSignal): Promise<BuildResult> {
  const name = imageName(o.tag);
  const { df, targetIndex } = await checkDockerfile(ctx, o);
  const buildId = randomBytes(4).toString("hex");
  const steps: BuildStep[] = df.stages
    .slice(0, targetIndex + 1)
    .flatMap((s) => [
      { stage: s.index, line: s.line, instruction: `FROM ${s.from}${s.name ? ` AS ${s.name}` : ""}`, status: "pending" as StepStatus },
      ...s.steps.map((st) => ({ stage: s.index, line: st.line, instruction: st.text, status: "pending" as StepStatus })),
    ]);
  report.steps(steps);
  const states: StageState[] = [];
  const tempImages: string[] = [];
  const helpers: Sandbox[] = [];
  let stepNo = 0;
  const mark = (patch: Partial<BuildStep>) => {
    Object.assign(steps[stepNo], patch);
    report.step(stepNo, patch);
  };
  const check = () => {
    if (signal.aborted) throw new ForgevmError("CONFLICT", "the build was cancelled");
  };

  // A sandbox holding `st`'s image so far: the one it has, or a new one of the layers flattened.
  const sandboxOf = async (st: StageState): Promise<Sandbox> => {
    if (st.sb && st.synced) return st.sb;
    if (st.sb) await work.destroyHelper(st.sb.id).catch(ignore("the helper may be gone already"));
    st.sb = null;
    let image: string;
    if (st.base && st.layers.length === st.baseLayers) image = st.base.name;
    else {
      image = `forgevm/build-${buildId}-${states.indexOf(st)}-${st.layers.length}:tmp`;
      const stored = await storeImage(work.blobs, fixDiffIds(st.config), st.layers);
      report.log(`  (flattening ${st.layers.length} layers into a build image)`);
      await installImage(core.paths, work.blobs, {
        name: image,
        source: `build:${buildId}`,
        manifestDigest: stored.manifestDigest,
        manifest: stored.manifest,
        config: parseImageConfig(stored.configBytes),
        manifestBytes: stored.manifestBytes,
        configBytes: stored.configBytes,
      });
      tempImages.push(image);
    }
    st.sb = await work.spawnBuild(image, { network: o.network, allow: o.allow, memoryMb: o.memoryMb, buildId });
    st.index = indexOf(await scanGuest(st.sb));
    st.synced = true;
    return st.sb;
  };

  // The layer a step made in `st`'s sandbox, cached under `key`.
  const finishLayer = async (st: StageState, key: string, createdBy: string) => {
    const sb = st.sb!;
    const scanned = await scanGuest(sb);
    const diff = diffFiles(st.index, scanned);
    const layer = await storeLayer(work.blobs, layerTar(sb, diff.changed, diff.removed));
    st.index = indexOf(scanned);
    st.layers.push(layer.descriptor);
    st.config = childConfig(st.config, { diffId: layer.diffId, createdBy }, {});
    st.key = key;
    await work.cache.put(key, { layer: layer.descriptor, diffId: layer.diffId, config: st.config, created: new Date().toISOString() });
    report.log(`  ---> layer ${layer.descriptor.digest.slice(7, 19)} (${diff.changed.length} changed, ${diff.removed.length} removed)`);
  };

  const fromCache = async (st: StageState, key: string): Promise<boolean> => {
    if (o.noCache) return false;
    const hit = await work.cache.get(key);
    if (!hit?.layer) return false;
    st.layers.push(hit.layer);
    st.config = hit.config;
    st.key = key;
    st.synced = false;
    report.log(`  ---> CACHED ${hit.layer.digest.slice(7, 19)}`);
    return true;
  };

  try {
    for (const stage of df.stages.slice(0, targetIndex + 1)) {
      check();
      const t0 = performance.now();
      mark({ status: "running" });
      report.log(`Step ${stepNo + 1}/${steps.length} (line ${stage.line}): FROM ${stage.from}`);
      const st = await startStage(core, work, stage, states, report);
      states.push(st);
      mark({ status: "done", duration_ms: Math.round(performance.now() - t0) });
      stepNo++;
      for (const step of stage.steps) {
        check();
        const t1 = performance.now();
        mark({ status: "running" });
        // A generated RUN can be kilobytes (an environment's pip runner): the log shows its start.
        report.log(`Step ${stepNo + 1}/${steps.length} (line ${step.line}): ${step.text.length > 300 ? `${step.text.slice(0, 300)}…` : step.text}`);
        mark({ status: await runStep(st, step), duration_ms: Math.round(performance.now() - t1) });
        stepNo++;
      }
    }
    check();
    const target = states[targetIndex];
    return { image: await finish(target), digest: (await resolveImage(core.paths, name)).digest ?? "", steps };
  } catch (e) {
    if (stepNo < steps.length && steps[stepNo].status === "running") mark({ status: "error" });
    if (e instanceof DockerfileError) throw badRequest(e.message);
    throw e;
  } finally {
    for (const s of states) if (s.sb) await work.destroyHelper(s.sb.id).catch(ignore("the helper may be gone already"));
    for (const h of helpers) await work.destroyHelper(h.id).catch(ignore("the helper may be gone already"));
    for (const t of tempImages) await work.removeImage(t).catch(ignore("the temporary image may be gone already"));
  }

  // Runs one instruction: "cached" when the cache had its result, else "done" (a config step a
  // first build applies is done, not cached: "8 steps, 5 from the cache" said so of one).
  async function runStep(st: StageState, step: Instruction): Promise<"done" | "cached"> {
    const cfg = () => st.config.config ?? {};
    // Config steps are cached too: their history entry keeps its time, so a rebuild is the same image.
    const configOnly = async (changes: ImageChanges) => {
      const key = hashOf(st.key, step.text, JSON.stringify(changes));
      const hit = o.noCache ? null : await work.cache.get(key);
      st.config = hit ? hit.config : childConfig(st.config, null, changes);
      if (!hit) await work.cache.put(key, { config: st.config, created: new Date().toISOString() });
      st.key = key;
      return hit ? "cached" : "done";
    };
    // A step that changes neither files nor config (ARG, SHELL) is cached when a build went past it before.
    const seen = async (key: string): Promise<"done" | "cached"> => {
      const mark = hashOf(key, "seen");
      if (!o.noCache && (await work.cache.get(mark))) return "cached";
      await work.cache.put(mark, { config: st.config, created: new Date().toISOString() });
      return "done";
    };
    switch (step.op) {
      case "ENV":
        return configOnly({ env: step.pairs.map(([k, v]) => `${k}=${v}`) });
      case "LABEL":
        return configOnly({ labels: Object.fromEntries(step.pairs) });
      case "WORKDIR":
        return configOnly({ workdir: posix.resolve(cfg().WorkingDir || "/", substituteEnv(step.value, st.config, st.args)) });
      case "USER":
        return configOnly({ user: step.value });
      case "EXPOSE":
        return configOnly({ exposedPorts: step.ports });
      case "VOLUME":
        return configOnly({ volumes: step.paths });
      case "STOPSIGNAL":
        return configOnly({ stopSignal: step.signal });
      case "HEALTHCHECK":
        return configOnly({ healthcheck: step.healthcheck });
      case "IGNORED":
        report.log(`warning: Dockerfile line ${step.line}: ${step.warning}`);
        return "done";
      case "CMD":
      case "ENTRYPOINT": {
        const argv = step.argv ?? [...st.shell, step.command];
        return configOnly(step.op === "CMD" ? { cmd: argv } : { entrypoint: argv });
      }
      case "SHELL":
        st.shell = step.argv;
        st.key = hashOf(st.key, step.text);
        return seen(st.key);
      case "ARG":
        if (step.value !== undefined) st.args.set(step.name, step.value);
        // As Docker: an argument's value misses the cache where it is used (RUN's environment,
        // substituted text), not where it is declared.
        st.key = hashOf(st.key, "ARG", step.name);
        return seen(st.key);
      case "RUN": {
        const argv = step.argv ?? [...st.shell, step.command];
        const env = { ...envOf(st.config), ...Object.fromEntries(st.args) };
        const workdir = cfg().WorkingDir || "/";
        const user = cfg().User || undefined;
        const key = hashOf(st.key, "RUN", JSON.stringify(argv), JSON.stringify(env), workdir, user ?? "");
        if (await fromCache(st, key)) return "cached";
        const sb = await sandboxOf(st);
        if (workdir !== "/") await sb.mkdir(workdir);
        const code = await runLogged(sb, argv, env, workdir, user);
        if (code !== 0) throw new DockerfileError(runFailed(step.command, code, o.network ?? "none"), step.line);
        await finishLayer(st, key, `RUN ${step.command}`);
        return "done";
      }
      case "COPY":
      case "ADD":
        return (await (step.from !== undefined ? copyFrom(st, step) : copyContext(st, step))) ? "done" : "cached";
    }
  }

  async function copyContext(st: StageState, step: Extract<Instruction, { op: "COPY" | "ADD" }>): Promise<boolean> {
    const workdir = st.config.config?.WorkingDir || "/";
    const dest = destPath(workdir, substituteEnv(step.dest, st.config, st.args));
    const extract = step.op === "ADD" && step.sources.length === 1 && TAR_SUFFIX.test(step.sources[0]);
    const sel = await ctx.select(step.sources, extract ? `${dest.replace(/\/?$/, "/")}` : dest, step.line);
    const key = hashOf(st.key, step.text, dest, await ctx.hash(sel.entries), extract ? "extract" : "");
    if (await fromCache(st, key)) return false;
    const sb = await sandboxOf(st);
    if (extract) {
      // ADD of a local tar archive unpacks it at the destination, as Docker does.
      const file = join(ctx.dir, sel.entries[0].rel);
      const raw = createReadStream(file);
      const gz = /\.(tgz|gz)$/i.test(file);
      await unpackArchive(sb, dest, (gz ? raw.pipe(createGunzip()) : raw) as AsyncIterable<Buffer>);
    } else {
      let { destDir, entries } = sel;
      if (sel.asFile && (await sb.stat(dest).catch(() => null))?.type === "dir") {
        // COPY a.txt /existing-dir: into it, by its own name
        entries = entries.map((e) => ({ ...e, target: posix.basename(e.rel) }));
        destDir = dest;
      }
      await unpackArchive(sb, destDir, ctx.tar(entries, { uid: 0, gid: 0 }, step.chmod));
      if (step.chown)
        await chown(
          sb,
          step.chown,
          entries.map((e) => posix.join(destDir, e.target)),
          step.line,
        );
    }
    await finishLayer(st, key, `${step.op} ${step.sources.join(" ")} ${step.dest}`);
    return true;
  }

  async function copyFrom(st: StageState, step: Extract<Instruction, { op: "COPY" | "ADD" }>): Promise<boolean> {
    const from = step.from!;
    const byName = states.find((s) => s.stage.name === from) ?? (/^\d+$/.test(from) ? states[Number(from)] : undefined);
    let source: Sandbox;
    let sourceKey: string;
    if (byName) {
      sourceKey = byName.key;
    } else {
      if (df.stages.some((s) => s.name === from)) throw new DockerfileError(`COPY --from=${from}: that stage comes later`, step.line);
      const image = await resolveImage(core.paths, from).catch(() => work.pull(from));
      sourceKey = image.digest ?? image.createdAt;
    }
    const workdir = st.config.config?.WorkingDir || "/";
    const dest = destPath(workdir, substituteEnv(step.dest, st.config, st.args));
    const key = hashOf(st.key, step.text, dest, sourceKey);
    if (await fromCache(st, key)) return false;
    if (byName) source = await sandboxOf(byName);
    else {
      source = await work.spawnBuild(from, { network: "none", buildId });
      helpers.push(source);
    }
    const sb = await sandboxOf(st);
    const srcWorkdir = byName?.config.config?.WorkingDir || "/";
    const paths: string[] = [];
    for (const s of step.sources) {
      const abs = posix.resolve(srcWorkdir, s);
      const found = /[*?[]/.test(abs) ? await source.glob(abs) : [abs];
      if (!found.length) throw new DockerfileError(`COPY --from=${from}: nothing matches ${s}`, step.line);
      paths.push(...found);
    }
    if (paths.length > 1 && !dest.endsWith("/")) throw new DockerfileError(`with several sources the destination must be a directory ending in "/"`, step.line);
    const copied: string[] = [];
    for (const p of paths) {
      const stat = await source.stat(p).catch(() => null);
      if (!stat) throw new DockerfileError(`COPY --from=${from}: ${p} does not exist there`, step.line);
      const destIsDir = dest.endsWith("/") || (await sb.stat(dest).catch(() => null))?.type === "dir";
      // A directory's contents go into dest; a file goes into dest (a directory) or becomes it.
      const strip = stat.type === "dir";
      const into = strip || destIsDir ? dest : posix.dirname(dest);
      const rename = !strip && !destIsDir ? posix.basename(dest) : null;
      const tar = retarget(await packArchive(source, p), strip, rename, step.chmod, (n) => copied.push(posix.join(into, n)));
      await unpackArchive(sb, into, tar);
    }
    if (step.chown) await chown(sb, step.chown, copied, step.line);
    await finishLayer(st, key, `COPY --from=${from} ${step.sources.join(" ")} ${step.dest}`);
    return true;
  }

  // The image of the target stage, under its name.
  async function finish(st: StageState): Promise<LocalImage> {
    const config = fixDiffIds(st.config);
    const stored = await storeImage(work.blobs, config, st.layers);
    const same = (await listImages(core.paths)).find((i) => i.digest === stored.manifestDigest);
    if (same?.name === name) {
      report.log(`${name} is up to date (${stored.manifestDigest})`);
      return resolveImage(core.paths, name);
    }
    // Checked only now: a rebuild that comes out the same may keep a name sandboxes use.
    const users = work.imageUsers(name);
    if (users.length) throw conflict(`image ${name} is in use by ${users.join(", ")}: build it under another name or tag`);
    const base = {
      name,
      source: `build:${o.dockerfile ?? "Dockerfile"}`,
      manifestDigest: stored.manifestDigest,
      configDigest: stored.configDigest,
      layers: st.layers.map((l) => l.digest),
      config: parseImageConfig(stored.configBytes),
      ...(st.base ? { parent: st.base.name } : {}),
    };
    const tmp = join(core.paths.imagesDir, `.build-${buildId}.ext4`);
    try {
      if (same) {
        // Another tag of the same image: its root filesystem is copied, sparse.
        await copyFile(same.rootfs, tmp);
        await installRootfs(core.paths, { ...base, rootfs: tmp, index: (await loadIndex(same.dir)) ?? undefined });
      } else if (st.sb && st.synced) {
        await st.sb.sync();
        const copied = await st.sb.copyDisk(tmp);
        if (!copied) throw new Error("the build sandbox has no disk");
        await repairExt4(tmp);
        await installRootfs(core.paths, { ...base, rootfs: tmp, index: st.index ?? undefined });
      } else {
        report.log(`  (flattening ${st.layers.length} layers into ${familiarName(name)})`);
        await installImage(core.paths, work.blobs, { ...base, manifest: stored.manifest, manifestBytes: stored.manifestBytes, configBytes: stored.configBytes });
      }
    } finally {
      await rm(tmp, { force: true });
    }
    const image = await resolveImage(core.paths, name);
    if (st.index && st.synced && !same) await saveIndex(image.dir, st.index);
    core.events.emit("image.built", null, { image: name, digest: stored.manifestDigest });
    report.log(`built ${familiarName(name)} (${stored.manifestDigest})`);
    return image;
  }

  async function runLogged(sb: Sandbox, argv: string[], env: Record<string, string>, cwd: string, user?: string): Promise<number> {
    const s = sb.execStream(argv, { env, cwd, user, timeoutMs: RUN_TIMEOUT_MS });
    const onAbort = () => void s.signal(9, true).catch(ignore("the process may have exited"));
    signal.addEventListener("abort", onAbort);
    const pump = async (r: Readable) => {
      let rest = "";
      for await (const c of r) {
        rest += (c as Buffer).toString("utf8");
        const lines = rest.split("\n");
        rest = lines.pop() ?? "";
        for (const l of lines) report.log(`  ${l}`);
        // The guest decides what it prints: a line that never ends is logged in pieces.
        if (rest.length > MAX_LINE) {
          report.log(`  ${rest}`);
          rest = "";
        }
      }
      if (rest) report.log(`  ${rest}`);
    };
    try {
      await Promise.all([pump(s.stdout), pump(s.stderr)]);
      return (await s.result).exit_code;
    } finally {
      signal.removeEventListener("abort", onAbort);
    }
  }
}
