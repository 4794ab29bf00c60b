// Builds the tests' system images (src/setup/index.ts preparedSystemImage: the system image, then
// the desktop image) ahead of the files that use them, on what the machine has spare: the runner starts this in a session of its own, under
// `nice` and the idle I/O class, and the session's scheduling group (autogroup) is lowered too,
// since with autogroups a session competes as one whole whatever its threads' niceness.
import { writeFile } from "node:fs/promises";
import { preparedSystemImage } from "../src/setup/index.js";
import { ignore } from "../src/util/ignore.js";

await writeFile("/proc/self/autogroup", "19").catch(ignore("no autogroup scheduling: the process's niceness applies as it is"));
const t0 = performance.now();
for (const short of ["debian-12", "desktop"]) {
  const name = await preparedSystemImage(undefined, () => {}, short);
  console.log(`# ${name}: ready for the tests in ${((performance.now() - t0) / 1000).toFixed(1)} s, built ahead`);
}
