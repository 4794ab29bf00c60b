// Stateful code execution: POST /sandboxes/{id}/code runs code in a code context (buffered, or
// NDJSON events as they happen when `stream` is true); /code/contexts creates, lists, restarts
// and deletes contexts. The same contexts serve E2B's code interpreter (e2b/code-interpreter.ts).
import type { FastifyPluginAsyncTypebox } from "@fastify/type-provider-typebox";
import { Type } from "typebox";
import type { OutgoingHttpHeaders } from "node:http";
import { formatDuration, parseDuration } from "../../../schemas/durations.js";
import type { Forge } from "../../../core/forge.js";
import type { CodeContextInfo, CodeEvent, Execution as CoreExecution } from "../../../core/types.js";
import { errorFields } from "../stream-end.js";
import { CodeContext, CodeContextRequest, CodeRequest, Execution, IdParams, Status } from "../../../schemas/rest.js";

const ContextParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 64 }), ctx: Type.String({ minLength: 1, maxLength: 64 }) });

const contextView = (c: CodeContextInfo) => ({ id: c.id, language: c.language, cwd: c.cwd, user: c.user });

function executionView(ex: CoreExecution, context: string, ms: number) {
  return {
    results: ex.results,
    stdout: ex.stdout.join(""),
    stderr: ex.stderr.join(""),
    error: ex.error,
    execution_count: ex.executionCount,
    context,
    duration: formatDuration(ms),
  };
}

export const codeRoutes: FastifyPluginAsyncTypebox<{ forge: Forge }> = async (app, { forge }) => {
  app.post("/sandboxes/:id/code", { schema: { tags: ["code"], params: IdParams, body: CodeRequest, response: { 200: Execution } } }, async (req, reply) => {
    const b = req.body;
    const sb = await forge.sandboxes.use(req.params.id, "rest");
    const timeoutMs = b.timeout !== undefined ? parseDuration(b.timeout, "timeout") : undefined;
    // The context is resolved first, so a bad one is a 4xx before anything streams.
    const context = b.context ?? (await sb.code.prepare(b.language ?? "python")).id;
    if (b.context) sb.code.get(b.context);
    const t0 = performance.now();
    if (!b.stream) {
      const ex = await sb.code.run(b.code, { contextId: context, language: b.context ? b.language : undefined, env: b.env, timeoutMs });
      return executionView(ex, context, performance.now() - t0);
    }
    reply.hijack();
    const out = reply.raw;
    out.writeHead(200, { ...(reply.getHeaders() as OutgoingHttpHeaders), "Content-Type": "application/x-ndjson", "Cache-Control": "no-store" });
    // A client that goes away interrupts the code (the context lives on).
    const gone = new AbortController();
    out.once("close", () => gone.abort());
    const onEvent = (e: CodeEvent) => out.write(`${JSON.stringify(e)}\n`);
    try {
      const ex = await sb.code.run(b.code, { contextId: context, env: b.env, timeoutMs, signal: gone.signal, onEvent });
      out.write(`${JSON.stringify({ type: "end", execution_count: ex.executionCount, context, duration: formatDuration(performance.now() - t0) })}\n`);
    } catch (e) {
      out.write(`${JSON.stringify({ type: "api_error", ...errorFields(e) })}\n`);
    }
    out.end();
  });

  app.get("/sandboxes/:id/code/contexts", { schema: { tags: ["code"], params: IdParams, response: { 200: Type.Array(CodeContext) } } }, async (req) =>
    (await forge.sandboxes.use(req.params.id, "rest")).code.list().map(contextView),
  );

  app.post(
    "/sandboxes/:id/code/contexts",
    { schema: { tags: ["code"], params: IdParams, body: Type.Optional(CodeContextRequest), response: { 201: CodeContext } } },
    async (req, reply) => {
      const b = req.body ?? {};
      const info = await (await forge.sandboxes.use(req.params.id, "rest")).code.create({ language: b.language, cwd: b.cwd, user: b.user });
      reply.status(201);
      return contextView(info);
    },
  );

  app.post("/sandboxes/:id/code/contexts/:ctx/restart", { schema: { tags: ["code"], params: ContextParams, response: { 200: CodeContext } } }, async (req) =>
    contextView(await (await forge.sandboxes.use(req.params.id, "rest")).code.restart(req.params.ctx)),
  );

  app.delete("/sandboxes/:id/code/contexts/:ctx", { schema: { tags: ["code"], params: ContextParams, response: { 200: Status("deleted") } } }, async (req) => {
    await (await forge.sandboxes.use(req.params.id, "rest")).code.remove(req.params.ctx);
    return { status: "deleted" as const };
  });
};
