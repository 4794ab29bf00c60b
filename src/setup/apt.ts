// Debian packages fetched without installing them (the guest kernel, the ssh server carried into
// guests): `apt-get download` into a work directory, with the fields setup reads.
import { readdir } from "node:fs/promises";
import { join } from "node:path";
import { run } from "../util/process.js";

export interface Downloaded {
  file: string;
  version: string;
  depends: string;
}

/** Downloads package `name` into `dir`; its file, version and Depends field. */
export async function aptDownload(name: string, dir: string): Promise<Downloaded> {
  return (await aptDownloadAll([name], dir))[0];
}

/** Downloads packages `names` into `dir` with one apt-get; each one's file, version and Depends field. */
export async function aptDownloadAll(names: string[], dir: string): Promise<Downloaded[]> {
  const attempt = () => run("apt-get", ["download", ...names], { cwd: dir });
  try {
    await attempt();
  } catch {
    // a fresh machine may have no package lists yet
    await run("apt-get", ["update"]);
    await attempt();
  }
  const files = await readdir(dir);
  return Promise.all(
    names.map(async (name) => {
      const file = files.find((f) => f.startsWith(`${name}_`) && f.endsWith(".deb"));
      if (!file) throw new Error(`apt-get download ${name} produced no .deb`);
      const { stdout } = await run("dpkg-deb", ["-f", join(dir, file), "Version", "Depends"]);
      const version = /^Version: (.*)$/m.exec(stdout)?.[1] ?? "?";
      const depends = /^Depends: (.*)$/m.exec(stdout)?.[1] ?? "";
      return { file: join(dir, file), version, depends };
    }),
  );
}
