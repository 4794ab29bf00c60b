// GET /sandboxes/{id}/exec/ws: interactive exec over a WebSocket. The first client message is
// the exec request (as for POST /exec, plus `tty`, `rows`, `cols`); then the client may send
// {"stdin": "..."}, {"stdin_eof": true} and, with a tty, {"resize": [rows, cols]}. The server
// sends {"stream","data"} chunks and ends with {"type":"done","exit_code":N}, closing with 1000.
// With "encoding": "base64" stdin and output data are base64 bytes (a binary protocol can run over it).
import type { FastifyPluginAsyncTypebox } from "@fastify/type-provider-typebox";
import type { WebSocket } from "ws";
import { Value } from "typebox/value";
import { parseDuration } from "../../../schemas/durations.js";
import type { Forge } from "../../../core/forge.js";
import { toApiError } from "../../../core/error-map.js";
import { errorBody } from "../../../http/error-body.js";
import { IdParams, WsExecRequest } from "../../../schemas/rest.js";
import { relayChunks } from "../chunks.js";
import { exitFields, wsEnd } from "../stream-end.js";
import { commandLine } from "../views.js";
import { ignore } from "../../../util/ignore.js";

const MAX_MESSAGE = 1024 * 1024;

function sendError(ws: WebSocket, err: unknown): void {
  const e = toApiError(err);
  ws.send(wsEnd({ error: errorBody(e) }));
  ws.close(e.status < 500 ? 1008 : 1011, e.code);
}

export const execWsRoutes: FastifyPluginAsyncTypebox<{ forge: Forge }> = async (app, { forge }) => {
  app.get("/sandboxes/:id/exec/ws", { websocket: true, schema: { tags: ["exec"], params: IdParams } }, (ws, req) => {
    let started = false;
    let finished = false;
    let session: ReturnType<Awaited<ReturnType<Forge["sandboxes"]["use"]>>["execStream"]> | null = null;
    let encoding: "utf8" | "base64" = "utf8";
    let closed = false;
    // One message at a time: the first may wait for a paused sandbox to resume, and the stdin
    // that follows it must reach the process it starts, in order.
    let queue = Promise.resolve();
    ws.on("message", (raw, isBinary) => {
      queue = queue.then(() => onMessage(raw as Buffer, isBinary)).catch(ignore("a message's failure is answered on the socket by onMessage"));
    });
    const onMessage = async (raw: Buffer, isBinary: boolean) => {
      const text = isBinary ? null : raw.toString();
      let msg: any;
      try {
        if (text === null || text.length > MAX_MESSAGE) throw new Error("messages must be JSON text of at most 1 MiB");
        msg = JSON.parse(text);
        if (typeof msg !== "object" || msg === null || Array.isArray(msg)) throw new Error("messages must be JSON objects");
      } catch (e) {
        return sendError(ws, new RangeError(`bad message: ${(e as Error).message}`));
      }
      if (!started) {
        started = true;
        try {
          if (!Value.Check(WsExecRequest, msg)) {
            const err = [...Value.Errors(WsExecRequest, msg)][0];
            const field = err?.instancePath.replace(/^\//, "") || (err?.params as { requiredProperties?: string[] })?.requiredProperties?.[0] || "request";
            throw new RangeError(`${field} ${err?.message ?? "is invalid"}`);
          }
          const timeoutMs = msg.timeout !== undefined ? parseDuration(msg.timeout, "timeout") : undefined;
          const sb = await forge.sandboxes.use((req.params as { id: string }).id, "websocket");
          const command = commandLine(msg.command, msg.args);
          encoding = msg.encoding ?? "utf8";
          session = sb.execStream(command, {
            env: msg.env,
            cwd: msg.workdir,
            user: msg.user,
            timeoutMs,
            stdin: true,
            pty: msg.tty ? { rows: msg.rows ?? 24, cols: msg.cols ?? 80 } : undefined,
          });
          if (closed) void session.signal(9).catch(ignore("the process may have exited"));
          run(ws, session);
        } catch (e) {
          sendError(ws, e);
        }
        return;
      }
      if (!session) return;
      if (typeof msg.stdin === "string") session.stdin?.write(encoding === "base64" ? Buffer.from(msg.stdin, "base64") : msg.stdin);
      if (msg.stdin_eof === true) session.stdin?.end();
      if (Array.isArray(msg.resize) && msg.resize.length === 2) {
        const [rows, cols] = msg.resize.map(Number);
        session.resize(rows, cols).catch(ignore("the process may have exited"));
      }
    };
    ws.on("close", () => {
      closed = true;
      // The client left: stop what it started.
      if (session && !finished) void session.signal(9).catch(ignore("the process may have exited"));
    });
    const run = async (socket: WebSocket, s: NonNullable<typeof session>) => {
      const t0 = performance.now();
      const send = (json: string) => {
        if (socket.readyState === socket.OPEN) socket.send(json);
        return true;
      };
      const forward = (name: "stdout" | "stderr", stream: NodeJS.ReadableStream) => relayChunks(name, stream, send, undefined, encoding);
      const [r] = await Promise.all([s.result.catch((e: Error) => e), forward("stdout", s.stdout), forward("stderr", s.stderr)]);
      finished = true;
      if (socket.readyState !== socket.OPEN) return;
      if (r instanceof Error) return sendError(socket, r);
      socket.send(wsEnd({ ok: exitFields(r, performance.now() - t0) }));
      socket.close(1000, "done");
    };
  });
};
