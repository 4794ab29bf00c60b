// Builds the tests' system image (src/setup/index.ts preparedSystemImage) ahead of the file that
// uses it, on what the machine has spare: the runner starts this in a session of its own, under
// `nice` and the idle I/O class, and the session's scheduling group (autogroup) is lowered too,
// since with autogroups a session competes as one whole whatever its threads' niceness.
import { writeFile } from "node:fs/promises";
import { preparedSystemImage } from "../src/setup/index.js";
import { ignore } from "../src/util/ignore.js";

await writeFile("/proc/self/autogroup", "19").catch(ignore("no autogroup scheduling: the process's niceness applies as it is"));
const t0 = performance.now();
const name = await preparedSystemImage();
console.log(`# ${name}: ready for the tests in ${((performance.now() - t0) / 1000).toFixed(1)} s, built ahead`);
