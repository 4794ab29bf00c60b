// What the volume content operations take and give, whichever way they reach the files.
import type { Readable } from "node:stream";

/** A file or directory of a volume. */
export interface VolumeEntry {
  name: string;
  /** From the volume's root, starting with "/". */
  path: string;
  type: "file" | "directory" | "symlink" | "unknown";
  size: number;
  /** Permission bits (and set-id and sticky bits), without the type. */
  mode: number;
  uid: number;
  gid: number;
  atime: string;
  mtime: string;
  ctime: string;
  /** A symlink's target. */
  target?: string;
}

/** Ownership and permissions to give an entry; left out, kept (or root's and the defaults for a new one). */
export interface EntryMetadata {
  uid?: number;
  gid?: number;
  mode?: number;
}

/** The operations on a volume's files: on its image, or through the sandbox that mounts it. */
export interface VolumeFileOps {
  stat(path: string): Promise<VolumeEntry>;
  /** A directory's entries, and theirs down to `depth` levels (1: its own only). */
  list(path: string, depth: number): Promise<VolumeEntry[]>;
  /** Makes a directory (with `parents`, its missing parents too). */
  mkdir(path: string, meta: EntryMetadata, parents: boolean): Promise<VolumeEntry>;
  /** A file's bytes as a stream. */
  read(path: string): Promise<Readable>;
  /** Writes a file from a stream, replacing one that exists (with `parents`, its missing directories are made). */
  write(path: string, data: Readable, meta: EntryMetadata, parents: boolean): Promise<VolumeEntry>;
  setMetadata(path: string, meta: EntryMetadata): Promise<VolumeEntry>;
  /** Removes a file, or a directory with all it holds. */
  remove(path: string): Promise<void>;
}
