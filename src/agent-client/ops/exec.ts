// exec: a process in the guest, its output streamed under credit, stdin if asked, signals and
// terminal resizes; and the buffered form that collects output up to a cap.
import { pipeline } from "node:stream/promises";
import { Readable } from "node:stream";
import { Channel } from "../frame.js";
import type { ExecRequest, ExecResult, ExecStarted } from "../messages.js";
import type { OutgoingStream } from "../streams.js";
import { IncomingStream } from "../streams.js";
import type { Mux } from "../mux.js";
import { ignore } from "../../util/ignore.js";

/** A running process in the guest. Consume stdout and stderr, or the process stalls on credit. */
export interface ExecSession {
  readonly id: number;
  readonly stdout: Readable;
  readonly stderr: Readable;
  /** Present when the request asked for stdin. */
  readonly stdin: OutgoingStream | null;
  /** Resolves when the process started; rejects when it never did (refused, channel closed). */
  readonly started: Promise<ExecStarted>;
  readonly result: Promise<ExecResult>;
  /** Sends a signal to the process, or with `group` to its whole process group. */
  signal(sig: number, group?: boolean): Promise<void>;
  resize(rows: number, cols: number): Promise<void>;
}

export interface BufferedExecResult extends ExecResult {
  stdout: Buffer;
  stderr: Buffer;
  /** True when output beyond maxOutputBytes was discarded. */
  truncated: boolean;
}

/** Starts a process; stdout and stderr arrive as they are produced. */
export function exec(mux: Mux, req: Omit<ExecRequest, "op">): ExecSession {
  return stream(mux, { ...req, op: "exec" as const }, !!req.stdin);
}

/**
 * Takes over a process that a host that went away left running (`procs` lists them, feature
 * adopt): the session is as if this host's exec had started it, its output kept meanwhile first.
 */
export function adopt(mux: Mux, target: number, stdin: boolean): ExecSession {
  return stream(mux, { op: "adopt" as const, target }, stdin);
}

function stream(mux: Mux, req: (Omit<ExecRequest, "op"> & { op: "exec" }) | { op: "adopt"; target: number }, withStdin: boolean): ExecSession {
  const stdout = new IncomingStream((n) => mux.grant(id, Channel.Stdout, n));
  const stderr = new IncomingStream((n) => mux.grant(id, Channel.Stderr, n));
  const stdin: OutgoingStream | null = withStdin ? mux.outgoing((): number => id) : null;
  let onStarted!: (s: ExecStarted) => void;
  let notStarted!: (e: Error) => void;
  const started = new Promise<ExecStarted>((res, rej) => {
    onStarted = res;
    notStarted = rej;
  });
  started.catch(ignore("its failure reaches the caller through the stream"));
  const { id, result }: { id: number; result: Promise<ExecResult> } = mux.start(req, {
    incoming: new Map([
      [Channel.Stdout, stdout],
      [Channel.Stderr, stderr],
    ]),
    outgoing: stdin ?? undefined,
    onEvent: (ev) => ev?.event === "started" && onStarted(ev),
  });
  // A process that never started (refused, or the channel closed) ends its `started` too.
  result.catch((e: Error) => notStarted(e));
  return {
    id,
    stdout,
    stderr,
    stdin,
    started,
    result,
    signal: async (sig, group) => {
      await mux.request<"signal">({ op: "signal", target: id, signal: sig, ...(group ? { group } : {}) });
    },
    resize: async (rows, cols) => {
      await mux.request<"resize">({ op: "resize", target: id, rows, cols });
    },
  };
}

/** Runs a process to completion, collecting at most maxOutputBytes of each stream. */
export async function execBuffered(
  mux: Mux,
  req: Omit<ExecRequest, "op" | "stdin">,
  opts: { stdin?: Uint8Array | string; maxOutputBytes?: number } = {},
): Promise<BufferedExecResult> {
  const max = opts.maxOutputBytes ?? 64 * 1024 * 1024;
  const s = exec(mux, { ...req, stdin: opts.stdin !== undefined });
  let truncated = false;
  const collect = async (r: Readable) => {
    const parts: Buffer[] = [];
    let size = 0;
    for await (const c of r as AsyncIterable<Buffer>) {
      if (size >= max) {
        truncated = true;
        continue;
      }
      const take = c.subarray(0, max - size);
      if (take.length < c.length) truncated = true;
      parts.push(take);
      size += take.length;
    }
    return Buffer.concat(parts);
  };
  const feeding = s.stdin ? pipeline(Readable.from([Buffer.from(opts.stdin!)]), s.stdin).catch(ignore("a process that exits before reading its stdin is not an error")) : null;
  const [stdout, stderr, res] = await Promise.all([collect(s.stdout), collect(s.stderr), s.result]);
  await feeding;
  return { ...res, stdout, stderr, truncated };
}
