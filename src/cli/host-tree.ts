// The host's side of `cp`: a local file or tree as a tar stream, and a tar stream written into a
// local directory. What comes out of a sandbox is the guest's to choose, so unpacking trusts
// none of it: entries stay inside the target (no absolute paths, no "..", nothing written
// through a link the archive made, an existing link at a file's place is replaced rather than
// followed), set-id and sticky bits are dropped, and devices or FIFOs are refused.
import { constants } from "node:fs";
import { chmod, lstat, lutimes, mkdir, open, readdir, readlink, stat, symlink, unlink, utimes } from "node:fs/promises";
import { join } from "node:path";
import { readTar, safeEntryPath, TarError } from "../util/tar-read.js";
import { TAR_END, tarHeader, tarPadding } from "../util/tar-write.js";
import { ignore } from "../util/ignore.js";

export interface TreeSummary {
  files: number;
  dirs: number;
  links: number;
  bytes: number;
}

/**
 * A tar stream of a local path, its entries named `name/…` (or relative to it when `name` is "");
 * entries for which `skip` says so are left out (with what is under them).
 */
export async function* packLocal(path: string, name: string, warn: (msg: string) => void = () => {}, skip: (name: string) => boolean = () => false): AsyncGenerator<Buffer> {
  // An empty chunk would stall a stream made from this (Readable.from waits for data that never comes).
  for await (const c of packEntry(path, name, warn, skip)) if (c.length) yield c;
  yield TAR_END;
}

async function* packEntry(path: string, name: string, warn: (msg: string) => void, skip: (name: string) => boolean): AsyncGenerator<Buffer> {
  if (name && skip(name)) return;
  const st = await lstat(path);
  const meta = { mode: st.mode & 0o7777, mtime: Math.floor(st.mtimeMs / 1000), uid: st.uid, gid: st.gid };
  if (st.isSymbolicLink()) {
    if (name) yield tarHeader({ path: name, type: "symlink", linkname: await readlink(path), ...meta });
  } else if (st.isDirectory()) {
    if (name) yield tarHeader({ path: name, type: "dir", ...meta });
    for (const child of (await readdir(path)).sort()) yield* packEntry(join(path, child), name ? `${name}/${child}` : child, warn, skip);
  } else if (st.isFile()) {
    // The header carries the size at open; the body is cut or zero-padded to it.
    const fh = await open(path, constants.O_RDONLY | constants.O_NOFOLLOW);
    try {
      const size = (await fh.stat()).size;
      yield tarHeader({ path: name || "file", type: "file", size, ...meta });
      let sent = 0;
      if (size > 0) {
        for await (const c of fh.createReadStream({ autoClose: false, start: 0, end: size - 1 }) as AsyncIterable<Buffer>) {
          sent += c.length;
          yield c;
        }
      }
      if (sent < size) yield Buffer.alloc(size - sent);
      yield tarPadding(size);
    } finally {
      await fh.close();
    }
  } else {
    warn(`skipped ${path}: only files, directories and links are copied`);
  }
}

/**
 * Unpacks a tar stream into local directory `root` (which must exist). `rename` maps the
 * archive's first path component (a copy under a new name), `strip` drops it (copying contents).
 */
export async function unpackLocal(source: AsyncIterable<Buffer> | Iterable<Buffer>, root: string, opts: { rename?: string; strip?: boolean } = {}): Promise<TreeSummary> {
  const summary: TreeSummary = { files: 0, dirs: 0, links: 0, bytes: 0 };
  const links = new Set<string>();
  const dirs: [string, number, number][] = [];
  try {
    for await (const { entry, body } of readTar(source)) {
      let rel = safeEntryPath(entry.path);
      if (rel === null) continue;
      const parts = rel.split("/");
      if (opts.strip) parts.shift();
      else if (opts.rename) parts[0] = opts.rename;
      if (!parts.length) continue;
      rel = parts.join("/");
      for (let i = 1; i < parts.length; i++) {
        if (links.has(parts.slice(0, i).join("/"))) throw new TarError(`entry "${entry.path}" lies under a link the same archive made`);
      }
      const dest = join(root, rel);
      const mode = entry.mode & 0o777; // set-id and sticky bits stay behind
      if (entry.type === "dir") {
        const st = await lstat(dest).catch(() => null);
        if (st?.isSymbolicLink() || (st && !st.isDirectory())) await unlink(dest);
        if (!st?.isDirectory()) await mkdir(dest, { mode: 0o700 });
        dirs.push([dest, mode, entry.mtime]);
        summary.dirs++;
      } else if (entry.type === "file") {
        summary.bytes += await writeLocalFile(dest, body, mode);
        await utimes(dest, entry.mtime, entry.mtime);
        summary.files++;
      } else if (entry.type === "symlink") {
        await unlink(dest).catch((e) => {
          if ((e as NodeJS.ErrnoException).code !== "ENOENT") throw e;
        });
        await symlink(entry.linkname, dest);
        await lutimes(dest, entry.mtime, entry.mtime).catch(ignore("times are cosmetic; the content is what counts"));
        links.add(rel);
        summary.links++;
      } else {
        throw new TarError(`entry "${entry.path}" is a ${entry.type}: only files, directories and links are copied`);
      }
    }
  } catch (e) {
    if (e instanceof TarError) throw new Error(`the archive cannot be unpacked: ${e.message}`);
    throw e;
  }
  for (const [d, mode, mtime] of dirs.reverse()) {
    await chmod(d, mode);
    await utimes(d, mtime, mtime);
  }
  return summary;
}

// A link (or anything else) at the file's place is replaced, never written through.
async function writeLocalFile(dest: string, body: AsyncIterable<Buffer>, mode: number): Promise<number> {
  const st = await lstat(dest).catch(() => null);
  if (st && !st.isFile()) {
    if (st.isDirectory()) throw new Error(`cannot overwrite directory ${dest} with a file`);
    await unlink(dest);
  }
  const fh = await open(dest, constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC | constants.O_NOFOLLOW, 0o600);
  let bytes = 0;
  try {
    for await (const c of body) {
      for (let off = 0; off < c.length; ) off += (await fh.write(c, off, c.length - off)).bytesWritten;
      bytes += c.length;
    }
    await fh.chmod(mode);
  } finally {
    await fh.close();
  }
  return bytes;
}

/** What a local path is (links followed: they are the user's own), or null when it does not exist. */
export async function localKind(path: string): Promise<"dir" | "file" | null> {
  const st = await stat(path).catch(() => null);
  return !st ? null : st.isDirectory() ? "dir" : "file";
}
