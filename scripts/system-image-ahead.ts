// Builds the tests' system images (src/setup/index.ts preparedSystemImages: the system image, then
// the desktop image, from one debootstrap) ahead of the files that use them, on what the machine has spare: the runner starts this in a session of its own, under
// `nice` and the idle I/O class, and the session's scheduling group (autogroup) is lowered too,
// since with autogroups a session competes as one whole whatever its threads' niceness.
import { writeFile } from "node:fs/promises";
import { preparedSystemImages } from "../src/setup/index.js";
import { ignore } from "../src/util/ignore.js";

// A stop of the run: exit as at an end, so that the exit hooks kill the build's VM.
for (const sig of ["SIGINT", "SIGTERM"] as const) process.once(sig, () => process.exit(130));
await writeFile("/proc/self/autogroup", "19").catch(ignore("no autogroup scheduling: the process's niceness applies as it is"));
const t0 = performance.now();
// One debootstrap for both; the system image is stored first, and its test can start while the desktop's builds.
const said = (name: string) => console.log(`# ${name}: ready for the tests in ${((performance.now() - t0) / 1000).toFixed(1)} s, built ahead`);
const built = new Set<string>();
const names = await preparedSystemImages(["debian-12", "desktop"], (m) => {
  const name = /^image (\S+): built \(/.exec(m)?.[1];
  if (name) said(name);
  if (name) built.add(name);
});
for (const name of names) if (!built.has(name)) said(name);
