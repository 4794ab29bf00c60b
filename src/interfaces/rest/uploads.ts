// Bodies a route reads as a stream (a tar, an image or snapshot archive, a file's bytes). Their
// content-type parsers hand the request itself through; any other content type has been parsed
// already (JSON, text) and is refused here by name, so no route ever calls a stream method on a
// parsed object.
import { Readable } from "node:stream";
import type { FastifyRequest } from "fastify";
import { badRequest } from "../../http/errors.js";
import { detachable } from "../../util/detachable.js";

/** The content types whose bodies reach a route unread. */
export const STREAM_TYPES = ["application/x-tar", "application/octet-stream"];

/**
 * The request's body as a stream that fails with a 400 when it breaks off (`release` drains what
 * is left after an error), or a 400 that says what to send: `what` is the body a route expects.
 */
export function uploadStream(req: FastifyRequest, what: string, types: string[] = STREAM_TYPES): { stream: Readable; release: () => void } {
  if (!(req.body instanceof Readable)) {
    const sent = String(req.headers["content-type"] ?? "").split(";")[0] || "no Content-Type";
    throw badRequest(`the body must be ${what}, sent as ${types.join(" or ")} (this one is ${sent})`);
  }
  return detachable(req.body, { what: "the body" });
}
