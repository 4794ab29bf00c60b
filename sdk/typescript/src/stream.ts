// Streamed exec: NDJSON lines as the server flushes them, yielded as chunks; the final
// `{"stream":"exit"}` line is not a chunk but the exit code.
import { errorFromBody, ProviderError } from "./errors.js";
import { ndjson } from "./ndjson.js";
import type { StreamChunk } from "./types.js";

/** Output of a streaming exec: iterate it for chunks; `exitCode` is set once it has ended. */
export class ExecStream implements AsyncIterable<StreamChunk> {
  /** The command's exit code, once the stream has ended (null before). */
  exitCode: number | null = null;
  /** Whether the command was killed at its timeout (its exit code is then 124), once the stream has ended. */
  timedOut = false;
  /**
   * The process's pid in the guest, once the stream has started (null before): a stream that
   * ends with UNAVAILABLE because the server stopped can be followed again with
   * `sandbox.followProcess(pid)` once the server is back.
   */
  pid: number | null = null;
  private started = false;
  private finished!: (code: number) => void;
  private failed!: (e: Error) => void;
  /** Resolves with the exit code when the command ends (consume the stream to get there). */
  readonly done: Promise<number>;

  constructor(private readonly open: () => Promise<Response>) {
    this.done = new Promise<number>((res, rej) => {
      this.finished = res;
      this.failed = rej;
    });
    this.done.catch(() => {});
  }

  async *[Symbol.asyncIterator](): AsyncIterator<StreamChunk> {
    if (this.started) throw new Error("an exec stream can be iterated only once");
    this.started = true;
    try {
      const res = await this.open();
      const pid = Number(res.headers.get("x-forgevm-pid"));
      if (Number.isSafeInteger(pid) && pid > 0) this.pid = pid;
      for await (const msg of ndjson<{ stream: string; data: string; exit_code?: number; timed_out?: boolean; code?: string; message?: string; retryable?: boolean }>(res)) {
        if (msg.stream === "exit") {
          this.exitCode = msg.exit_code ?? -1;
          this.timedOut = msg.timed_out === true;
        } else if (msg.stream === "error") throw errorFromBody({ ...msg, message: msg.message ?? msg.data });
        else yield { stream: msg.stream as StreamChunk["stream"], data: msg.data };
      }
      if (this.exitCode === null) throw new ProviderError("the exec stream ended without an exit code", "INTERNAL_ERROR");
      this.finished(this.exitCode);
    } catch (e) {
      this.failed(e as Error);
      throw e;
    }
  }

  /** Reads the whole stream; resolves with everything it printed and the exit code. */
  async collect(): Promise<{ stdout: string; stderr: string; exitCode: number }> {
    let stdout = "";
    let stderr = "";
    for await (const c of this) {
      if (c.stream === "stdout") stdout += c.data;
      else stderr += c.data;
    }
    return { stdout, stderr, exitCode: this.exitCode! };
  }
}
