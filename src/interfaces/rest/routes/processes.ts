// The processes a sandbox keeps track of (core/guest/processes.ts): its main process, E2B's
// commands and terminals, and every process a server that went away left running, plain execs
// included (adopted at its next start). Listed, followed again by pid (what a process wrote while
// no client listened comes first, then its output as it is written, then its exit), and signalled.
// A streamed exec answers with its pid in X-ForgeVM-Pid, so a client whose stream ended (the
// server stopped) reconnects here once the server is back.
import type { FastifyPluginAsyncTypebox } from "@fastify/type-provider-typebox";
import { Type } from "typebox";
import type { Forge } from "../../../core/forge.js";
import { StringDecoder } from "node:string_decoder";
import { exitCodeOf, type ProcessListener } from "../../../core/guest/processes.js";
import { formatDuration } from "../../../schemas/durations.js";
import { IdParams, ProcessInfo } from "../../../schemas/rest.js";
import { ndjsonEnd } from "../stream-end.js";
import { signalNumber } from "./workloads.js";

const PidParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 128 }), pid: Type.String({ pattern: "^[0-9]{1,9}$" }) });

export const processRoutes: FastifyPluginAsyncTypebox<{ forge: Forge }> = async (app, { forge }) => {
  app.get("/sandboxes/:id/processes", { schema: { tags: ["exec"], params: IdParams, response: { 200: Type.Array(ProcessInfo) } } }, async (req) => {
    const sb = await forge.sandboxes.use(req.params.id, "rest");
    return sb.processes.list().map((p) => ({
      pid: p.pid,
      command: [p.spec.cmd, ...p.spec.args].filter(Boolean),
      ...(p.spec.tag ? { tag: p.spec.tag } : {}),
      running: p.running,
      adopted: p.adopted,
    }));
  });

  // Following is a client's: it keeps the sandbox from idling while it lasts (a follow ends on a pause).
  app.get("/sandboxes/:id/processes/:pid/output", { schema: { tags: ["exec"], params: PidParams } }, async (req, reply) => {
    const sb = await forge.sandboxes.use(req.params.id, "rest");
    const p = sb.processes.find({ pid: Number(req.params.pid) });
    const t0 = performance.now();
    reply.hijack();
    const out = reply.raw;
    out.writeHead(200, { "Content-Type": "application/x-ndjson", "Cache-Control": "no-store", "X-Request-ID": String(req.id) });
    // One decoder per stream: a character split between two chunks of output is sent whole.
    const decoders = { stdout: new StringDecoder("utf8"), stderr: new StringDecoder("utf8") };
    const line = (stream: "stdout" | "stderr", data: string) => (data && !out.writableEnded ? out.write(`${JSON.stringify({ stream, data })}\n`) : true);
    await new Promise<void>((resolve) => {
      const listener: ProcessListener = {
        output: (o) => {
          const stream = o.stream === "stderr" ? "stderr" : "stdout";
          return line(stream, decoders[stream].write(o.data));
        },
        drained: () => new Promise<void>((r) => out.once("drain", () => r())),
        end: (e) => {
          for (const s of ["stdout", "stderr"] as const) line(s, decoders[s].end());
          const last = e.error
            ? ndjsonEnd({ error: { code: "UNAVAILABLE", message: e.error, retryable: true } })
            : ndjsonEnd({ ok: { exit_code: exitCodeOf(e), timed_out: e.timedOut, duration: formatDuration(performance.now() - t0) } });
          if (!out.writableEnded) out.end(`${last}\n`);
          resolve();
        },
      };
      // The client going away stops the following, not the process.
      out.once("close", () => {
        p.unsubscribe(listener);
        resolve();
      });
      p.subscribe(listener);
    });
  });

  app.post(
    "/sandboxes/:id/processes/:pid/kill",
    {
      schema: {
        tags: ["exec"],
        params: PidParams,
        body: Type.Optional(Type.Object({ signal: Type.Optional(Type.Union([Type.String(), Type.Integer()])) }, { additionalProperties: false })),
        response: { 200: Type.Object({ pid: Type.Integer(), signal: Type.Integer() }) },
      },
    },
    async (req) => {
      const signal = signalNumber(req.body?.signal ?? "SIGKILL");
      const sb = await forge.sandboxes.use(req.params.id, "rest");
      const p = sb.processes.find({ pid: Number(req.params.pid) });
      await p.signal(signal);
      return { pid: p.pid, signal };
    },
  );
};
