// The files of a multipart upload, written one after another as busboy finds them, each streamed
// (never a whole file in memory). One failure (a malformed body, a part refused, a write that
// failed) ends the upload: what follows is read and dropped, and the failure is thrown once the
// body has been read. A body that breaks off also ends the part being written, which busboy
// leaves open: its writer sees the error, so nothing half-written is kept.
import type { PassThrough, Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import type { BusboyInstance } from "@fastify/busboy";
import { BodyError, detachable } from "./detachable.js";

interface Part {
  path: string;
  stream: PassThrough;
  release: () => void;
}

export class FileParts {
  private readonly parts: Part[] = [];
  private failure: unknown = null;
  private finished = false;
  private notify: (() => void) | null = null;
  private writing: PassThrough | null = null;
  private readonly feeding: Promise<void>;

  /** Reads `body` through `busboy`; `malformed` makes the error for a body busboy cannot parse. */
  constructor(body: Readable, busboy: BusboyInstance, malformed: (message: string) => unknown) {
    busboy.on("finish", () => this.end());
    busboy.on("error", (e: Error) => {
      this.fail(malformed(`the multipart body is malformed: ${e.message}`));
      this.end();
    });
    this.feeding = pipeline(body, busboy).catch((e) => {
      this.fail(e);
      this.writing?.destroy(new BodyError(`the upload broke off: ${(e as Error).message}`));
      for (const p of this.parts) p.stream.destroy(new BodyError("the upload broke off"));
      this.end();
    });
  }

  /** A file part found, to be written under `path` (`what` names it in errors). */
  add(path: string, file: Readable, what: string): void {
    this.parts.push({ path, ...detachable(file, { what }) });
    this.notify?.();
  }

  /** Ends the upload with this failure (the first one counts). */
  fail(e: unknown): void {
    this.failure ??= e;
    this.notify?.();
  }

  private end(): void {
    this.finished = true;
    this.notify?.();
  }

  /** Writes each part with `write` as it comes; throws the upload's failure once the body is read. */
  async each(write: (path: string, stream: PassThrough) => Promise<void>): Promise<void> {
    for (;;) {
      const part = this.parts.shift();
      if (part) {
        try {
          if (this.failure) throw this.failure;
          this.writing = part.stream;
          await write(part.path, part.stream);
        } catch (e) {
          part.release();
          this.fail(e);
        } finally {
          this.writing = null;
        }
        continue;
      }
      if (this.finished) break;
      await new Promise<void>((r) => (this.notify = r));
      this.notify = null;
    }
    await this.feeding;
    if (this.failure) throw this.failure;
  }
}
