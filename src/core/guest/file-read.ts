// A guest file opened for a download, the same on every interface: the read waits until the
// guest opened the file and sent its first bytes (or its end), so a missing or unreadable path, or
// a directory, fails before any byte of the body is sent, as an error each interface answers in
// its own shape; and the size to announce, where a file's size can be trusted.
import { once } from "node:events";
import type { Readable } from "node:stream";
import type { FileStat } from "../../agent-client/index.js";
import { badRequest } from "../../http/errors.js";
import { ignore } from "../../util/ignore.js";

export interface OpenedRead {
  stream: Readable;
  /** The read's end, with the bytes the guest sent. */
  done: Promise<{ size: number }>;
  /** The file as opened (null when the read ended before the guest said). */
  stat: FileStat | null;
  /** The Content-Length to announce, where the size can be trusted. */
  length: number | undefined;
}

/** Waits for a started read (`Sandbox.readFileStream`) to open and to send its first bytes. */
export async function openRead(r: { stream: NodeJS.ReadableStream; stat: Promise<FileStat>; done: Promise<{ size: number }> }, path: string): Promise<OpenedRead> {
  const stat = await Promise.race([r.stat, r.done.then(() => null)]);
  if (stat?.type === "dir") {
    (r.stream as Readable).destroy();
    r.done.catch(ignore("the read was given up: the path is a directory"));
    throw badRequest(`${path} is a directory`);
  }
  await Promise.race([once(r.stream as Readable, "readable"), r.done]);
  return { stream: r.stream as Readable, done: r.done, stat, length: stat ? readLength(path, stat) : undefined };
}

/**
 * How many bytes a read of `path` will give, when its stat says so truly: procfs and sysfs files
 * report 0 or a page whatever they hold, devices 0 (and /dev/zero never ends), so none of those
 * gets a Content-Length and each is streamed to its end, or until its client goes.
 */
export function readLength(path: string, st: Pick<FileStat, "type" | "size">): number | undefined {
  if (st.type !== "file" || st.size === 0 || /^\/(proc|sys)(\/|$)/.test(path)) return undefined;
  return st.size;
}
