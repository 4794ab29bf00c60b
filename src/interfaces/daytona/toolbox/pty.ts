// The toolbox's terminals: `create-connect` starts a shell on a PTY and attaches a WebSocket to
// it in one step, `/{id}/connect` attaches to one that runs; then a JSON control frame
// ("connected"), the terminal's output as binary frames, keystrokes back as binary frames, and at
// its end an "exited" control frame with the exit code and a close whose reason carries it too.
// Older SDKs (0.161 and before) make the terminal first (`POST /process/pty`, `lazyStart`) and
// then connect: its output until that first connection is held for it, so nothing is missed.
// Resize, kill, list and info are plain routes. Each terminal is a process of the sandbox's
// process table (tag `daytona-pty:<id>`), so it outlives the socket that started it.
import type { FastifyInstance, FastifyRequest } from "fastify";
import { Type, type Static } from "typebox";
import type { WebSocket } from "ws";
import type { Forge } from "../../../core/forge.js";
import type { ProcessListener, TrackedProcess } from "../../../core/guest/processes.js";
import { badRequest, conflict, notFound } from "../../../http/errors.js";
import { ignore } from "../../../util/ignore.js";
import { toolboxOf, type Toolbox } from "./context.js";

const TAG = "daytona-pty:";
const ENVS_PROTOCOL = "X-Daytona-Pty-Envs~";
/** Stop reading a terminal's output while this much waits for a slow socket. */
const HIGH_WATER = 1024 * 1024;

const PtyParams = Type.Object({ sandboxId: Type.String(), ptyId: Type.String({ minLength: 1 }) });
const CreateBody = Type.Object(
  {
    id: Type.String({ pattern: "^[A-Za-z0-9._-]{1,128}$" }),
    cwd: Type.Optional(Type.String({ maxLength: 4096 })),
    envs: Type.Optional(Type.Record(Type.String({ maxLength: 1024 }), Type.String({ maxLength: 131072 }))),
    cols: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000 })),
    rows: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000 })),
    lazyStart: Type.Optional(Type.Boolean()),
  },
  { additionalProperties: true },
);
/** The most output a terminal made with `POST /process/pty` keeps for its first connection. */
const HELD_MAX = 1024 * 1024;
const ResizeBody = Type.Object({ cols: Type.Integer({ minimum: 1, maximum: 1000 }), rows: Type.Integer({ minimum: 1, maximum: 1000 }) }, { additionalProperties: true });

/** When each terminal was made (the process table does not keep it). */
const created = new WeakMap<TrackedProcess, string>();

/**
 * Output of a terminal that no socket has joined yet (made by `POST /process/pty`): kept, newest
 * last and at most HELD_MAX, until the first connection takes it. A background listener, so a
 * terminal nobody watches never keeps its sandbox awake.
 */
class Held implements ProcessListener {
  readonly background = true;
  private chunks: Buffer[] = [];
  private bytes = 0;
  ending: Parameters<ProcessListener["end"]>[0] | null = null;
  output(o: { data: Buffer }): boolean {
    this.chunks.push(o.data);
    this.bytes += o.data.length;
    while (this.bytes > HELD_MAX && this.chunks.length > 1) this.bytes -= this.chunks.shift()!.length;
    return true;
  }
  drained(): Promise<void> {
    return Promise.resolve();
  }
  end(e: Parameters<ProcessListener["end"]>[0]): void {
    this.ending = e;
  }
  take(): Buffer[] {
    const c = this.chunks;
    this.chunks = [];
    this.bytes = 0;
    return c;
  }
}
const held = new WeakMap<TrackedProcess, Held>();

/** Daytona's PtySessionInfo of a terminal. */
function info(p: TrackedProcess) {
  return {
    id: (p.spec.tag ?? "").slice(TAG.length),
    active: p.running,
    cols: p.spec.pty?.cols ?? 80,
    rows: p.spec.pty?.rows ?? 24,
    cwd: p.spec.cwd ?? "",
    envs: p.spec.env,
    createdAt: created.get(p) ?? new Date().toISOString(),
    lazyStart: held.has(p),
  };
}

/** The terminal `id` of a toolbox's sandbox (running or recently ended). */
function terminal(t: Toolbox, id: string): TrackedProcess {
  try {
    return t.sandbox.processes.find({ tag: TAG + id });
  } catch {
    throw notFound(`no PTY session ${id}`);
  }
}

/** The envs create-connect carries in a subprotocol token (base64url of a JSON object). */
function envsOf(req: FastifyRequest): Record<string, string> {
  const offered = String(req.headers["sec-websocket-protocol"] ?? "")
    .split(",")
    .map((s) => s.trim());
  const token = offered.find((p) => p.startsWith(ENVS_PROTOCOL));
  if (!token) return {};
  let envs: unknown;
  try {
    envs = JSON.parse(Buffer.from(token.slice(ENVS_PROTOCOL.length), "base64url").toString("utf8"));
  } catch {
    throw badRequest("envs: the X-Daytona-Pty-Envs token is not base64url JSON");
  }
  if (typeof envs !== "object" || envs === null || Array.isArray(envs) || !Object.values(envs).every((v) => typeof v === "string")) {
    throw badRequest("envs must be an object of strings");
  }
  return envs as Record<string, string>;
}

const control = (ws: WebSocket, body: Record<string, unknown>) => ws.readyState === ws.OPEN && ws.send(JSON.stringify({ type: "control", ...body }));

/** Joins a socket to a terminal until either ends. */
function attach(ws: WebSocket, p: TrackedProcess): void {
  let waiting: (() => void) | null = null;
  const listener: ProcessListener = {
    output: (o) => {
      if (ws.readyState !== ws.OPEN) return true;
      ws.send(o.data, { binary: true }, () => {
        if (waiting && ws.bufferedAmount < HIGH_WATER) {
          waiting();
          waiting = null;
        }
      });
      return ws.bufferedAmount < HIGH_WATER;
    },
    drained: () => new Promise<void>((r) => (waiting = r)),
    end: (e) => {
      const exitCode = e.exitCode;
      control(ws, { status: "exited", exitCode, ...(e.error ? { exitReason: e.error } : {}) });
      if (ws.readyState === ws.OPEN) ws.close(1000, JSON.stringify({ exitCode }));
    },
  };
  control(ws, { status: "connected" });
  const h = held.get(p);
  if (h) {
    held.delete(p);
    p.unsubscribe(h);
    for (const data of h.take()) if (ws.readyState === ws.OPEN) ws.send(data, { binary: true });
  }
  p.subscribe(listener);
  ws.on("message", (data: Buffer) => void p.sendInput(Buffer.from(data)).catch(ignore("keys for a terminal that just ended")));
  ws.on("close", () => {
    p.unsubscribe(listener);
    waiting?.();
  });
  ws.on("error", ignore("a client that went away"));
}

/** Reports a failure on the socket, as the daemon does, and closes it. */
function refuse(ws: WebSocket, e: unknown): void {
  control(ws, { status: "error", error: (e as Error).message });
  if (ws.readyState === ws.OPEN) ws.close(1011, (e as Error).message.slice(0, 120));
}

/** Starts a shell on a terminal tagged with `id`, unless one with that id runs. */
async function startTerminal(
  t: Toolbox,
  id: string,
  o: { cols: number; rows: number; cwd?: string; envs: Record<string, string> },
  first?: ProcessListener,
): Promise<TrackedProcess> {
  if (t.sandbox.processes.list().some((p) => p.spec.tag === TAG + id)) throw conflict(`PTY session ${id} exists: connect to it, or kill it first`);
  const p = await t.sandbox.startProcess(
    {
      cmd: await t.sandbox.shell(),
      args: ["-i"],
      env: { TERM: "xterm-256color", ...o.envs },
      cwd: o.cwd ? t.resolve(o.cwd) : t.workDir,
      user: t.user.name,
      tag: TAG + id,
      stdin: true,
      pty: { rows: o.rows, cols: o.cols },
    },
    first,
  );
  created.set(p, new Date().toISOString());
  return p;
}

export async function ptyRoutes(app: FastifyInstance, { forge }: { forge: Forge }): Promise<void> {
  app.post("/process/pty", { schema: { body: CreateBody, hide: true } }, async (req: FastifyRequest<{ Body: Static<typeof CreateBody> }>, reply) => {
    const t = await toolboxOf(forge, req);
    const b = req.body;
    const h = new Held();
    const p = await startTerminal(t, b.id, { cols: b.cols ?? 80, rows: b.rows ?? 24, cwd: b.cwd, envs: b.envs ?? {} }, h);
    held.set(p, h);
    return reply.status(201).send({ sessionId: b.id });
  });

  app.get("/process/pty/create-connect", { websocket: true, schema: { hide: true } }, (ws, req) => {
    void (async () => {
      const t = await toolboxOf(forge, req);
      const q = req.query as Record<string, string | undefined>;
      const id = q.id ?? "";
      if (!/^[A-Za-z0-9._-]{1,128}$/.test(id)) throw badRequest("id must be 1-128 letters, digits, '.', '_' or '-'");
      const cols = Number(q.cols ?? 80);
      const rows = Number(q.rows ?? 24);
      if (!Number.isInteger(cols) || !Number.isInteger(rows) || cols < 1 || rows < 1 || cols > 1000 || rows > 1000) throw badRequest("cols and rows must be 1-1000");
      attach(ws, await startTerminal(t, id, { cols, rows, cwd: q.cwd, envs: envsOf(req) }));
    })().catch((e) => refuse(ws, e));
  });

  app.get("/process/pty/:ptyId/connect", { websocket: true, schema: { params: PtyParams, hide: true } }, (ws, req) => {
    void (async () => {
      const t = await toolboxOf(forge, req);
      attach(ws, terminal(t, (req.params as Static<typeof PtyParams>).ptyId));
    })().catch((e) => refuse(ws, e));
  });

  app.get("/process/pty", { schema: { hide: true } }, async (req) => {
    const t = await toolboxOf(forge, req);
    return {
      sessions: t.sandbox.processes
        .list()
        .filter((p) => p.spec.tag?.startsWith(TAG))
        .map(info),
    };
  });

  app.get("/process/pty/:ptyId", { schema: { params: PtyParams, hide: true } }, async (req: FastifyRequest<{ Params: Static<typeof PtyParams> }>) => {
    return info(terminal(await toolboxOf(forge, req), req.params.ptyId));
  });

  app.post(
    "/process/pty/:ptyId/resize",
    { schema: { params: PtyParams, body: ResizeBody, hide: true } },
    async (req: FastifyRequest<{ Params: Static<typeof PtyParams>; Body: Static<typeof ResizeBody> }>) => {
      const p = terminal(await toolboxOf(forge, req), req.params.ptyId);
      await p.resize(req.body.rows, req.body.cols);
      // The spec is what info reads: it says the size the terminal has now.
      if (p.spec.pty) p.spec.pty = { rows: req.body.rows, cols: req.body.cols };
      return info(p);
    },
  );

  app.delete("/process/pty/:ptyId", { schema: { params: PtyParams, hide: true } }, async (req: FastifyRequest<{ Params: Static<typeof PtyParams> }>) => {
    const p = terminal(await toolboxOf(forge, req), req.params.ptyId);
    if (p.running) await p.signal(9);
    return {};
  });
}
