// Applying image layers onto a root directory, as a container runtime would: whiteouts and
// opaque directories, hardlinks, symlinks, device nodes, modes, owners and xattrs. Every path is
// resolved inside the root — through symlinks that earlier layers made — so that no layer can
// write outside it, whatever its names or links say.
import { createWriteStream } from "node:fs";
import { chmod, lchown, link, lstat, mkdir, readdir, readlink, rm, symlink, utimes } from "node:fs/promises";
import { join } from "node:path";
import { pipeline } from "node:stream/promises";
import { Readable } from "node:stream";
import { run } from "../util/process.js";
import { readTar, type TarEntry } from "../util/tar-read.js";
import { ignore } from "../util/ignore.js";

export class LayerError extends Error {
  override name = "LayerError";
}

const MAX_LINK_HOPS = 40;

/** Splits an archive path into clean components; refuses any that climb out with "..". */
export function archiveComponents(p: string): string[] {
  const parts = p.split("/").filter((c) => c !== "" && c !== ".");
  if (parts.includes("..")) throw new LayerError(`layer entry "${p}" climbs out of the image root`);
  return parts;
}

/**
 * The host path for `components` inside `root`, following symlinks as the guest would see them
 * (absolute targets restart at the root, ".." stops at the root). Missing directories are
 * created when `create` is set. The last component is followed only with `followLast`.
 */
async function resolveInRoot(root: string, components: string[], create: boolean, followLast = false): Promise<string> {
  const done: string[] = [];
  const todo = [...components];
  let hops = 0;
  while (todo.length > (followLast ? 0 : 1)) {
    const c = todo.shift()!;
    if (c === "..") {
      done.pop();
      continue;
    }
    const host = join(root, ...done, c);
    const st = await lstat(host).catch(() => null);
    if (st?.isSymbolicLink()) {
      if (++hops > MAX_LINK_HOPS) throw new LayerError(`too many symlinks resolving /${components.join("/")}`);
      const target = await readlink(host);
      if (target.startsWith("/")) done.length = 0;
      todo.unshift(...target.split("/").filter((x) => x !== "" && x !== "."));
      continue;
    }
    if (!st) {
      if (!create) throw new LayerError(`/${[...done, c].join("/")} does not exist`);
      await mkdir(host, { mode: 0o755 });
    } else if (!st.isDirectory()) {
      throw new LayerError(`/${[...done, c].join("/")} is not a directory`);
    }
    done.push(c);
  }
  const last = todo[0];
  if (last === undefined) return join(root, ...done);
  if (last === "..") throw new LayerError(`layer entry /${components.join("/")} names a parent directory`);
  return join(root, ...done, last);
}

async function setAttrs(host: string, e: TarEntry, isLink: boolean): Promise<void> {
  await lchown(host, e.uid, e.gid);
  if (!isLink) await chmod(host, e.mode); // after chown, which clears setuid bits
  for (const [name, value] of Object.entries(e.xattrs)) {
    await run("setfattr", ["-h", "-n", name, "-v", `0s${value.toString("base64")}`, host]);
  }
  if (!isLink) await utimes(host, e.mtime, e.mtime).catch(ignore("times are cosmetic; the content is what counts"));
}

/** Applies one uncompressed layer (a tar stream) onto `root`. */
export async function applyLayer(root: string, tarStream: AsyncIterable<Buffer> | Iterable<Buffer>): Promise<{ entries: number }> {
  const createdHere = new Set<string>(); // paths this layer made: opaque markers spare them
  const opaque: string[][] = [];
  let entries = 0;
  for await (const { entry, body } of readTar(tarStream)) {
    entries++;
    const comps = archiveComponents(entry.path);
    if (!comps.length) continue; // the root directory itself
    const base = comps[comps.length - 1];
    if (base === ".wh..wh..opq") {
      opaque.push(comps.slice(0, -1));
      continue;
    }
    if (base.startsWith(".wh.")) {
      const victim = await resolveInRoot(root, [...comps.slice(0, -1), base.slice(4)], false).catch(() => null);
      if (victim) await rm(victim, { recursive: true, force: true });
      continue;
    }
    const host = await resolveInRoot(root, comps, true);
    createdHere.add(comps.join("/"));
    const existing = await lstat(host).catch(() => null);
    if (existing && !(existing.isDirectory() && entry.type === "dir")) await rm(host, { recursive: true, force: true });
    switch (entry.type) {
      case "dir":
        if (!existing?.isDirectory()) await mkdir(host, { mode: 0o755 });
        await setAttrs(host, entry, false);
        break;
      case "file":
        await pipeline(Readable.from(body), createWriteStream(host, { flags: "wx", mode: 0o600 }));
        await setAttrs(host, entry, false);
        break;
      case "symlink":
        await symlink(entry.linkname, host);
        await setAttrs(host, entry, true);
        break;
      case "hardlink": {
        const target = await resolveInRoot(root, archiveComponents(entry.linkname), false);
        const st = await lstat(target).catch(() => null);
        if (!st || st.isDirectory()) throw new LayerError(`hardlink ${entry.path} points at ${entry.linkname}, which is not a file in the image`);
        await link(target, host);
        break;
      }
      case "char":
      case "block":
        await run("mknod", ["-m", (entry.mode & 0o777).toString(8), host, entry.type === "char" ? "c" : "b", String(entry.devmajor), String(entry.devminor)]);
        await setAttrs(host, entry, false);
        break;
      case "fifo":
        await run("mkfifo", ["-m", (entry.mode & 0o777).toString(8), host]);
        await setAttrs(host, entry, false);
        break;
    }
  }
  // Opaque directories hide everything lower layers put in them.
  for (const dir of opaque) {
    const host = await resolveInRoot(root, dir, false, true).catch(() => null);
    if (!host) continue;
    for (const name of await readdir(host).catch(() => [])) {
      if (!createdHere.has([...dir, name].join("/"))) await rm(join(host, name), { recursive: true, force: true });
    }
  }
  return { entries };
}
