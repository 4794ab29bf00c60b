// A test reporter for `npm test`: at the end of the run, how long each test file's tests took
// (their top-level tests and hooks, summed), longest first, and the total. This is what the
// suite's tiers and docs/testing.md are planned from. Then every test that was skipped, with its
// file and reason, so a check this machine cannot make is never read as one that passed. Each
// failure's message is also appended to the run directory's failures file, which the suite prints
// again as its last lines: CI keeps only the end of a long run's output.
import { appendFileSync, readFileSync, realpathSync } from "node:fs";
import { join, relative } from "node:path";

interface TestEvent {
  type: string;
  data: {
    nesting: number;
    name?: string;
    file?: string;
    line?: number;
    skip?: string | boolean;
    details?: { duration_ms?: number; error?: { failureType?: string; message?: string; cause?: unknown } };
  };
}

/** Where the suite collects failures across its phases (test-suite.ts prints it at the end). */
export const failuresFile = (runDir: string) => join(runDir, "failures.txt");

/** A failure in a few lines: the assertion's own message (the cause), cut to what a log can hold. */
function failure(e: TestEvent): string {
  const err = e.data.details?.error;
  const cause = err?.cause as { message?: string; stack?: string } | undefined;
  const full = String(cause?.stack ?? cause?.message ?? cause ?? err?.message ?? "no message");
  // The message, then the first frames in our own code (node's runner frames say nothing).
  const frames = full.split("\n").filter((l) => /^\s+at /.test(l) && !l.includes("node:") && !l.includes("(<anonymous>)"));
  const text = [...full.split("\n").filter((l) => !/^\s+at /.test(l)), ...frames.slice(0, 3)].join("\n");
  const cut = text.length > 2000 ? `${text.slice(0, 2000)} …` : text;
  const where = `${e.data.file ? own(e.data.file) : "?"}${e.data.line ? `:${e.data.line}` : ""}`;
  const hung = e.data.nesting === 0 && /timed out/.test(text) && e.data.file ? `\n${runningIn(e.data.file)}` : "";
  return `# FAILED ${where}: ${e.data.name ?? "?"}\n${(cut + hung).replace(/^/gm, "#   ")}\n`;
}

/** test-progress.ts's notes in a run directory: one line per event, `ms\tstart|end\tfile\ttest`, and `ms\tcpu\tfile\tseconds` at a file's end. */
export const progressFile = (runDir: string) => join(runDir, "progress.tsv");

/** What a file stopped for its time was doing: the test it had started and not ended (test-progress.ts). */
function runningIn(file: string): string {
  const dir = process.env.TEST_RUN_DIR;
  if (!dir) return "";
  const path = realpathSync(file);
  const open = new Map<string, number>();
  let last = "";
  try {
    for (const line of readFileSync(progressFile(dir), "utf8").split("\n")) {
      const [ms, what, f, name] = line.split("\t");
      if (f !== path) continue;
      if (what === "start") open.set(name, Number(ms));
      else if (what === "end") {
        open.delete(name);
        last = name;
      }
    }
  } catch {
    return "(no notes of its tests' progress)";
  }
  const running = [...open].map(([name, ms]) => `"${name}", started ${Math.round((Date.now() - ms) / 1000)} s before`);
  if (running.length) return `still running then: ${running.join("; ")}`;
  return last ? `no test was running: after "${last}" it hung in a hook` : "no test had started: it hung in a before hook or while loading";
}

/** CPU seconds each test file's process used, with what it started (test-progress.ts), by its own path. */
function cpuPerFile(): Map<string, number> {
  const cpu = new Map<string, number>();
  const dir = process.env.TEST_RUN_DIR;
  if (!dir) return cpu;
  try {
    for (const line of readFileSync(progressFile(dir), "utf8").split("\n")) {
      const [, what, f, seconds] = line.split("\t");
      if (what === "cpu") cpu.set(relative(process.cwd(), f), Number(seconds));
    }
  } catch {
    // No notes: the table has no CPU column.
  }
  return cpu;
}

/** A test file's own path: the runner hands node links to it, named by rank (test-suite.ts). */
const own = (file: string) => relative(process.cwd(), realpathSync(file));

/** Yields one table after the last event: seconds and test count per file. */
export default async function* testTimes(source: AsyncIterable<TestEvent>): AsyncGenerator<string> {
  const files = new Map<string, { ms: number; tests: number }>();
  const skipped: string[] = [];
  const failures: string[] = [];
  for await (const e of source) {
    // A suite fails because a test in it did: that test's own event says why.
    if (e.type === "test:fail" && e.data.details?.error?.failureType !== "subtestsFailed") failures.push(failure(e));
    if (e.type === "test:pass" && e.data.skip !== undefined && e.data.skip !== false) {
      const why = typeof e.data.skip === "string" && e.data.skip ? e.data.skip : "no reason given";
      skipped.push(`${e.data.file ? own(e.data.file) : "?"}: ${e.data.name ?? "?"} — ${why}`);
    }
    if ((e.type !== "test:pass" && e.type !== "test:fail") || e.data.nesting !== 0 || !e.data.file) continue;
    const file = own(e.data.file);
    const f = files.get(file) ?? { ms: 0, tests: 0 };
    f.ms += e.data.details?.duration_ms ?? 0;
    f.tests += 1;
    files.set(file, f);
  }
  const rows = [...files].sort((a, b) => b[1].ms - a[1].ms);
  const total = rows.reduce((s, [, f]) => s + f.ms, 0);
  const cpu = cpuPerFile();
  const cpuOf = (file: string) => (cpu.has(file) ? `${cpu.get(file)!.toFixed(1).padStart(7)} CPU-s  ` : "");
  let out = `\n# time per test file (top-level tests and hooks, summed)${cpu.size ? ", and the CPU its process used with what it started" : ""}\n`;
  for (const [file, f] of rows) out += `#   ${(f.ms / 1000).toFixed(1).padStart(7)} s  ${String(f.tests).padStart(3)}  ${cpuOf(file)}${file}\n`;
  const cpuTotal = rows.reduce((s, [file]) => s + (cpu.get(file) ?? 0), 0);
  out += `#   ${(total / 1000).toFixed(1).padStart(7)} s  in ${rows.length} files${cpu.size ? `, ${cpuTotal.toFixed(0)} CPU-s` : ""}\n`;
  if (skipped.length) {
    out += `\n# SKIPPED: ${skipped.length} test${skipped.length === 1 ? "" : "s"} did not run here, and prove nothing on this machine:\n`;
    for (const line of skipped) out += `#   SKIPPED ${line}\n`;
  }
  if (failures.length) {
    out += `\n# ${failures.length} failure${failures.length === 1 ? "" : "s"}:\n${failures.join("")}`;
    if (process.env.TEST_RUN_DIR) appendFileSync(failuresFile(process.env.TEST_RUN_DIR), failures.join(""));
  }
  yield out;
}
