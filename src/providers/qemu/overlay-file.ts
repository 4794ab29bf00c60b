// A new qcow2 file, empty or over a backing file. qemu-img writes the first of each shape; later
// ones are copies of its bytes, since the file holds no time and no identity (only its size and the
// backing's name and format: checked byte for byte against qemu-img's own). Starting qemu-img forks
// the server, and a fork holds its event loop still while the child gets to its exec, which in a
// burst of a hundred creates, each making one, came to tenths of a second at a time.
import { access, readFile, writeFile } from "node:fs/promises";
import { run } from "../../util/process.js";

export interface OverlayShape {
  /** The virtual size in bytes. */
  bytes: number;
  /** The file it reads what it has not written from, by the name QEMU will open. */
  backing?: string;
  backingFormat?: "qcow2" | "raw";
  /** Not to open the backing file to check it (it is in use by a running VMM). */
  unsafe?: boolean;
}

/** Shapes made so far, each as its file's bytes (~200 KiB); bounded, the oldest forgotten first. */
const made = new Map<string, Buffer>();
const KEEP = 32;

/** qemu-img's arguments for the shape, without the file's name. */
function options(s: OverlayShape): string[] {
  const backing = s.backing ? [...(s.unsafe ? ["-u"] : []), "-b", s.backing, "-F", s.backingFormat ?? "qcow2"] : [];
  return ["-f", "qcow2", ...backing];
}

/** Writes `file` as a qcow2 of that shape (qemu-img's bytes). */
export async function createOverlay(file: string, s: OverlayShape): Promise<void> {
  const key = JSON.stringify([...options(s), s.bytes]);
  const bytes = made.get(key);
  if (bytes) {
    // what qemu-img checks without -u: that the backing is there
    if (s.backing && !s.unsafe) await access(s.backing);
    await writeFile(file, bytes);
    return;
  }
  await run("qemu-img", ["create", "-q", ...options(s), file, String(s.bytes)]);
  const written = await readFile(file);
  made.delete(key);
  made.set(key, written);
  if (made.size > KEEP) made.delete(made.keys().next().value as string);
}
