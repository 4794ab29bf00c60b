// COPY --from: files of an earlier stage (its build sandbox) or of another image (a helper sandbox
// of it, destroyed with the build), packed out of one sandbox and into the stage's.
import { posix } from "node:path";
import { DockerfileError, type Instruction } from "../../../images/dockerfile.js";
import { resolveImage } from "../../../images/store.js";
import { packArchive, unpackArchive } from "../../guest/archive.js";
import type { Sandbox } from "../../guest/sandbox.js";
import type { BuildRun } from "../build-run.js";
import { hashOf, type StageState } from "../stages.js";
import { chown, destPath, retarget, substituteEnv } from "../step-helpers.js";

/** Whether the step ran (false: its layer came from the cache). */
export async function copyFrom(run: BuildRun, st: StageState, step: Extract<Instruction, { op: "COPY" | "ADD" }>): Promise<boolean> {
  const from = step.from!;
  const byName = run.states.find((s) => s.stage.name === from) ?? (/^\d+$/.test(from) ? run.states[Number(from)] : undefined);
  let source: Sandbox;
  let sourceKey: string;
  if (byName) {
    sourceKey = byName.key;
  } else {
    if (run.df.stages.some((s) => s.name === from)) throw new DockerfileError(`COPY --from=${from}: that stage comes later`, step.line);
    const image = await resolveImage(run.host.paths, from).catch(() => run.work.pull(from));
    sourceKey = image.digest ?? image.createdAt;
  }
  const workdir = st.config.config?.WorkingDir || "/";
  const dest = destPath(workdir, substituteEnv(step.dest, st.config, st.args));
  const key = hashOf(st.key, step.text, dest, sourceKey);
  if (await run.fromCache(st, key)) return false;
  if (byName) source = await run.sandboxOf(byName);
  else {
    source = await run.work.spawnBuild(from, { network: "none", buildId: run.buildId });
    run.helpers.push(source);
  }
  const sb = await run.sandboxOf(st);
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
  await run.finishLayer(st, key, `COPY --from=${from} ${step.sources.join(" ")} ${step.dest}`);
  return true;
}
