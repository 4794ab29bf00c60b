// Whole trees in and out of a guest as tar streams (`cp`, the archive routes). They are composed
// from the agent's file operations (list, stat, read; mkdir, write, symlink, chmod) rather than
// a tar inside the guest, so every image works, with or without tar, and nothing the guest
// prints is parsed. Regular files, directories and symbolic links travel with their modes;
// sockets, devices and FIFOs are left out on the way out and refused on the way in.
import { posix } from "node:path";
import { Readable } from "node:stream";
import type { DirEntry } from "../../agent-client/messages.js";
import { readTar, safeEntryPath, TarError } from "../../util/tar-read.js";
import { TAR_END, tarHeader, tarPadding } from "../../util/tar-write.js";
import { badRequest, ForgevmError } from "../../http/errors.js";
import type { Sandbox } from "./sandbox.js";

export interface ArchiveSummary {
  /** Entries written: files, directories and links. */
  entries: number;
  /** Bytes of file content written. */
  bytes: number;
}

const CHUNK = 1 << 20;

/** A tar stream of `path` in the guest (a file, a link or a whole tree), its entries named from the path's last component. */
export async function packArchive(sb: Sandbox, path: string): Promise<Readable> {
  const top = posix.normalize(path);
  if (top === "/") throw badRequest("path must name a file or directory below /, not / itself");
  const st = await sb.stat(top); // a missing path is a 404 before the first byte
  if (!["file", "dir", "symlink"].includes(st.type)) throw badRequest(`${top} is a ${st.type}: only files, directories and links can be copied`);
  const name = posix.basename(top);
  return Readable.from(
    (async function* () {
      // An empty chunk (a file's padding when it needs none) would stall the stream.
      for await (const c of walk(sb, top, name, { ...st, name })) if (c.length) yield c;
      yield TAR_END;
    })(),
    { objectMode: false },
  );
}

async function* walk(sb: Sandbox, guestPath: string, name: string, e: DirEntry): AsyncGenerator<Buffer> {
  const mtime = Math.floor(e.mtime_ms / 1000);
  if (e.type === "symlink") {
    const target = e.target ?? (await sb.stat(guestPath)).target ?? "";
    yield tarHeader({ path: name, type: "symlink", mode: e.mode, mtime, uid: e.uid, gid: e.gid, linkname: target });
  } else if (e.type === "dir") {
    yield tarHeader({ path: name, type: "dir", mode: e.mode, mtime, uid: e.uid, gid: e.gid });
    const children = await sb.listAllFiles(guestPath).catch(gone);
    for (const c of (children ?? []).sort((a, b) => (a.name < b.name ? -1 : 1))) {
      if (c.type !== "file" && c.type !== "dir" && c.type !== "symlink") continue;
      yield* walk(sb, posix.join(guestPath, c.name), `${name}/${c.name}`, c);
    }
  } else if (e.type === "file") {
    yield* tarFile(sb, guestPath, name, e, mtime);
  }
}

/**
 * A regular file of the guest as a tar entry named `name`. The header carries the size it had
 * when opened; a file that grows meanwhile is cut there and one that shrinks is padded with
 * zeros, so the archive stays well-formed. Nothing when the file is gone.
 */
export async function* tarFile(sb: Sandbox, guestPath: string, name: string, e: { uid: number; gid: number }, mtime: number): AsyncGenerator<Buffer> {
  const r = sb.readFileStream(guestPath);
  const opened = await Promise.race([r.stat, r.done.then(() => null)]).catch(gone);
  if (!opened) {
    r.stream.destroy();
    return; // removed between the listing and the read
  }
  const size = opened.size;
  yield tarHeader({ path: name, type: "file", mode: opened.mode, size, mtime, uid: e.uid, gid: e.gid });
  let sent = 0;
  for await (const c of r.stream as AsyncIterable<Buffer>) {
    if (sent >= size) continue;
    const part = c.length > size - sent ? c.subarray(0, size - sent) : c;
    sent += part.length;
    yield part;
  }
  await r.done;
  for (; sent < size; sent += CHUNK) yield Buffer.alloc(Math.min(CHUNK, size - sent));
  yield tarPadding(size);
}

/** Entries that vanish while a tree is read are left out (null); anything else is an error. */
export function gone(e: unknown): null {
  if (e instanceof ForgevmError && e.code === "NOT_FOUND") return null;
  if ((e as { code?: string })?.code === "ENOENT") return null;
  throw e;
}

/** Unpacks a tar stream into directory `dir` of the guest (created if missing); directory modes are set last. */
export async function unpackArchive(sb: Sandbox, dir: string, source: AsyncIterable<Buffer>): Promise<ArchiveSummary> {
  const root = posix.normalize(dir);
  await sb.mkdir(root);
  const links = new Set<string>(); // links this archive made: nothing is written through them
  const dirModes: [string, number][] = [];
  const summary: ArchiveSummary = { entries: 0, bytes: 0 };
  try {
    for await (const { entry, body } of readTar(source, { nonEmpty: true })) {
      const rel = safeEntryPath(entry.path);
      if (rel === null) continue; // "./": the target directory keeps its own mode
      const parts = rel.split("/");
      for (let i = 1; i < parts.length; i++) {
        if (links.has(parts.slice(0, i).join("/"))) throw badRequest(`archive entry "${entry.path}" lies under the link ${parts.slice(0, i).join("/")} the same archive made`);
      }
      const dest = posix.join(root, rel);
      switch (entry.type) {
        case "dir":
          await sb.mkdir(dest, 0o700);
          dirModes.push([dest, entry.mode]);
          break;
        case "file": {
          const r = await sb.writeFile(dest, body, { mode: entry.mode & 0o7777 });
          summary.bytes += r.size;
          break;
        }
        case "symlink":
          await sb.symlink(dest, entry.linkname).catch(async (e) => {
            if ((e as { code?: string }).code !== "EEXIST") throw e;
            await sb.remove(dest);
            await sb.symlink(dest, entry.linkname);
          });
          links.add(rel);
          break;
        default:
          throw badRequest(`archive entry "${entry.path}" is a ${entry.type}: only files, directories and symbolic links can be copied into a sandbox`);
      }
      summary.entries++;
    }
  } catch (e) {
    if (e instanceof TarError) throw badRequest(`the body is not a tar archive we can read: ${e.message}`);
    throw e;
  }
  for (const [d, mode] of dirModes.reverse()) await sb.chmod(d, mode & 0o7777);
  return summary;
}
