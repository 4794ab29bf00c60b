// A test reporter for `npm test`: at the end of the run, how long each test file's tests took
// (their top-level tests and hooks, summed), longest first, and the total. This is what the
// suite's tiers and docs/testing.md are planned from. Then every test that was skipped, with its
// file and reason, so a check this machine cannot make is never read as one that passed.
import { realpathSync } from "node:fs";
import { relative } from "node:path";

interface TestEvent {
  type: string;
  data: { nesting: number; name?: string; file?: string; skip?: string | boolean; details?: { duration_ms?: number } };
}

/** A test file's own path: the runner hands node links to it, named by rank (test-suite.ts). */
const own = (file: string) => relative(process.cwd(), realpathSync(file));

/** Yields one table after the last event: seconds and test count per file. */
export default async function* testTimes(source: AsyncIterable<TestEvent>): AsyncGenerator<string> {
  const files = new Map<string, { ms: number; tests: number }>();
  const skipped: string[] = [];
  for await (const e of source) {
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
  let out = "\n# time per test file (top-level tests and hooks, summed)\n";
  for (const [file, f] of rows) out += `#   ${(f.ms / 1000).toFixed(1).padStart(7)} s  ${String(f.tests).padStart(3)}  ${file}\n`;
  out += `#   ${(total / 1000).toFixed(1).padStart(7)} s  in ${rows.length} files\n`;
  if (skipped.length) {
    out += `\n# SKIPPED: ${skipped.length} test${skipped.length === 1 ? "" : "s"} did not run here, and prove nothing on this machine:\n`;
    for (const line of skipped) out += `#   SKIPPED ${line}\n`;
  }
  yield out;
}
