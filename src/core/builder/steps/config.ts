// The steps that change only the image's config (ENV, LABEL, WORKDIR, USER, EXPOSE, VOLUME,
// STOPSIGNAL, HEALTHCHECK, CMD, ENTRYPOINT) and those that change only how later steps run (SHELL,
// ARG), plus the warnings of instructions we do not run. None of them starts a sandbox.
import { posix } from "node:path";
import type { Instruction } from "../../../images/dockerfile.js";
import { childConfig, type ImageChanges } from "../../../images/oci-build.js";
import type { BuildRun } from "../build-run.js";
import { hashOf, type StageState } from "../stages.js";
import { substituteEnv } from "../step-helpers.js";

/** The instructions this file runs. */
export type ConfigInstruction = Exclude<Instruction, { op: "RUN" | "COPY" | "ADD" }>;

/**
 * Runs one of them: "cached" when the cache had its result, else "done" (a config step a first
 * build applies is done, not cached: "8 steps, 5 from the cache" said so of one).
 */
export async function configStep(run: BuildRun, st: StageState, step: ConfigInstruction): Promise<"done" | "cached"> {
  const cfg = () => st.config.config ?? {};
  // Config steps are cached too: their history entry keeps its time, so a rebuild is the same image.
  const configOnly = async (changes: ImageChanges) => {
    const key = hashOf(st.key, step.text, JSON.stringify(changes));
    const hit = run.o.noCache ? null : await run.work.cache.get(key);
    st.config = hit ? hit.config : childConfig(st.config, null, changes);
    if (!hit) await run.work.cache.put(key, { config: st.config, created: new Date().toISOString() });
    st.key = key;
    return hit ? "cached" : "done";
  };
  // A step that changes neither files nor config (ARG, SHELL) is cached when a build went past it before.
  const seen = async (key: string): Promise<"done" | "cached"> => {
    const mark = hashOf(key, "seen");
    if (!run.o.noCache && (await run.work.cache.get(mark))) return "cached";
    await run.work.cache.put(mark, { config: st.config, created: new Date().toISOString() });
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
      run.report.log(`warning: Dockerfile line ${step.line}: ${step.warning}`);
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
  }
}
