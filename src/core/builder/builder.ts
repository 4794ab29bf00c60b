// Dockerfile builds in VMs. Each stage runs its RUN and COPY steps in a build sandbox of the image
// so far; after each such step the sandbox is scanned and what changed becomes a layer (the same
// diff as commit). Steps are cached by their parent's key, their instruction and the hash of what
// they read: a hit adds the cached layer without running anything. After a hit, the next step
// that must run gets a sandbox of an image flattened from the layers so far. The result is an
// image whose manifest lists the base's layers and one per step, and whose root filesystem is the
// last build sandbox's disk (or, when every step came from the cache, the layers flattened).
// This file walks the Dockerfile; build-run.ts holds a build's state, steps/ runs each kind of
// step, finish.ts stores the result.
import { DockerfileError, type Instruction } from "../../images/dockerfile.js";
import { resolveImage } from "../../images/store.js";
import { badRequest } from "../../http/errors.js";
import { imageName } from "../images/commit.js";
import { BuildRun, type BuildHost } from "./build-run.js";
import type { BuildContext } from "./context.js";
import { finish } from "./finish.js";
import { checkDockerfile, startStage, type BuildOptions, type BuildReport, type BuildResult, type BuildStep, type BuildWork, type StageState, type StepStatus } from "./stages.js";
import { configStep } from "./steps/config.js";
import { copyContext } from "./steps/copy-context.js";
import { copyFrom } from "./steps/copy-from.js";
import { runStep } from "./steps/run.js";

export { checkDockerfile, runFailed } from "./stages.js";
export type { BuildOptions, BuildReport, BuildResult, BuildStep, BuildWork, StepStatus } from "./stages.js";
export type { BuildHost } from "./build-run.js";

/** Builds an image from a Dockerfile in `ctx`. */
export async function build(host: BuildHost, work: BuildWork, ctx: BuildContext, o: BuildOptions, report: BuildReport, signal: AbortSignal): Promise<BuildResult> {
  const name = imageName(o.tag);
  const { df, targetIndex } = await checkDockerfile(ctx, o);
  const run = new BuildRun(host, work, ctx, o, report, signal, df, name);
  const steps: BuildStep[] = df.stages
    .slice(0, targetIndex + 1)
    .flatMap((s) => [
      { stage: s.index, line: s.line, instruction: `FROM ${s.from}${s.name ? ` AS ${s.name}` : ""}`, status: "pending" as StepStatus },
      ...s.steps.map((st) => ({ stage: s.index, line: st.line, instruction: st.text, status: "pending" as StepStatus })),
    ]);
  report.steps(steps);
  let stepNo = 0;
  const mark = (patch: Partial<BuildStep>) => {
    Object.assign(steps[stepNo], patch);
    report.step(stepNo, patch);
  };
  try {
    for (const stage of df.stages.slice(0, targetIndex + 1)) {
      run.check();
      const t0 = performance.now();
      mark({ status: "running" });
      report.log(`Step ${stepNo + 1}/${steps.length} (line ${stage.line}): FROM ${stage.from}`);
      run.states.push(await startStage(host.paths, work, stage, run.states, report));
      mark({ status: "done", duration_ms: Math.round(performance.now() - t0) });
      stepNo++;
      const st = run.states.at(-1)!;
      for (const step of stage.steps) {
        run.check();
        const t1 = performance.now();
        mark({ status: "running" });
        // A generated RUN can be kilobytes (an environment's pip runner): the log shows its start.
        report.log(`Step ${stepNo + 1}/${steps.length} (line ${step.line}): ${step.text.length > 300 ? `${step.text.slice(0, 300)}…` : step.text}`);
        mark({ status: await stepOf(run, st, step), duration_ms: Math.round(performance.now() - t1) });
        stepNo++;
      }
    }
    run.check();
    return { image: await finish(run, run.states[targetIndex]), digest: (await resolveImage(host.paths, name)).digest ?? "", steps };
  } catch (e) {
    if (stepNo < steps.length && steps[stepNo].status === "running") mark({ status: "error" });
    if (e instanceof DockerfileError) throw badRequest(e.message);
    throw e;
  } finally {
    await run.release();
  }
}

/** Runs one instruction by its kind: "cached" when the cache had its result, else "done". */
async function stepOf(run: BuildRun, st: StageState, step: Instruction): Promise<"done" | "cached"> {
  switch (step.op) {
    case "RUN":
      return runStep(run, st, step);
    case "COPY":
    case "ADD":
      return (await (step.from !== undefined ? copyFrom(run, st, step) : copyContext(run, st, step))) ? "done" : "cached";
    default:
      return configStep(run, st, step);
  }
}
