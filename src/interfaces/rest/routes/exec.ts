// POST /sandboxes/{id}/exec: buffered, or NDJSON streamed when `stream` is true.
import type { OutgoingHttpHeaders } from "node:http";
import type { FastifyPluginAsyncTypebox } from "@fastify/type-provider-typebox";
import { formatDuration, parseDuration } from "../../../schemas/durations.js";
import type { Forge } from "../../../core/forge.js";
import { ExecRequest, ExecResult, IdParams } from "../../../schemas/rest.js";
import { relayChunks } from "../chunks.js";
import { errorFields, exitFields, ndjsonEnd } from "../stream-end.js";
import { commandLine, decodeBase64 } from "../views.js";
import { ignore } from "../../../util/ignore.js";

export const execRoutes: FastifyPluginAsyncTypebox<{ forge: Forge; maxOutputBytes: number }> = async (app, { forge, maxOutputBytes }) => {
  app.post("/sandboxes/:id/exec", { schema: { tags: ["exec"], params: IdParams, body: ExecRequest, response: { 200: ExecResult } } }, async (req, reply) => {
    const b = req.body;
    const timeoutMs = b.timeout !== undefined ? parseDuration(b.timeout, "timeout") : undefined;
    const sb = await forge.sandboxes.use(req.params.id, "rest");
    const stdin = b.stdin !== undefined && b.stdin_encoding === "base64" ? decodeBase64(b.stdin, "stdin") : b.stdin;
    const command = commandLine(b.command, b.args);
    const opts = { env: b.env, cwd: b.workdir, user: b.user, timeoutMs };
    if (!b.stream) {
      const r = await sb.exec(command, { ...opts, stdin, maxOutputBytes });
      return { exit_code: r.exitCode, stdout: r.stdout, stderr: r.stderr, duration: formatDuration(r.durationMs), timed_out: r.timedOut, truncated: r.truncated };
    }
    const t0 = performance.now();
    const s = sb.execStream(command, { ...opts, stdin: stdin !== undefined });
    if (s.stdin) s.stdin.end(stdin);
    // Refused before it ran (an unknown user, a closed channel): an error response, not a stream.
    const pid = await s.started.then(
      (st) => st.pid,
      () => null,
    );
    if (pid === null)
      throw await s.result.then(
        () => new Error("the command did not start"),
        (e: Error) => e,
      );
    reply.hijack();
    const out = reply.raw;
    // Its pid, for a client whose stream ends before the process does (the server stopped) to follow it again (routes/processes.ts).
    out.writeHead(200, { ...(reply.getHeaders() as OutgoingHttpHeaders), "Content-Type": "application/x-ndjson", "Cache-Control": "no-store", "X-ForgeVM-Pid": String(pid) });
    const forward = (name: "stdout" | "stderr", stream: NodeJS.ReadableStream) =>
      relayChunks(
        name,
        stream,
        (json) => out.write(`${json}\n`),
        (resume) => out.once("drain", resume),
      );
    // A client that goes away stops the process, so nothing runs on unobserved.
    const onClose = () => {
      if (!out.writableEnded) void s.signal(9).catch(ignore("the process may have exited"));
    };
    out.once("close", onClose);
    const [r] = await Promise.all([s.result.catch((e: Error) => e), forward("stdout", s.stdout), forward("stderr", s.stderr)]);
    out.write(`${ndjsonEnd(r instanceof Error ? { error: errorFields(r) } : { ok: exitFields(r, performance.now() - t0) })}\n`);
    out.off("close", onClose);
    out.end();
  });
};
