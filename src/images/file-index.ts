// What a commit compares a sandbox's disk against: for each path of an image's root filesystem,
// the inode and its change time as a guest sees them. A sandbox's disk starts as a copy-on-write
// copy of the image's, so an untouched file keeps both; the kernel sets a new change time on
// every write, chmod, chown, link or rename, and no call can set it back. The diff therefore
// needs no file contents from the image.
import { readFile, rename, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { promisify } from "node:util";
import { gunzip, gzip } from "node:zlib";

export type FileKind = "file" | "dir" | "symlink" | "fifo" | "chardev" | "blockdev";

/** One path of a guest's root filesystem, as a scan found it. */
export interface FileRecord {
  /** Absolute, normalised ("/etc/passwd"). */
  path: string;
  type: FileKind;
  mode: number;
  uid: number;
  gid: number;
  size: number;
  /** Seconds. */
  mtime: number;
  ino: number;
  nlink: number;
  /** "sec.nsec" */
  ctime: string;
  rdev?: [number, number];
  /** Another filesystem is mounted here (proc, sys, dev): its contents belong to no image. */
  mount?: boolean;
}

/** Per-sandbox files the agent writes at every boot, and ext4's own directory: never part of an image's layers. */
export const NOT_COMMITTED = new Set(["/etc/hostname", "/etc/resolv.conf", "/etc/machine-id", "/lost+found"]);

/** path → [inode, ctime] */
export type FileIndex = Map<string, [number, string]>;

const INDEX_FILE = "files.json.gz";

/** The index of a scan's records. */
export function indexOf(records: FileRecord[]): FileIndex {
  return new Map(records.map((r) => [r.path, [r.ino, r.ctime]]));
}

/** Writes an image's index into its directory. */
export async function saveIndex(imageDir: string, index: FileIndex): Promise<void> {
  const tmp = join(imageDir, `.${INDEX_FILE}.tmp`);
  await writeFile(tmp, await promisify(gzip)(JSON.stringify([...index])));
  await rename(tmp, join(imageDir, INDEX_FILE));
}

/** An image's index, or null when none was made yet. */
export async function loadIndex(imageDir: string): Promise<FileIndex | null> {
  const raw = await readFile(join(imageDir, INDEX_FILE)).catch(() => null);
  if (!raw) return null;
  try {
    return new Map(JSON.parse((await promisify(gunzip)(raw)).toString("utf8")) as [string, [number, string]][]);
  } catch {
    return null; // a damaged index is made again
  }
}

export interface FileDiff {
  /** New or changed paths, parents before children. */
  changed: FileRecord[];
  /** Paths of the image that are gone (not those under a directory that is itself gone). */
  removed: string[];
}

/** What changed between an image (its index; null: an empty image) and a scan of a sandbox made from it. */
export function diffFiles(base: FileIndex | null, now: FileRecord[]): FileDiff {
  const seen = new Set<string>();
  const changed: FileRecord[] = [];
  for (const r of now) {
    if (NOT_COMMITTED.has(r.path) || r.path === "/") continue;
    seen.add(r.path);
    const was = base?.get(r.path);
    if (r.mount) {
      if (!was) changed.push({ ...r, type: "dir", mode: 0o755, uid: 0, gid: 0, size: 0 });
      continue;
    }
    if (!was || was[0] !== r.ino || was[1] !== r.ctime) changed.push(r);
  }
  const removed: string[] = [];
  for (const path of base?.keys() ?? []) {
    if (seen.has(path) || NOT_COMMITTED.has(path) || path === "/") continue;
    const parent = path.slice(0, path.lastIndexOf("/")) || "/";
    if (parent !== "/" && !seen.has(parent) && base?.has(parent)) continue; // the whole directory went
    removed.push(path);
  }
  changed.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
  removed.sort();
  return { changed, removed };
}
