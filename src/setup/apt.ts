// Debian packages fetched without installing them (the guest kernel, the ssh server carried into
// guests): `apt-get download` into a work directory, with the fields setup reads.
import { readdir } from "node:fs/promises";
import { join } from "node:path";
import { run } from "../util/process.js";

/** Downloads package `name` into `dir`; its file, version and Depends field. */
export async function aptDownload(name: string, dir: string): Promise<{ file: string; version: string; depends: string }> {
  const attempt = () => run("apt-get", ["download", name], { cwd: dir });
  try {
    await attempt();
  } catch {
    // a fresh machine may have no package lists yet
    await run("apt-get", ["update"]);
    await attempt();
  }
  const file = (await readdir(dir)).find((f) => f.startsWith(`${name}_`) && f.endsWith(".deb"));
  if (!file) throw new Error(`apt-get download ${name} produced no .deb`);
  const { stdout } = await run("dpkg-deb", ["-f", join(dir, file), "Version", "Depends"]);
  const version = /^Version: (.*)$/m.exec(stdout)?.[1] ?? "?";
  const depends = /^Depends: (.*)$/m.exec(stdout)?.[1] ?? "";
  return { file: join(dir, file), version, depends };
}
