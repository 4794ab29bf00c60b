// The Connect protocol (v1, JSON codec) as E2B's SDKs speak it to envd: unary calls are a JSON
// body answered with JSON; server-streaming calls send one enveloped message and get enveloped
// messages back, ended by an end-stream envelope that carries the error if there was one.
// Envelope: 1 flag byte (0 = message, 2 = end of stream), 4-byte big-endian length, JSON.
import { capMessage } from "../../http/error-body.js";
import { PassThrough } from "node:stream";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { toApiError } from "../../core/error-map.js";
import type { ErrorCode } from "../../http/errors.js";

export const STREAM_TYPE = "application/connect+json";
/** The largest request message we take (requests are small: paths, commands, input chunks). */
export const MAX_MESSAGE = 4 * 1024 * 1024;

/** Connect error codes and the HTTP status each has on a unary call. */
const CONNECT_STATUS = {
  canceled: 499,
  unknown: 500,
  invalid_argument: 400,
  deadline_exceeded: 504,
  not_found: 404,
  already_exists: 409,
  permission_denied: 403,
  resource_exhausted: 429,
  failed_precondition: 400,
  aborted: 409,
  out_of_range: 400,
  unimplemented: 501,
  internal: 500,
  unavailable: 503,
  data_loss: 500,
  unauthenticated: 401,
} as const;
export type ConnectCode = keyof typeof CONNECT_STATUS;

/** Our error codes as Connect codes. */
const FROM_FORGEVM: Record<ErrorCode, ConnectCode> = {
  BAD_REQUEST: "invalid_argument",
  UNAUTHORIZED: "unauthenticated",
  FORBIDDEN: "permission_denied",
  NOT_FOUND: "not_found",
  METHOD_NOT_ALLOWED: "unimplemented",
  CONFLICT: "already_exists",
  PAYLOAD_TOO_LARGE: "resource_exhausted",
  HEADERS_TOO_LARGE: "resource_exhausted",
  UNAVAILABLE: "unavailable",
  INSUFFICIENT_STORAGE: "resource_exhausted",
  INTERNAL_ERROR: "internal",
};

/** An error with a Connect code chosen on purpose (rather than mapped from ours). */
export class ConnectError extends Error {
  constructor(
    readonly code: ConnectCode,
    message: string,
  ) {
    super(message);
  }
}

/** The Connect code and message for anything thrown while serving a call. */
export function connectError(err: unknown): { code: ConnectCode; message: string } {
  if (err instanceof ConnectError) return { code: err.code, message: capMessage(err.message) };
  const e = toApiError(err);
  return { code: FROM_FORGEVM[e.code], message: capMessage(e.message) };
}

/** Frames one message. */
export function envelope(msg: unknown, flags = 0): Buffer {
  const json = Buffer.from(JSON.stringify(msg));
  const head = Buffer.alloc(5);
  head[0] = flags;
  head.writeUInt32BE(json.length, 1);
  return Buffer.concat([head, json]);
}

/** The one message of a server-streaming request body; malformed framing is invalid_argument. */
export function firstMessage(body: Buffer): unknown {
  if (body.length < 5) throw new ConnectError("invalid_argument", "the request body is not a Connect envelope (5-byte header, then the message)");
  const flags = body[0];
  const n = body.readUInt32BE(1);
  if (flags & 0x01) throw new ConnectError("invalid_argument", "compressed request messages are not supported: send them uncompressed");
  if (flags !== 0) throw new ConnectError("invalid_argument", `unexpected envelope flags ${flags}`);
  if (n > body.length - 5) throw new ConnectError("invalid_argument", `the envelope announces ${n} bytes but the body holds ${body.length - 5}`);
  try {
    return JSON.parse(body.subarray(5, 5 + n).toString("utf8"));
  } catch (e) {
    throw new ConnectError("invalid_argument", `the request message is not valid JSON: ${(e as Error).message}`);
  }
}

/** A server stream being answered: messages go out as they come, backpressure included. */
export class ServerStream {
  private readonly out = new PassThrough();
  private ended = false;
  /** Resolves when the client went away or the stream was ended. */
  readonly closed: Promise<void>;

  constructor(reply: FastifyReply) {
    // The response's close: the client went away (or the answer is complete). The request's
    // own close only says its body has been read.
    this.closed = new Promise((resolve) => {
      reply.raw.once("close", resolve);
      this.out.once("close", resolve);
    });
    reply.header("content-type", STREAM_TYPE).send(this.out);
  }

  get open(): boolean {
    return !this.ended && !this.out.destroyed;
  }

  /** Sends one message; false means wait for `drained()` before sending more. */
  send(msg: unknown): boolean {
    if (!this.open) return true;
    return this.out.write(envelope(msg));
  }

  /** Resolves when the client can take more (or has gone). */
  drained(): Promise<void> {
    if (!this.open || !this.out.writableNeedDrain) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        this.out.off("drain", done);
        this.out.off("close", done);
        resolve();
      };
      this.out.once("drain", done);
      this.out.once("close", done);
    });
  }

  /** Ends the stream, with an error when one is given. */
  end(err?: unknown): void {
    if (!this.open) return;
    this.ended = true;
    this.out.end(envelope(err === undefined ? {} : { error: connectError(err) }, 0x02));
  }
}

type Unary<T> = (msg: any, req: FastifyRequest) => Promise<T>;
type Streaming = (msg: any, stream: ServerStream, req: FastifyRequest) => Promise<void>;

/** Whether a URL is a Connect call (`/package.Service/Method`), whose errors are Connect's. */
export const isRpcUrl = (url: string) => /\/[a-z]+\.[A-Z][A-Za-z]*\/[A-Za-z]+(\?|$)/.test(url);

/** A Connect error answer (for a failure before the method ran: the body too large, bad JSON). */
export function sendConnectError(reply: FastifyReply, err: unknown): FastifyReply {
  const { code, message } = connectError(err);
  return reply.status(CONNECT_STATUS[code]).type("application/json").send(JSON.stringify({ code, message }));
}

/** Registers the Connect content types and error answers of the scope envd's services live in. */
export function installConnect(app: FastifyInstance): void {
  app.addContentTypeParser(STREAM_TYPE, { parseAs: "buffer", bodyLimit: MAX_MESSAGE + 5 }, (_req, body, done) => done(null, body));
}

/** Serves one unary method at /<service>/<method>. */
export function unary<T>(app: FastifyInstance, service: string, method: string, handler: Unary<T>): void {
  app.post(`/${service}/${method}`, { schema: { hide: true } }, async (req, reply) => {
    try {
      const msg = req.body ?? {};
      if (typeof msg !== "object" || Array.isArray(msg)) throw new ConnectError("invalid_argument", "the request message must be a JSON object");
      const res = await handler(msg, req);
      return reply.type("application/json").send(JSON.stringify(res ?? {}));
    } catch (e) {
      const { code, message } = connectError(e);
      return reply.status(CONNECT_STATUS[code]).type("application/json").send(JSON.stringify({ code, message }));
    }
  });
}

/** Serves one server-streaming method at /<service>/<method>; errors end the stream. */
export function serverStreaming(app: FastifyInstance, service: string, method: string, handler: Streaming): void {
  app.post(`/${service}/${method}`, { schema: { hide: true } }, async (req, reply) => {
    const type = String(req.headers["content-type"] ?? "")
      .split(";")[0]
      .trim();
    if (type !== STREAM_TYPE) {
      const message = `${service}/${method} is a streaming method: send Content-Type ${STREAM_TYPE}`;
      return reply
        .status(415)
        .type("application/json")
        .send(JSON.stringify({ code: "invalid_argument", message }));
    }
    const stream = new ServerStream(reply);
    try {
      const msg = firstMessage(req.body as Buffer);
      if (typeof msg !== "object" || msg === null || Array.isArray(msg)) throw new ConnectError("invalid_argument", "the request message must be a JSON object");
      await handler(msg, stream, req);
      stream.end();
    } catch (e) {
      stream.end(e);
    }
    return reply;
  });
}

/** The deadline a client set (Connect-Timeout-Ms), in ms, or undefined for none. */
export function deadlineMs(req: FastifyRequest): number | undefined {
  const v = req.headers["connect-timeout-ms"];
  if (typeof v !== "string" || !/^\d{1,10}$/.test(v)) return undefined;
  const n = Number(v);
  return n > 0 ? n : undefined;
}
