// The toolbox's sessions on our shell sessions (core/guest/shell-sessions.ts): create, list, get,
// delete; a command run in the session's shell (waited for, or `runAsync` with a stdin), its
// state, its logs as JSON, its logs followed over a WebSocket with the daemon's stream markers
// (01 01 01 before stdout, 02 02 02 before stderr; closed with 1000 once it has finished and all
// was sent), and input sent to it.
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { Type, type Static } from "typebox";
import type { Forge } from "../../../core/forge.js";
import type { LogChunk, ShellSession } from "../../../core/guest/shell-sessions.js";
import { ignore } from "../../../util/ignore.js";
import { DaemonError } from "../errors.js";
import { toolboxOf } from "./context.js";

const STDOUT = Buffer.from([1, 1, 1]);
const STDERR = Buffer.from([2, 2, 2]);

const CreateBody = Type.Object({ sessionId: Type.String({ minLength: 1 }) }, { additionalProperties: true });
const ExecBody = Type.Object(
  {
    command: Type.String({ minLength: 1 }),
    runAsync: Type.Optional(Type.Boolean()),
    async: Type.Optional(Type.Boolean()),
    suppressInputEcho: Type.Optional(Type.Boolean()),
  },
  { additionalProperties: true },
);
const InputBody = Type.Object({ data: Type.String() }, { additionalProperties: true });
const Sid = Type.Object({ sandboxId: Type.String(), sessionId: Type.String() });
const Cid = Type.Object({ sandboxId: Type.String(), sessionId: Type.String(), commandId: Type.String() });

const sessionView = (s: ShellSession) => ({ sessionId: s.id, commands: [...s.commands.values()].map((c) => c.info) });

/** A session that still has its shell (410, SESSION_ENDED, once `exit` ended it). */
function live(s: ShellSession): ShellSession {
  if (!s.alive) throw new DaemonError("CONFLICT", `session ${s.id} has ended: a command exited its shell; delete it and create another`, "SESSION_ENDED", 410);
  return s;
}

export async function sessionRoutes(app: FastifyInstance, { forge }: { forge: Forge }): Promise<void> {
  const session = async (req: FastifyRequest) => {
    const t = await toolboxOf(forge, req);
    return { t, s: t.sandbox.shells.get((req.params as { sessionId: string }).sessionId) };
  };

  app.post("/process/session", { schema: { body: CreateBody, hide: true } }, async (req: FastifyRequest<{ Body: Static<typeof CreateBody> }>, reply) => {
    const t = await toolboxOf(forge, req);
    await t.sandbox.shells.create(req.body.sessionId, { user: t.user.name, cwd: t.workDir });
    return reply.status(201).send();
  });
  app.get("/process/session", { schema: { hide: true } }, async (req) => (await toolboxOf(forge, req)).sandbox.shells.list().map(sessionView));
  app.get("/process/session/:sessionId", { schema: { params: Sid, hide: true } }, async (req) => sessionView((await session(req)).s));
  app.delete("/process/session/:sessionId", { schema: { params: Sid, hide: true } }, async (req, reply) => {
    const { t, s } = await session(req);
    await t.sandbox.shells.delete(s.id);
    return reply.status(204).send();
  });

  app.post(
    "/process/session/:sessionId/exec",
    { schema: { params: Sid, body: ExecBody, hide: true } },
    async (req: FastifyRequest<{ Params: Static<typeof Sid>; Body: Static<typeof ExecBody> }>, reply) => {
      const { s } = await session(req);
      const b = req.body;
      const async = !!(b.runAsync || b.async);
      const c = await live(s).exec(b.command, { async, echoInput: !b.suppressInputEcho });
      if (async) return reply.status(202).send({ cmdId: c.id });
      await c.finished;
      const stdout = c.text("stdout");
      const stderr = c.text("stderr");
      return { cmdId: c.id, output: stdout + stderr, stdout, stderr, exitCode: c.exitCode };
    },
  );

  app.get("/process/session/:sessionId/command/:commandId", { schema: { params: Cid, hide: true } }, async (req: FastifyRequest<{ Params: Static<typeof Cid> }>) => {
    const { s } = await session(req);
    return s.command(req.params.commandId).info;
  });

  app.post(
    "/process/session/:sessionId/command/:commandId/input",
    { schema: { params: Cid, body: InputBody, hide: true } },
    async (req: FastifyRequest<{ Params: Static<typeof Cid>; Body: Static<typeof InputBody> }>) => {
      const { s } = await session(req);
      const c = s.command(req.params.commandId);
      if (c.exitCode !== undefined) throw new DaemonError("CONFLICT", `command ${c.id} has already completed`, "COMMAND_ALREADY_COMPLETED", 410);
      await s.sendInput(c.id, req.body.data);
      return {};
    },
  );

  app.route({
    method: "GET",
    url: "/process/session/:sessionId/command/:commandId/logs",
    schema: { params: Cid, hide: true },
    handler: async (req: FastifyRequest, reply: FastifyReply) => {
      const { s } = await session(req);
      const c = s.command((req.params as Static<typeof Cid>).commandId);
      const stdout = c.text("stdout");
      const stderr = c.text("stderr");
      return reply.send({ output: stdout + stderr, stdout, stderr });
    },
    wsHandler: (ws, req) => {
      // What was logged, then each chunk as it comes, each after its stream's marker; closed once the command has finished and all is out.
      void (async () => {
        const { s } = await session(req);
        const c = s.command((req.params as Static<typeof Cid>).commandId);
        const stop = c.follow((chunk: LogChunk | null) => {
          if (ws.readyState !== ws.OPEN) return;
          // The close frame goes out after the sends queued before it.
          if (chunk === null) return ws.close(1000);
          ws.send(Buffer.concat([chunk.stream === "stdout" ? STDOUT : STDERR, chunk.data]), { binary: true });
        });
        ws.on("close", stop);
      })().catch((e) => {
        // An unknown session or command: the error as the daemon's JSON, then a close that says it failed.
        const status = (e as { status?: number }).status ?? 500;
        if (ws.readyState === ws.OPEN) ws.close(status === 404 ? 4404 : 1011, String((e as Error).message).slice(0, 120));
      });
      ws.on("error", ignore("a client that went away"));
    },
  });
}
