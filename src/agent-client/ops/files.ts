// Files: atomic writes streamed from bytes or chunks, reads streamed under credit (the file's
// metadata first), and whole-file reads with a size cap.
import { pipeline } from "node:stream/promises";
import { Readable } from "node:stream";
import { AgentError } from "../errors.js";
import { Channel } from "../frame.js";
import type { FileStat, ReadRequest, WriteRequest } from "../messages.js";
import { IncomingStream } from "../streams.js";
import type { Mux } from "../mux.js";
import { ignore } from "../../util/ignore.js";

export interface ReadFileStream {
  readonly stream: Readable;
  /** Metadata of the file, known before the first byte arrives. */
  readonly stat: Promise<FileStat>;
  readonly done: Promise<{ size: number }>;
}

/** Writes a file atomically in the guest from bytes or a stream of chunks. */
export async function writeFile(
  mux: Mux,
  path: string,
  data: Uint8Array | string | AsyncIterable<Uint8Array> | Readable,
  opts: Omit<WriteRequest, "op" | "path"> = {},
): Promise<{ size: number }> {
  const out = mux.outgoing(() => id);
  const { id, result } = mux.start({ ...opts, op: "write", path }, { outgoing: out });
  result.catch(ignore("its failure reaches the caller through the stream"));
  const source = typeof data === "string" || data instanceof Uint8Array ? Readable.from([Buffer.from(data)]) : Readable.from(data);
  // If the guest refuses (e.g. ENOENT), the result rejects first; stop feeding then. If the
  // source fails (a body that broke off), the guest drops its temporary file and the file
  // keeps what it had: nothing partial is ever renamed into place.
  const feeding = pipeline(source, out).then(
    () => result,
    (e) => {
      mux.closeStream(id, true);
      throw e;
    },
  );
  feeding.catch(ignore("its failure reaches the caller through the stream"));
  const res = (await Promise.race([result, feeding])) as { size: number };
  await feeding;
  return { size: res.size };
}

/** Streams a file out of the guest; the stream applies backpressure to the guest. */
export function readFile(mux: Mux, path: string, opts: Omit<ReadRequest, "op" | "path"> = {}): ReadFileStream {
  const stream = new IncomingStream((n) => mux.grant(id, Channel.Stdout, n));
  let onStat!: (s: FileStat) => void;
  const stat = new Promise<FileStat>((r) => (onStat = r));
  const { id, result } = mux.start(
    { ...opts, op: "read", path },
    {
      incoming: new Map([[Channel.Stdout, stream]]),
      onEvent: (ev) => ev?.event === "stat" && onStat(ev),
    },
  );
  result.catch(ignore("its failure reaches the caller through the stream"));
  stat.catch(ignore("its failure reaches the caller through the stream"));
  // A reader that goes (a client that hung up) ends the read in the guest, which would otherwise
  // read an endless file (/dev/zero) on, its bytes dropped, until the VM is destroyed.
  let ended = false;
  result.then(
    () => (ended = true),
    () => (ended = true),
  );
  stream.once("close", () => {
    if (!ended && !stream.readableEnded) mux.closeStream(id, true);
  });
  return { stream, stat, done: result as Promise<{ size: number }> };
}

/** Reads a whole file into memory, refusing files larger than maxBytes. */
export async function readFileBuffer(mux: Mux, path: string, maxBytes = 256 * 1024 * 1024, opts: Omit<ReadRequest, "op" | "path"> = {}): Promise<Buffer> {
  const r = readFile(mux, path, opts);
  const parts: Buffer[] = [];
  let size = 0;
  const st = await Promise.race([r.stat, r.done.then(() => null)]);
  if (st && st.size > maxBytes) {
    r.stream.destroy();
    throw new AgentError("EFBIG", `${path} is ${st.size} bytes, more than the ${maxBytes} byte limit`);
  }
  for await (const c of r.stream as AsyncIterable<Buffer>) {
    size += c.length;
    if (size > maxBytes) {
      r.stream.destroy();
      throw new AgentError("EFBIG", `${path} grew beyond the ${maxBytes} byte limit while reading`);
    }
    parts.push(c);
  }
  await r.done;
  return Buffer.concat(parts);
}
