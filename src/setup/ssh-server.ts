// The ssh server ForgeVM carries into guests whose image has none (docs/ssh.md): OpenSSH's sshd
// and rsync from the host distribution's archive, unpacked without installing them (installing
// openssh-server would start an sshd on the host), with every library they load and their own
// dynamic loader. Both executables are patched to use that loader and those libraries from
// GUEST_SSH_DIR, so they run in any x86-64 guest with a shell: glibc or musl, any versions.
import { createHash } from "node:crypto";
import { chmod, copyFile, mkdir, mkdtemp, readFile, readdir, rename, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import type { Paths } from "../config/paths.js";
import { run } from "../util/process.js";
import { aptDownloadAll } from "./apt.js";
import { GUEST_SSH_DIR, readSshBundle, type SshBundle } from "../images/ssh-bundle.js";

/** The packages whose programs the bundle carries, and those programs' paths in them. */
const PROGRAMS = [
  { pkg: "openssh-server", path: "usr/sbin/sshd", as: "sbin/sshd" },
  { pkg: "rsync", path: "usr/bin/rsync", as: "bin/rsync" },
];
const LOADER = "ld-linux-x86-64.so.2";

/** Builds the bundle in paths.sshServer unless it is there. */
export async function ensureSshServer(paths: Paths, log: (m: string) => void): Promise<void> {
  const existing = await readSshBundle(paths.sshServer);
  if (existing) {
    log(`ssh server for guests: already built (${PROGRAMS.map((p) => `${p.pkg} ${existing.packages[p.pkg]}`).join(", ")})`);
    return;
  }
  log("ssh server for guests: fetching openssh-server and rsync from the distribution's archive");
  const work = await mkdtemp(join(tmpdir(), "forgevm-sshd-"));
  try {
    await make(paths, work, log);
  } catch (e) {
    if (!(e instanceof TooNew)) throw e;
    log(`ssh server for guests: not built (${e.message}): ssh reaches only sandboxes whose image runs its own sshd`);
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

class TooNew extends Error {
  constructor(version: string) {
    super(`this distribution's OpenSSH ${version} splits sshd into programs the bundle does not carry yet`);
  }
}

async function make(paths: Paths, work: string, log: (m: string) => void): Promise<void> {
  const staging = `${paths.sshServer}.new-${process.pid}`;
  await rm(staging, { recursive: true, force: true });
  const bundle = await build(work, staging);
  await writeFile(join(staging, "bundle.json"), `${JSON.stringify(bundle, null, 1)}\n`);
  await rm(paths.sshServer, { recursive: true, force: true });
  await rename(staging, paths.sshServer);
  log(`ssh server for guests: built (${bundle.files.length} files)`);
}

async function build(work: string, out: string): Promise<SshBundle> {
  const root = join(work, "root");
  const packages: Record<string, string> = {};
  const depends: string[] = [];
  const fetch = async (names: string[]) => {
    for (const [i, meta] of (await aptDownloadAll(names, work)).entries()) {
      packages[names[i]] = meta.version;
      depends.push(...libraryPackages(meta.depends));
      await run("dpkg-deb", ["-x", meta.file, root]);
    }
  };
  await fetch(PROGRAMS.map((p) => p.pkg));
  // OpenSSH 9.8 and later run each session in another program at a path built into sshd; the
  // bundle does not carry that yet.
  if (await stat(join(root, "usr/lib/openssh/sshd-session")).catch(() => null)) throw new TooNew(packages["openssh-server"]);
  const programs = PROGRAMS.map((p) => join(root, p.path));
  // The host may lack a library the programs link (libwrap, libpopt): fetch the packages they
  // depend on until every one resolves, from the unpacked tree first.
  let libs = new Map<string, string>();
  for (let round = 0; ; round++) {
    const { found, missing } = await resolve(programs, root);
    libs = found;
    if (!missing.length) break;
    const next = [...new Set(depends)].filter((d) => !(d in packages));
    if (round === 4 || !next.length) throw new Error(`ssh server for guests: cannot find ${missing.join(", ")} in the host or the archive`);
    await fetch(next);
  }
  await mkdir(join(out, "lib"), { recursive: true });
  for (const [name, file] of libs) await copyFile(file, join(out, "lib", name));
  for (const [i, p] of PROGRAMS.entries()) {
    const dest = join(out, p.as);
    await mkdir(join(dest, ".."), { recursive: true });
    await copyFile(programs[i], dest);
    await chmod(dest, 0o755);
    // DT_RPATH, unlike RUNPATH, also applies to the libraries' own dependencies.
    await run("patchelf", ["--set-interpreter", `${GUEST_SSH_DIR}/lib/${LOADER}`, "--force-rpath", "--set-rpath", `${GUEST_SSH_DIR}/lib`, dest]);
  }
  const files: SshBundle["files"] = [];
  const hash = createHash("sha256");
  for (const dir of ["lib", "sbin", "bin"]) {
    for (const name of (await readdir(join(out, dir))).sort()) {
      const path = `${dir}/${name}`;
      const mode = dir === "lib" && name !== LOADER ? 0o644 : 0o755;
      await chmod(join(out, path), mode);
      hash.update(path).update(await readFile(join(out, path)));
      files.push({ path, mode });
    }
  }
  return { packages, digest: hash.digest("hex").slice(0, 16), files };
}

/** The library packages of a Depends field (first of each alternative), which may carry what a program links. */
function libraryPackages(depends: string): string[] {
  return depends
    .split(",")
    .map((d) => d.split("|")[0].trim().split(/\s/)[0])
    .filter((n) => /^(lib|zlib)/.test(n) && n !== "libc6");
}

/** Every library the programs load (soname → file), the unpacked tree's before the host's, and the sonames found nowhere. */
async function resolve(programs: string[], root: string): Promise<{ found: Map<string, string>; missing: string[] }> {
  const dirs = ["lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu", "lib", "usr/lib"].map((d) => join(root, d));
  const found = new Map<string, string>();
  const missing = new Set<string>();
  for (const p of programs) {
    const { stdout } = await run("ldd", [p], { env: { ...process.env, LD_LIBRARY_PATH: dirs.join(":") } });
    for (const line of stdout.split("\n")) {
      const lib = /^\s*(\S+) => (\S+) \(/.exec(line);
      if (lib) found.set(lib[1], lib[2]);
      else if (/=> not found/.test(line)) missing.add(line.trim().split(" ")[0]);
      else {
        const loader = /^\s*(\/\S+) \(/.exec(line);
        if (loader && basename(loader[1]) === LOADER) found.set(LOADER, loader[1]);
      }
    }
  }
  return { found, missing: [...missing] };
}
