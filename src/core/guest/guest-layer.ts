// An OCI layer read out of a running guest: the entries a diff found (or every entry, for a
// squashed or first layer) as a tar stream, with whiteouts for what is gone. Files are read
// through the agent, links keep their targets, hardlinked files are stored once, and device
// nodes and FIFOs travel as what they are.
import { posix } from "node:path";
import type { FileRecord } from "../../images/file-index.js";
import { TAR_END, tarHeader } from "../../util/tar-write.js";
import { gone, tarFile } from "./archive.js";
import type { Sandbox } from "./sandbox.js";

/** Layer statistics, for logs and the commit's reply. */
export interface LayerCounts {
  entries: number;
  whiteouts: number;
}

/** The tar stream of one layer: whiteouts for `removed`, then `changed` in order (parents first). */
export async function* layerTar(sb: Sandbox, changed: FileRecord[], removed: string[], counts: LayerCounts = { entries: 0, whiteouts: 0 }): AsyncGenerator<Buffer> {
  for (const path of removed) {
    const name = `${posix.dirname(path).slice(1)}${posix.dirname(path) === "/" ? "" : "/"}.wh.${posix.basename(path)}`;
    counts.whiteouts++;
    yield tarHeader({ path: name, type: "file", mode: 0o644, size: 0 });
  }
  const firstPath = new Map<number, string>(); // inode → the name its content is stored under
  for (const r of changed) {
    const name = r.path.slice(1);
    const common = { mode: r.mode, uid: r.uid, gid: r.gid, mtime: r.mtime };
    counts.entries++;
    switch (r.type) {
      case "dir":
        yield tarHeader({ path: name, type: "dir", ...common });
        break;
      case "symlink": {
        const st = await sb.stat(r.path).catch(gone);
        if (st?.target !== undefined) yield tarHeader({ path: name, type: "symlink", ...common, linkname: st.target });
        break;
      }
      case "file": {
        const first = r.nlink > 1 ? firstPath.get(r.ino) : undefined;
        if (first !== undefined) {
          yield tarHeader({ path: name, type: "hardlink", ...common, linkname: first });
          break;
        }
        if (r.nlink > 1) firstPath.set(r.ino, name);
        for await (const c of tarFile(sb, r.path, name, r, r.mtime)) if (c.length) yield c;
        break;
      }
      case "chardev":
      case "blockdev":
        yield tarHeader({ path: name, type: r.type === "chardev" ? "char" : "block", ...common, devmajor: r.rdev?.[0] ?? 0, devminor: r.rdev?.[1] ?? 0 });
        break;
      case "fifo":
        yield tarHeader({ path: name, type: "fifo", ...common });
        break;
    }
  }
  yield TAR_END;
}
