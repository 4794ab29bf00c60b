// E2B's code interpreter (port 49999 of a sandbox) on our code contexts: POST /execute streams
// an execution as NDJSON, /contexts creates, lists, deletes and restarts contexts. Code runs as
// the sandbox's `user` in /home/user unless a context says otherwise.
import { PassThrough } from "node:stream";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { ForgevmError, badRequest } from "../../http/errors.js";
import type { Forge } from "../../core/forge.js";
import type { Sandbox } from "../../core/guest/sandbox.js";
import type { CodeEvent } from "../../core/types.js";
import { DEFAULT_HOME, DEFAULT_USER, sandboxIdOf, sandboxOf } from "./envd/context.js";
import { envdError } from "./envd/files.js";
import { quietTicker } from "./keepalive.js";
import { ENVD_TOKEN, TRAFFIC_TOKEN } from "./views.js";

/** How often a quiet execution sends a keepalive line: E2B's server does every 5 s, but its SDK notices its own timeout only when a line comes. */
const KEEPALIVE_MS = 1000;

/** The sandbox of an interpreter call: its envd token (on /execute) or traffic token (on every call) proves the caller may. */
async function sandboxFor(forge: Forge, req: FastifyRequest): Promise<Sandbox> {
  // The token first (it is derived from the id): an unknown id is the same 401 as a wrong token.
  const id = sandboxIdOf(req);
  const envd = req.headers["x-access-token"];
  const traffic = req.headers["e2b-traffic-access-token"];
  const ok =
    (typeof envd === "string" && forge.sandboxes.checkAccessToken(id, ENVD_TOKEN, envd)) ||
    (typeof traffic === "string" && forge.sandboxes.checkAccessToken(id, TRAFFIC_TOKEN, traffic));
  if (!ok) throw new ForgevmError("UNAUTHORIZED", "missing or wrong access token: use the envdAccessToken or trafficAccessToken that create or connect returned");
  await forge.sandboxes.wake(id, "code-interpreter");
  return sandboxOf(forge, req);
}

interface ExecuteBody {
  code?: unknown;
  context_id?: unknown;
  language?: unknown;
  env_vars?: unknown;
}

function optString(v: unknown, field: string): string | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "string") throw badRequest(`${field} must be a string`);
  return v;
}

function envVars(v: unknown): Record<string, string> | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "object" || Array.isArray(v)) throw badRequest("env_vars must be an object of strings");
  for (const [k, x] of Object.entries(v)) if (typeof x !== "string") throw badRequest(`env_vars.${k} must be a string`);
  return v as Record<string, string>;
}

/** E2B's view of a context. */
const contextView = (c: { id: string; language: string; cwd: string }) => ({ id: c.id, language: c.language, cwd: c.cwd });

export async function codeInterpreterRoutes(app: FastifyInstance, { forge }: { forge: Forge }): Promise<void> {
  const guard =
    <T>(fn: (req: FastifyRequest, reply: FastifyReply) => Promise<T>) =>
    async (req: FastifyRequest, reply: FastifyReply) => {
      try {
        return await fn(req, reply);
      } catch (e) {
        return envdError(reply, e);
      }
    };

  app.post(
    "/execute",
    { schema: { hide: true } },
    guard(async (req, reply) => {
      const sb = await sandboxFor(forge, req);
      const b = (req.body ?? {}) as ExecuteBody;
      if (typeof b !== "object" || Array.isArray(b)) throw badRequest("the body must be a JSON object with code");
      if (typeof b.code !== "string") throw badRequest("code is required (a string)");
      const contextId = optString(b.context_id, "context_id");
      const language = optString(b.language, "language");
      if (contextId && language) throw badRequest("give context_id or language, not both");
      if (contextId) sb.code.get(contextId);
      const env = envVars(b.env_vars);
      const out = new PassThrough();
      const line = (m: unknown) => out.write(`${JSON.stringify(m)}\n`);
      // The execution stops when the client does (a timeout on its side, or it went away).
      const gone = new AbortController();
      reply.raw.once("close", () => gone.abort());
      const quiet = quietTicker(KEEPALIVE_MS, () => line({ type: "keepalive" }));
      const onEvent = (e: CodeEvent) => {
        quiet.touch();
        line(e.type === "stdout" || e.type === "stderr" ? { ...e, timestamp: new Date().toISOString() } : e);
      };
      reply.header("content-type", "application/x-ndjson").send(out);
      void sb.code
        .run(b.code, { contextId, language, env, signal: gone.signal, onEvent, user: DEFAULT_USER, cwd: DEFAULT_HOME })
        .then(
          () => line({ type: "end_of_execution" }),
          (e: Error) => {
            line({ type: "error", name: "SandboxError", value: e.message, traceback: "" });
            line({ type: "end_of_execution" });
          },
        )
        .finally(() => {
          quiet.stop();
          out.end();
        });
      return reply;
    }),
  );

  app.post(
    "/contexts",
    { schema: { hide: true } },
    guard(async (req, reply) => {
      const sb = await sandboxFor(forge, req);
      const b = (req.body ?? {}) as { language?: unknown; cwd?: unknown };
      const info = await sb.code.create({ language: optString(b.language, "language"), cwd: optString(b.cwd, "cwd") ?? DEFAULT_HOME, user: DEFAULT_USER });
      return reply.send(contextView(info));
    }),
  );

  app.get(
    "/contexts",
    { schema: { hide: true } },
    guard(async (req, reply) => reply.send((await sandboxFor(forge, req)).code.list().map(contextView))),
  );

  app.delete(
    "/contexts/:id",
    { schema: { hide: true } },
    guard(async (req, reply) => {
      await (await sandboxFor(forge, req)).code.remove((req.params as { id: string }).id);
      return reply.status(204).send();
    }),
  );

  app.post(
    "/contexts/:id/restart",
    { schema: { hide: true } },
    guard(async (req, reply) => {
      await (await sandboxFor(forge, req)).code.restart((req.params as { id: string }).id);
      return reply.status(204).send();
    }),
  );

  app.get(
    "/health",
    { schema: { hide: true } },
    guard(async (req, reply) => {
      sandboxOf(forge, req);
      return reply.send({ status: "ok" });
    }),
  );
}
