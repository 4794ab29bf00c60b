// Request bodies streamed into a guest that may refuse them half-way (a full disk, no permission),
// and bodies that break off half-way themselves (a client that goes, a multipart part without
// its closing boundary, gzip that is not gzip).
import { PassThrough, type Readable } from "node:stream";
import { createGunzip } from "node:zlib";

/** A request body that broke off or could not be decoded: the caller's fault, a 400. */
export class BodyError extends Error {
  override name = "BodyError";
}

/**
 * A stream the consumer may abandon: fed from `source`, which `release` then drains (rather than
 * destroys), so an HTTP client can finish sending and read the error answer instead of a reset
 * connection. A source that fails or closes before its end fails the stream with a BodyError
 * (a bare pipe would leave it open forever, and an unhandled error would end the process);
 * with `gzip` the bytes are decompressed, and bytes that are not gzip fail it the same way.
 */
export function detachable(source: Readable, opts: { gzip?: boolean; what?: string } = {}): { stream: PassThrough; release: () => void } {
  const what = opts.what ?? "the upload";
  const stream = new PassThrough();
  const fail = (e: Error) => {
    if (!stream.destroyed) stream.destroy(e instanceof BodyError ? e : new BodyError(`${what} broke off: ${e.message}`));
  };
  let tail: Readable = source;
  if (opts.gzip) {
    const gunzip = createGunzip();
    gunzip.on("error", (e) => fail(new BodyError(`${what} is not valid gzip: ${e.message}`)));
    source.pipe(gunzip);
    tail = gunzip;
  }
  tail.pipe(stream);
  source.on("error", fail);
  // A request whose client goes closes without an end (and, on some Node versions, without an error).
  source.on("close", () => {
    if (!source.readableEnded) fail(new BodyError(`${what} ended before all of it arrived`));
  });
  if (tail !== source) {
    tail.on("close", () => {
      if (!tail.readableEnded) fail(new BodyError(`${what} ended in the middle of its gzip stream`));
    });
  }
  return {
    stream,
    release: () => {
      source.unpipe();
      source.resume();
    },
  };
}
