// A build's context on the host: the directory COPY and ADD read from (an uploaded tar is
// unpacked into one first), minus what .dockerignore leaves out. Sources are matched by glob
// inside the context only (never through a link out of it), hashed for the step cache, and sent
// into the build sandbox as a tar stream.
import { createHash } from "node:crypto";
import { createReadStream, createWriteStream } from "node:fs";
import { lstat, mkdir, readdir, readFile, readlink, rm, symlink } from "node:fs/promises";
import { join, posix } from "node:path";
import { pipeline } from "node:stream/promises";
import { Readable } from "node:stream";
import { DockerIgnore } from "../../util/dockerignore.js";
import { readTar, safeEntryPath, TarError } from "../../util/tar-read.js";
import { TAR_END, tarFileBody, tarHeader } from "../../util/tar-write.js";
import { badRequest } from "../../http/errors.js";

/** One file, directory or link of the context, and the name it gets under the destination. */
export interface ContextEntry {
  rel: string;
  /** Path under the destination directory. */
  target: string;
  type: "file" | "dir" | "symlink";
  mode: number;
  size: number;
  link?: string;
}

const MAX_CONTEXT_BYTES = 8 * 1024 * 1024 * 1024;

/** Unpacks an uploaded context tar into `dir` (files, directories and links only). */
export async function unpackContext(source: AsyncIterable<Buffer>, dir: string): Promise<void> {
  await mkdir(dir, { recursive: true, mode: 0o700 });
  let total = 0;
  try {
    for await (const { entry, body } of readTar(source)) {
      const rel = safeEntryPath(entry.path);
      if (rel === null) continue;
      const dest = join(dir, rel);
      await mkdir(join(dest, ".."), { recursive: true });
      if (entry.type === "dir") await mkdir(dest, { recursive: true, mode: (entry.mode & 0o777) | 0o700 });
      else if (entry.type === "file") {
        total += entry.size;
        if (total > MAX_CONTEXT_BYTES) throw badRequest("the build context is larger than 8 GiB");
        await pipeline(Readable.from(body), createWriteStream(dest, { mode: (entry.mode & 0o777) | 0o600 }));
      } else if (entry.type === "symlink") {
        await rm(dest, { force: true });
        await symlink(entry.linkname, dest);
      } else {
        for await (const _ of body) {
          // drain: devices and FIFOs have no place in a context
        }
      }
    }
  } catch (e) {
    if (e instanceof TarError) throw badRequest(`the build context is not a tar archive we can read: ${e.message}`);
    throw e;
  }
}

export class BuildContext {
  readonly ignore: DockerIgnore;

  private constructor(
    readonly dir: string,
    ignoreText: string,
  ) {
    this.ignore = new DockerIgnore(ignoreText);
  }

  static async open(dir: string): Promise<BuildContext> {
    const st = await lstat(dir).catch(() => null);
    if (!st?.isDirectory()) throw badRequest(`context: ${dir} is not a directory`);
    return new BuildContext(dir, await readFile(join(dir, ".dockerignore"), "utf8").catch(() => ""));
  }

  /** Every path of the context that is not ignored, relative, parents first. */
  private async all(): Promise<string[]> {
    const out: string[] = [];
    const walk = async (rel: string) => {
      for (const name of (await readdir(join(this.dir, rel)).catch(() => [])).sort()) {
        const r = rel ? `${rel}/${name}` : name;
        if (this.ignore.ignores(r)) continue;
        out.push(r);
        const st = await lstat(join(this.dir, r));
        if (st.isDirectory()) await walk(r);
      }
    };
    await walk("");
    return out;
  }

  /**
   * The entries COPY `sources` DEST copies, named as they land under DEST: a directory's
   * contents, a file by its name (or, with one file and a DEST not ending in "/", as DEST).
   */
  async select(sources: string[], dest: string, line: number): Promise<{ entries: ContextEntry[]; destDir: string; asFile: boolean }> {
    const everything = await this.all();
    const matched: string[] = [];
    for (const s of sources) {
      const clean = posix
        .normalize(s)
        .replace(/^(\.\/|\/)+/, "")
        .replace(/\/+$/, "");
      if (clean.startsWith("..")) throw badRequest(`Dockerfile line ${line}: ${s} is outside the build context`);
      if (clean === "" || clean === ".") {
        matched.push("");
        continue;
      }
      let re: RegExp;
      try {
        re = new RegExp(
          `^${clean
            .replace(/[.+^${}()|\\]/g, "\\$&")
            .replace(/\*/g, "[^/]*")
            .replace(/\?/g, "[^/]")}$`,
        );
      } catch {
        // A "[" that opens no class of characters ([abc]) cannot match anything.
        throw badRequest(`Dockerfile line ${line}: ${s} is not a valid pattern (an unclosed "[")`);
      }
      const hits = everything.filter((p) => re.test(p));
      if (!hits.length) throw badRequest(`Dockerfile line ${line}: ${s} is not in the build context${this.ignore.ignores(clean) ? " (.dockerignore leaves it out)" : ""}`);
      matched.push(...hits);
    }
    const entries: ContextEntry[] = [];
    let single = matched.length === 1;
    for (const m of matched) {
      const st = await lstat(join(this.dir, m));
      if (st.isDirectory()) {
        single = false;
        const prefix = m ? `${m}/` : "";
        for (const p of everything) {
          if (!p.startsWith(prefix) || p === m) continue;
          entries.push(await this.entry(p, p.slice(prefix.length)));
        }
      } else {
        entries.push(await this.entry(m, posix.basename(m)));
      }
    }
    const asFile = single && !dest.endsWith("/") && entries.length === 1 && entries[0].type !== "dir";
    if (matched.length > 1 && !dest.endsWith("/")) throw badRequest(`Dockerfile line ${line}: with several sources the destination must be a directory ending in "/"`);
    if (asFile) {
      entries[0].target = posix.basename(dest);
      return { entries, destDir: posix.dirname(dest), asFile };
    }
    return { entries, destDir: dest, asFile };
  }

  private async entry(rel: string, target: string): Promise<ContextEntry> {
    const st = await lstat(join(this.dir, rel));
    const type = st.isDirectory() ? "dir" : st.isSymbolicLink() ? "symlink" : "file";
    return { rel, target, type, mode: st.mode & 0o7777, size: type === "file" ? st.size : 0, ...(type === "symlink" ? { link: await readlink(join(this.dir, rel)) } : {}) };
  }

  /** A hash of what `entries` would copy: names, types, modes and contents. */
  async hash(entries: ContextEntry[]): Promise<string> {
    const h = createHash("sha256");
    for (const e of entries) {
      h.update(`${e.target}\0${e.type}\0${e.mode}\0${e.link ?? ""}\0${e.size}\0`);
      if (e.type === "file") for await (const c of createReadStream(join(this.dir, e.rel))) h.update(c as Buffer);
    }
    return h.digest("hex");
  }

  /** The entries as a tar stream, with an owner and (optionally) a mode for every one. */
  tar(entries: ContextEntry[], owner: { uid: number; gid: number }, chmod?: number): Readable {
    const dir = this.dir;
    return Readable.from(
      (async function* () {
        for (const e of entries) {
          const common = { path: e.target, mode: chmod ?? e.mode, uid: owner.uid, gid: owner.gid, mtime: 0 };
          if (e.type === "dir") yield tarHeader({ ...common, type: "dir" });
          else if (e.type === "symlink") yield tarHeader({ ...common, type: "symlink", linkname: e.link });
          else {
            yield tarHeader({ ...common, type: "file", size: e.size });
            yield* tarFileBody(join(dir, e.rel), e.size);
          }
        }
        yield TAR_END;
      })(),
    );
  }
}
