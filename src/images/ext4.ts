// Turning a directory tree into an ext4 image file without mounting anything (mkfs.ext4 -d).
import { stat } from "node:fs/promises";
import { CommandError, run } from "../util/process.js";

/** Creates `out` holding the tree at `dir`, sized from its content plus headroom; returns bytes. */
export async function buildExt4(dir: string, out: string, label: string): Promise<number> {
  const { stdout } = await run("du", ["-sb", "--apparent-size", dir]);
  const used = Number(stdout.split(/\s/)[0]);
  const { stdout: files } = await run("sh", ["-c", 'find "$0" -xdev | wc -l', dir]);
  // Metadata, journal and block rounding need room beyond the file bytes; free space for the
  // guest comes from its larger overlay disk, grown at boot.
  const mib = Math.ceil((used * 1.2) / 1048576) + 64;
  const inodes = Math.max(Number(files) * 2, 16384);
  await run("mkfs.ext4", ["-q", "-F", "-L", label, "-m", "0", "-N", String(inodes), "-E", "root_owner=0:0", "-d", dir, out, `${mib}M`]);
  return (await stat(out)).size;
}

/**
 * Makes an ext4 image left by a running guest clean, as a mount would: its journal replayed and
 * (unless `journalOnly`) orphans freed and the whole filesystem checked.
 */
export async function repairExt4(file: string, journalOnly = false): Promise<void> {
  try {
    await run("e2fsck", journalOnly ? ["-E", "journal_only", "-y", file] : ["-f", "-y", file]);
  } catch (e) {
    // 1 and 2: errors were corrected; 4 and up: the filesystem is still damaged.
    if (!(e instanceof CommandError) || (e.exitCode !== 1 && e.exitCode !== 2)) throw e;
  }
}

/** Which of `paths` (absolute, no symlinks on the way) exist in an ext4 image, read with debugfs without mounting it. */
export async function ext4Has(file: string, paths: string[]): Promise<Set<string>> {
  const found = new Set<string>();
  for (const p of paths) {
    const r = await run("debugfs", ["-R", `stat ${p}`, file]).catch((e: CommandError) => ({ stdout: "", stderr: e.message }));
    if (r.stdout.includes("Inode:") && !/not found/i.test(r.stderr)) found.add(p);
  }
  return found;
}
