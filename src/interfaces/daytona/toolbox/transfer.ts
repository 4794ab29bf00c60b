// Bulk upload and download in the exact multipart shapes of Daytona's SDK and daemon, streamed
// both ways (no file is held whole in memory). Upload: parts `files[i].path` (the destination,
// a text field) then `files[i].file` (its bytes); parents are made, existing files replaced, and
// each file appears under its name only once all of it arrived (the agent writes beside it and
// renames). Download: a multipart/form-data answer with one `file` part per path, its filename
// the path exactly as asked, or an `error` part holding the daemon's JSON error.
import { once } from "node:events";
import { posix } from "node:path";
import type { Readable } from "node:stream";
import { Busboy, type BusboyInstance } from "@fastify/busboy";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { Type, type Static } from "typebox";
import { toApiError } from "../../../core/error-map.js";
import type { Forge } from "../../../core/forge.js";
import { badRequest } from "../../../http/errors.js";
import { FileParts } from "../../../util/file-parts.js";
import { toolboxErrorBody } from "../errors.js";
import { toolboxOf, type Toolbox } from "./context.js";

const MAX_FILES = 1000;
const BOUNDARY = "FORGEVM-DAYTONA-FILE-BOUNDARY";
const DownloadBody = Type.Object({ paths: Type.Array(Type.String({ minLength: 1 }), { minItems: 1, maxItems: MAX_FILES }) }, { additionalProperties: true });

/** A Content-Disposition filename: quoted as busboy reads it, and as RFC 5987's filename* for what Latin-1 cannot hold. */
function disposition(name: string, path: string): string {
  const quoted = path
    .replaceAll("\\", "\\\\")
    .replaceAll('"', '\\"')
    .replaceAll(/[\r\n]/g, " ");
  return `form-data; name="${name}"; filename="${quoted}"; filename*=utf-8''${encodeURIComponent(path)}`;
}

/** Writes each `files[i].file` part to the path its `files[i].path` field named before it. */
async function upload(t: Toolbox, req: FastifyRequest, body: Readable): Promise<{ path: string; bytes: number }[]> {
  const paths = new Map<string, string>();
  let busboy: BusboyInstance;
  try {
    busboy = Busboy({ headers: req.headers as { "content-type": string }, limits: { files: MAX_FILES, fields: MAX_FILES, fieldSize: 64 * 1024 } });
  } catch (e) {
    throw badRequest(`Content-Type: ${(e as Error).message} (send multipart/form-data with its boundary)`);
  }
  const files = new FileParts(body, busboy, badRequest);
  busboy.on("field", (name: string, value: string) => {
    const m = /^files\[(\d+)\]\.path$/.exec(name);
    if (m) paths.set(m[1], value);
  });
  busboy.on("file", (name: string, file: Readable) => {
    const m = /^files\[(\d+)\]\.file$/.exec(name);
    const path = m ? paths.get(m[1]) : undefined;
    if (!m || path === undefined) {
      files.fail(badRequest(m ? `${name}: its files[${m[1]}].path must come before it` : `unexpected part "${name}": send files[i].path, then files[i].file`));
      file.resume();
      return;
    }
    files.add(path, file, `the upload of ${path}`);
  });
  const done: { path: string; bytes: number }[] = [];
  await files.each(async (asked, stream) => {
    const path = t.resolve(asked);
    await t.sandbox.mkdir(posix.dirname(path), 0o755, t.as);
    const { size } = await t.sandbox.writeFile(path, stream, { as: t.as });
    done.push({ path, bytes: size });
  });
  return done;
}

/** Streams each path as a part of a multipart/form-data answer, in the order asked. */
async function download(t: Toolbox, req: FastifyRequest, reply: FastifyReply, paths: string[]): Promise<void> {
  reply.hijack();
  const res = reply.raw;
  res.writeHead(200, { "Content-Type": `multipart/form-data; boundary=${BOUNDARY}` });
  const write = async (chunk: string | Buffer) => {
    if (!res.write(chunk)) await once(res, "drain");
  };
  try {
    for (const asked of paths) {
      if (res.destroyed) return;
      const path = t.resolve(asked);
      let failed: { status: number; code: string; message: string } | null = null;
      let opened: Awaited<ReturnType<typeof t.sandbox.openRead>> | null = null;
      try {
        opened = await t.sandbox.openRead(path, t.as);
      } catch (e) {
        const err = toApiError(e);
        failed =
          err.status === 404
            ? { status: 404, code: "FILE_NOT_FOUND", message: `file not found: ${asked}` }
            : err.status === 400
              ? { status: 400, code: "INVALID_FILE_PATH", message: `${asked} is a directory` }
              : { status: err.status, code: err.status === 403 ? "FILE_ACCESS_DENIED" : "FILE_READ_FAILED", message: `${asked}: ${err.message}` };
      }
      if (opened) {
        // Once a file's part has begun, a failure can only cut the body (the outer catch), which the SDK reports.
        const length = opened.length;
        await write(
          `--${BOUNDARY}\r\nContent-Type: application/octet-stream\r\nContent-Disposition: ${disposition("file", asked)}\r\n${length !== undefined ? `Content-Length: ${length}\r\n` : ""}\r\n`,
        );
        for await (const chunk of opened.stream) await write(chunk as Buffer);
        await opened.done;
        await write("\r\n");
        continue;
      }
      if (!failed) continue;
      await write(
        `--${BOUNDARY}\r\nContent-Type: application/json; charset=utf-8\r\nContent-Disposition: ${disposition("error", asked)}\r\n\r\n${JSON.stringify({ ...toolboxErrorBody(failed.status, failed.message, failed.code, "/files/bulk-download", req.method), path: asked })}\r\n`,
      );
    }
    await write(`--${BOUNDARY}--\r\n`);
    res.end();
  } catch {
    // A file that broke off mid-way cannot be reported inside its part: the body is cut, which the SDK reports.
    res.destroy();
  }
}

export async function transferRoutes(app: FastifyInstance, { forge }: { forge: Forge }): Promise<void> {
  app.addContentTypeParser("multipart/form-data", (_req, payload, done) => done(null, payload));

  app.post("/files/bulk-upload", { schema: { hide: true } }, async (req, reply) => {
    const body = req.body as Readable;
    try {
      const t = await toolboxOf(forge, req);
      const files = await upload(t, req, body);
      return reply.send({ files });
    } catch (e) {
      // The rest of a refused upload is read and dropped, so the client can read the answer.
      body?.resume?.();
      throw e;
    }
  });

  app.post("/files/bulk-download", { schema: { body: DownloadBody, hide: true } }, async (req: FastifyRequest<{ Body: Static<typeof DownloadBody> }>, reply) => {
    const t = await toolboxOf(forge, req);
    await download(t, req, reply, req.body.paths);
  });
}
