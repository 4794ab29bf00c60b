// A test reporter for `npm test`: at the end of the run, how long each test file's tests took
// (their top-level tests and hooks, summed), longest first, and the total. This is what the
// suite's tiers and docs/testing.md are planned from.
import { relative } from "node:path";

interface TestEvent {
  type: string;
  data: { nesting: number; file?: string; details?: { duration_ms?: number } };
}

/** Yields one table after the last event: seconds and test count per file. */
export default async function* testTimes(source: AsyncIterable<TestEvent>): AsyncGenerator<string> {
  const files = new Map<string, { ms: number; tests: number }>();
  for await (const e of source) {
    if ((e.type !== "test:pass" && e.type !== "test:fail") || e.data.nesting !== 0 || !e.data.file) continue;
    const f = files.get(e.data.file) ?? { ms: 0, tests: 0 };
    f.ms += e.data.details?.duration_ms ?? 0;
    f.tests += 1;
    files.set(e.data.file, f);
  }
  const rows = [...files].sort((a, b) => b[1].ms - a[1].ms);
  const total = rows.reduce((s, [, f]) => s + f.ms, 0);
  let out = "\n# time per test file (top-level tests and hooks, summed)\n";
  for (const [file, f] of rows) out += `#   ${(f.ms / 1000).toFixed(1).padStart(7)} s  ${String(f.tests).padStart(3)}  ${relative(process.cwd(), file)}\n`;
  out += `#   ${(total / 1000).toFixed(1).padStart(7)} s  in ${rows.length} files\n`;
  yield out;
}
