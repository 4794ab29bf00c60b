// COPY and ADD from the build context: the sources selected and hashed (the cache key), then
// packed into the stage's sandbox; ADD of one local tar archive unpacks it, as Docker does.
import { createReadStream } from "node:fs";
import { join, posix } from "node:path";
import { createGunzip } from "node:zlib";
import type { Instruction } from "../../../images/dockerfile.js";
import { unpackArchive } from "../../guest/archive.js";
import type { BuildRun } from "../build-run.js";
import { hashOf, type StageState } from "../stages.js";
import { chown, destPath, substituteEnv } from "../step-helpers.js";

const TAR_SUFFIX = /\.(tar|tar\.gz|tgz)$/i;

/** Whether the step ran (false: its layer came from the cache). */
export async function copyContext(run: BuildRun, st: StageState, step: Extract<Instruction, { op: "COPY" | "ADD" }>): Promise<boolean> {
  const { ctx } = run;
  const workdir = st.config.config?.WorkingDir || "/";
  const dest = destPath(workdir, substituteEnv(step.dest, st.config, st.args));
  const extract = step.op === "ADD" && step.sources.length === 1 && TAR_SUFFIX.test(step.sources[0]);
  const sel = await ctx.select(step.sources, extract ? `${dest.replace(/\/?$/, "/")}` : dest, step.line);
  const key = hashOf(st.key, step.text, dest, await ctx.hash(sel.entries), extract ? "extract" : "");
  if (await run.fromCache(st, key)) return false;
  const sb = await run.sandboxOf(st);
  if (extract) {
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
  await run.finishLayer(st, key, `${step.op} ${step.sources.join(" ")} ${step.dest}`);
  return true;
}
