// Request bodies streamed into a guest that may refuse them half-way (a full disk, no permission).
import { PassThrough, type Readable } from "node:stream";

/**
 * A stream the consumer may abandon: fed from `source`, which `release` then drains (rather than
 * destroys), so an HTTP client can finish sending and read the error answer instead of a reset
 * connection.
 */
export function detachable(source: Readable): { stream: PassThrough; release: () => void } {
  const stream = new PassThrough();
  source.pipe(stream);
  return {
    stream,
    release: () => {
      source.unpipe(stream);
      source.resume();
    },
  };
}
