// Loaded into every test file's process by the suite (`node --import`): notes when each test
// starts and ends, in the run directory, so that a file stopped for running too long can be said
// to have hung in that test (node's runner reports a timed-out file as a whole, and the tests it
// had passed only with it), and at its end the CPU time it used with everything it started and
// waited for (its VMs, browsers, servers), which says what a file costs a suite that is short of
// CPU better than its time does. test-times.ts reads the notes back.
import { appendFileSync, realpathSync } from "node:fs";
import { afterEach, beforeEach } from "node:test";
import { cpuSeconds } from "../src/util/process.js";
import { progressFile } from "./test-times.js";

const dir = process.env.TEST_RUN_DIR;
const file = process.argv[1];
// Only in a test file's own process (the runner says so): not in a node program it might start with its options.
if (dir && file && process.env.NODE_TEST_CONTEXT) {
  const own = realpathSync(file);
  const note = (what: string, name: string) => appendFileSync(progressFile(dir), `${Date.now()}\t${what}\t${own}\t${name.replace(/\s+/g, " ")}\n`);
  beforeEach((t) => note("start", t.name));
  afterEach((t) => note("end", t.name));
  process.once("exit", () => note("cpu", String(cpuSeconds(process.pid, true) ?? 0)));
}
