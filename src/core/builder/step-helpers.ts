// Small pieces of a build step: COPY destinations, variables in them, --chown, and tar streams
// renamed on their way from one stage's sandbox into another's.
import { posix } from "node:path";
import type { Readable } from "node:stream";
import { DockerfileError } from "../../images/dockerfile.js";
import { archiveComponents } from "../../images/flatten.js";
import { readTar } from "../../util/tar-read.js";
import { TAR_END, tarHeader, tarPadding } from "../../util/tar-write.js";
import type { Sandbox } from "../guest/sandbox.js";

/** A COPY destination made absolute; "dir/", "." and "dir/." name a directory (kept as a trailing "/"). */
export function destPath(workdir: string, dest: string): string {
  return posix.resolve(workdir, dest) + (/(^|\/)\.?$/.test(dest) ? "/" : "");
}

/** The environment an image config sets, as a map. */
export function envOf(config: any): Record<string, string> {
  const out: Record<string, string> = {};
  for (const e of (config?.config?.Env ?? []) as string[]) {
    const eq = e.indexOf("=");
    if (eq > 0) out[e.slice(0, eq)] = e.slice(eq + 1);
  }
  return out;
}

/** WORKDIR and COPY destinations may name ENV variables set by earlier steps, and build arguments. */
export function substituteEnv(text: string, config: any, args: Map<string, string>): string {
  const vars = new Map([...Object.entries(envOf(config)), ...args]);
  return text.replace(/\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)/g, (_m, a, b) => vars.get(a ?? b) ?? "");
}

/** Gives the copied paths an owner, resolved in the guest (as Docker does, from its /etc/passwd). */
export async function chown(sb: Sandbox, owner: string, paths: string[], line: number): Promise<void> {
  if (!/^[A-Za-z0-9_.-]+(:[A-Za-z0-9_.-]+)?$/.test(owner)) throw new DockerfileError(`--chown=${owner} is not USER[:GROUP]`, line);
  for (let i = 0; i < paths.length; i += 200) {
    const r = await sb.exec(["chown", "-h", owner, "--", ...paths.slice(i, i + 200)]);
    if (r.exitCode !== 0) throw new DockerfileError(`--chown=${owner}: ${r.stderr.trim()}`, line);
  }
}

/** A tar stream with its entries renamed: the first component dropped (`strip`), or a lone entry renamed. */
export function retarget(source: Readable, strip: boolean, rename: string | null, chmod: number | undefined, onName: (n: string) => void): AsyncIterable<Buffer> {
  return (async function* () {
    for await (const { entry, body } of readTar(source as AsyncIterable<Buffer>)) {
      const comps = archiveComponents(entry.path);
      const path = strip ? comps.slice(1).join("/") : rename !== null && comps.length === 1 ? rename : comps.join("/");
      if (!path) {
        for await (const _ of body) {
          // the stripped top directory itself
        }
        continue;
      }
      onName(path);
      const type = entry.type === "dir" || entry.type === "symlink" ? entry.type : "file";
      const mode = chmod ?? entry.mode;
      if (type === "file") {
        yield tarHeader({ path, type, mode, size: entry.size, uid: entry.uid, gid: entry.gid, mtime: 0 });
        for await (const c of body) if ((c as Buffer).length) yield c as Buffer;
        const pad = tarPadding(entry.size);
        if (pad.length) yield pad;
      } else {
        for await (const _ of body) {
          // directories and links have no body
        }
        yield tarHeader({ path, type, mode, uid: entry.uid, gid: entry.gid, mtime: 0, linkname: entry.linkname });
      }
    }
    yield TAR_END;
  })();
}
