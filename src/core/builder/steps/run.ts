// RUN: a command in the stage's build sandbox, its output in the build's log line by line, and what
// it changed as a layer — or the cached layer, without running anything.
import type { Readable } from "node:stream";
import { DockerfileError, type Instruction } from "../../../images/dockerfile.js";
import { ignore } from "../../../util/ignore.js";
import type { Sandbox } from "../../guest/sandbox.js";
import type { BuildRun } from "../build-run.js";
import { hashOf, runFailed, type StageState } from "../stages.js";
import { envOf } from "../step-helpers.js";

const RUN_TIMEOUT_MS = 60 * 60_000;
const MAX_LINE = 64 * 1024;

export async function runStep(run: BuildRun, st: StageState, step: Extract<Instruction, { op: "RUN" }>): Promise<"done" | "cached"> {
  const cfg = st.config.config ?? {};
  const argv = step.argv ?? [...st.shell, step.command];
  const env = { ...envOf(st.config), ...Object.fromEntries(st.args) };
  const workdir = cfg.WorkingDir || "/";
  const user = cfg.User || undefined;
  const key = hashOf(st.key, "RUN", JSON.stringify(argv), JSON.stringify(env), workdir, user ?? "");
  if (await run.fromCache(st, key)) return "cached";
  const sb = await run.sandboxOf(st);
  if (workdir !== "/") await sb.mkdir(workdir);
  const code = await runLogged(run, sb, argv, env, workdir, user);
  if (code !== 0) throw new DockerfileError(runFailed(step.command, code, run.o.network ?? "none"), step.line);
  await run.finishLayer(st, key, `RUN ${step.command}`);
  return "done";
}

async function runLogged(run: BuildRun, sb: Sandbox, argv: string[], env: Record<string, string>, cwd: string, user?: string): Promise<number> {
  const s = sb.execStream(argv, { env, cwd, user, timeoutMs: RUN_TIMEOUT_MS });
  const onAbort = () => void s.signal(9, true).catch(ignore("the process may have exited"));
  run.signal.addEventListener("abort", onAbort);
  const pump = async (r: Readable) => {
    let rest = "";
    for await (const c of r) {
      rest += (c as Buffer).toString("utf8");
      const lines = rest.split("\n");
      rest = lines.pop() ?? "";
      for (const l of lines) run.report.log(`  ${l}`);
      // The guest decides what it prints: a line that never ends is logged in pieces.
      if (rest.length > MAX_LINE) {
        run.report.log(`  ${rest}`);
        rest = "";
      }
    }
    if (rest) run.report.log(`  ${rest}`);
  };
  try {
    await Promise.all([pump(s.stdout), pump(s.stderr)]);
    return (await s.result).exit_code;
  } finally {
    run.signal.removeEventListener("abort", onAbort);
  }
}
