// Every path of a guest's root filesystem with its inode, change time and attributes: what a
// commit diffs against the image, and what a full layer is made of. Directories are listed
// through the agent several at a time; other filesystems mounted in the tree (proc, sys, dev)
// are recorded as mount points and not entered.
import { posix } from "node:path";
import type { DirEntry } from "../../agent-client/messages.js";
import type { FileKind, FileRecord } from "../../images/file-index.js";
import { ForgevmError } from "../../http/errors.js";
import type { Sandbox } from "./sandbox.js";

const KINDS = new Set<string>(["file", "dir", "symlink", "fifo", "chardev", "blockdev"]);
const PARALLEL = 8;

function record(path: string, e: DirEntry, mount: boolean): FileRecord {
  if (e.ino === undefined || e.ctime === undefined) {
    throw new ForgevmError("CONFLICT", "this sandbox's agent does not report inodes: rebuild the initramfs (./setup.sh) and start a new sandbox to commit it");
  }
  return {
    path,
    type: e.type as FileKind,
    mode: e.mode,
    uid: e.uid,
    gid: e.gid,
    size: e.type === "file" ? e.size : 0,
    mtime: Math.floor(e.mtime_ms / 1000),
    ino: e.ino,
    nlink: e.nlink ?? 1,
    ctime: e.ctime,
    ...(e.rdev_major !== undefined ? { rdev: [e.rdev_major, e.rdev_minor ?? 0] as [number, number] } : {}),
    ...(mount ? { mount: true } : {}),
  };
}

/** Scans the guest's root filesystem; sockets are left out (they belong to running processes). */
export async function scanGuest(sb: Sandbox): Promise<FileRecord[]> {
  const root = await sb.stat("/");
  const rootRecord = record("/", { ...root, name: "" }, false);
  const out: FileRecord[] = [rootRecord];
  const queue: string[] = ["/"];
  let active = 0;
  await new Promise<void>((resolve, reject) => {
    let failed = false;
    const pump = () => {
      if (failed) return;
      if (!queue.length && !active) return resolve();
      while (queue.length && active < PARALLEL) {
        const dir = queue.shift()!;
        active++;
        sb.listAllFiles(dir).then(
          (entries) => {
            active--;
            for (const e of entries) {
              if (!KINDS.has(e.type)) continue;
              const path = posix.join(dir, e.name);
              const mount = e.type === "dir" && e.dev !== undefined && e.dev !== root.dev;
              out.push(record(path, e, mount));
              if (e.type === "dir" && !mount) queue.push(path);
            }
            pump();
          },
          (err) => {
            active--;
            // A directory removed while the scan ran is simply not there.
            if ((err as { code?: string }).code === "ENOENT" || (err instanceof ForgevmError && err.code === "NOT_FOUND")) return pump();
            failed = true;
            reject(err);
          },
        );
      }
    };
    pump();
  });
  return out;
}
