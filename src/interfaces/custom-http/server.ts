// The ForgeVM Custom HTTP provider protocol, served: under /custom-http, `forgevm serve` answers
// the routes another ForgeVM API server's `custom` provider calls (spawn, exec, files, status,
// destroy, health), so that server can run its sandboxes here. Every route goes through the same
// core operations as our REST API, behind the same API key (X-API-Key). Failures keep our error
// body, which the protocol's client shows verbatim. docs/custom-http.md has the protocol.
import { posix } from "node:path";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { Type, type Static } from "typebox";
import type { Forge } from "../../core/forge.js";
import type { FileStat } from "../../core/types.js";
import { ignore } from "../../util/ignore.js";
import { DiskMb, MemoryMb, Vcpus, StringMap } from "../../schemas/fields.js";
import type { ServerInterface } from "../../server/interface.js";

export const CUSTOM_HTTP_PREFIX = "/custom-http";
/** The most an exec answers of each of its output streams. */
const MAX_BYTES = 64 * 1024 * 1024;

const Mode = Type.Union([Type.String({ pattern: "^0?[0-7]{3,4}$" }), Type.Integer({ minimum: 0, maximum: 0o7777 })]);
const SpawnBody = Type.Object(
  {
    image: Type.String({ minLength: 1 }),
    memory_mb: Type.Optional(MemoryMb()),
    vcpus: Type.Optional(Vcpus()),
    disk_size_mb: Type.Optional(DiskMb()),
    metadata: Type.Optional(StringMap),
  },
  { additionalProperties: true },
);
const ExecBody = Type.Object(
  {
    sandbox_id: Type.String({ minLength: 1 }),
    command: Type.String({ minLength: 1 }),
    args: Type.Optional(Type.Array(Type.String())),
    env: Type.Optional(StringMap),
    workdir: Type.Optional(Type.String({ minLength: 1 })),
    stream: Type.Optional(Type.Boolean()),
  },
  { additionalProperties: true },
);
const WriteBody = Type.Object(
  { sandbox_id: Type.String({ minLength: 1 }), path: Type.String({ minLength: 1 }), content: Type.String(), mode: Type.Optional(Mode) },
  { additionalProperties: true },
);
const PathQuery = Type.Object({ sandbox_id: Type.String({ minLength: 1 }), path: Type.String({ minLength: 1 }) }, { additionalProperties: true });
const GlobQuery = Type.Object({ sandbox_id: Type.String({ minLength: 1 }), pattern: Type.String({ minLength: 1 }) }, { additionalProperties: true });
const DeleteBody = Type.Object(
  { sandbox_id: Type.String({ minLength: 1 }), path: Type.String({ minLength: 1 }), recursive: Type.Optional(Type.Boolean()) },
  { additionalProperties: true },
);
const MoveBody = Type.Object(
  { sandbox_id: Type.String({ minLength: 1 }), old_path: Type.String({ minLength: 1 }), new_path: Type.String({ minLength: 1 }) },
  { additionalProperties: true },
);
const ChmodBody = Type.Object({ sandbox_id: Type.String({ minLength: 1 }), path: Type.String({ minLength: 1 }), mode: Mode }, { additionalProperties: true });
const Id = Type.Object({ id: Type.String({ minLength: 1 }) });

/** A mode as the protocol sends it: octal text ("755") or a number. */
const modeOf = (m: string | number) => (typeof m === "number" ? m : Number.parseInt(m, 8));

/** The protocol's file info: keys its client matches without regard to case. */
function fileInfo(path: string, st: FileStat) {
  const type = st.type === "dir" ? "d" : st.type === "symlink" ? "L" : "-";
  const mode = type + [..."rwxrwxrwx"].map((c, i) => (st.mode & (1 << (8 - i)) ? c : "-")).join("");
  return { path, size: st.size, mode, isDir: st.type === "dir", modTime: new Date(st.mtime_ms).toISOString() };
}

export async function customHttpRoutes(app: FastifyInstance, { forge }: { forge: Forge }): Promise<void> {
  // A path as the protocol names it: absolute, else relative to the sandbox's working directory.
  const session = (id: string) => forge.sandboxes.session(id, "custom-http", { relative: "workdir" });

  app.get("/health", { schema: { hide: true } }, async () => ({ status: "ok" }));

  app.post("/spawn", { schema: { body: SpawnBody, hide: true } }, async (req: FastifyRequest<{ Body: Static<typeof SpawnBody> }>) => {
    const b = req.body;
    const sb = await forge.sandboxes.spawn({ image: b.image, memoryMb: b.memory_mb, vcpus: b.vcpus, diskMb: b.disk_size_mb, metadata: b.metadata });
    return { id: sb.id };
  });

  app.post("/exec", { schema: { body: ExecBody, hide: true } }, async (req: FastifyRequest<{ Body: Static<typeof ExecBody> }>, reply: FastifyReply) => {
    const b = req.body;
    const s = await session(b.sandbox_id);
    const sb = s.sandbox;
    // With args, the command is a program; without, a shell command line.
    const argv = b.args ? [b.command, ...b.args] : ["/bin/sh", "-c", b.command];
    const opts = { env: b.env, cwd: b.workdir ? s.resolve(b.workdir) : undefined };
    if (!b.stream) {
      const r = await sb.exec(argv, { ...opts, maxOutputBytes: MAX_BYTES });
      return { exit_code: r.exitCode, stdout: r.stdout, stderr: r.stderr };
    }
    // NDJSON, one line per chunk as it comes; the protocol's stream carries no exit code.
    const running = sb.execStream(argv, opts);
    reply.hijack();
    const res = reply.raw;
    res.writeHead(200, { "Content-Type": "application/x-ndjson" });
    const relay = (stream: NodeJS.ReadableStream, name: "stdout" | "stderr") =>
      new Promise<void>((done) => {
        stream.on("data", (d: Buffer) => {
          if (!res.write(`${JSON.stringify({ stream: name, data: d.toString("utf8") })}\n`)) (stream as unknown as { pause(): void }).pause();
        });
        res.on("drain", () => (stream as unknown as { resume(): void }).resume());
        stream.on("end", done);
        stream.on("close", done);
        stream.on("error", () => done());
      });
    res.on("close", () => void running.signal(9).catch(ignore("the process may have ended")));
    await Promise.all([relay(running.stdout, "stdout"), relay(running.stderr, "stderr"), running.result.catch(ignore("its end is the stream's end"))]);
    res.end();
  });

  app.post("/files", { schema: { body: WriteBody, hide: true } }, async (req: FastifyRequest<{ Body: Static<typeof WriteBody> }>) => {
    const b = req.body;
    const s = await session(b.sandbox_id);
    const sb = s.sandbox;
    const path = s.resolve(b.path);
    await sb.mkdir(posix.dirname(path), 0o755);
    const { size } = await sb.writeFile(path, b.content, b.mode !== undefined ? { mode: modeOf(b.mode) } : {});
    return { path, size };
  });

  app.get("/files", { schema: { querystring: PathQuery, hide: true } }, async (req: FastifyRequest<{ Querystring: Static<typeof PathQuery> }>, reply) => {
    const s = await session(req.query.sandbox_id);
    const sb = s.sandbox;
    const path = s.resolve(req.query.path);
    const r = await sb.openRead(path);
    if (r.length !== undefined) reply.header("Content-Length", String(r.length));
    return reply.type("application/octet-stream").send(r.stream);
  });

  app.get("/files/list", { schema: { querystring: PathQuery, hide: true } }, async (req: FastifyRequest<{ Querystring: Static<typeof PathQuery> }>) => {
    const s = await session(req.query.sandbox_id);
    const sb = s.sandbox;
    const dir = s.resolve(req.query.path);
    return (await sb.listAllFiles(dir)).map((e) => fileInfo(posix.join(dir, e.name), e));
  });

  app.get("/files/stat", { schema: { querystring: PathQuery, hide: true } }, async (req: FastifyRequest<{ Querystring: Static<typeof PathQuery> }>) => {
    const s = await session(req.query.sandbox_id);
    const sb = s.sandbox;
    const path = s.resolve(req.query.path);
    return fileInfo(path, await sb.stat(path));
  });

  app.get("/files/glob", { schema: { querystring: GlobQuery, hide: true } }, async (req: FastifyRequest<{ Querystring: Static<typeof GlobQuery> }>) => {
    const s = await session(req.query.sandbox_id);
    const sb = s.sandbox;
    return sb.glob(s.resolve(req.query.pattern));
  });

  app.delete("/files", { schema: { body: DeleteBody, hide: true } }, async (req: FastifyRequest<{ Body: Static<typeof DeleteBody> }>) => {
    const s = await session(req.body.sandbox_id);
    const sb = s.sandbox;
    await sb.remove(s.resolve(req.body.path), !!req.body.recursive);
    return { ok: true };
  });

  app.post("/files/move", { schema: { body: MoveBody, hide: true } }, async (req: FastifyRequest<{ Body: Static<typeof MoveBody> }>) => {
    const s = await session(req.body.sandbox_id);
    const sb = s.sandbox;
    await sb.move(s.resolve(req.body.old_path), s.resolve(req.body.new_path));
    return { ok: true };
  });

  app.post("/files/chmod", { schema: { body: ChmodBody, hide: true } }, async (req: FastifyRequest<{ Body: Static<typeof ChmodBody> }>) => {
    const s = await session(req.body.sandbox_id);
    const sb = s.sandbox;
    await sb.chmod(s.resolve(req.body.path), modeOf(req.body.mode));
    return { ok: true };
  });

  app.get("/status/:id", { schema: { params: Id, hide: true } }, async (req: FastifyRequest<{ Params: Static<typeof Id> }>) => {
    const row = forge.sandboxes.get(req.params.id);
    return { id: row.id, state: row.state };
  });

  app.delete("/sandboxes/:id", { schema: { params: Id, hide: true } }, async (req: FastifyRequest<{ Params: Static<typeof Id> }>) => {
    await forge.sandboxes.destroy(forge.sandboxes.get(req.params.id).id, "custom-http");
    return { ok: true };
  });
}

/** The Custom HTTP provider protocol as one of the server's interfaces: another ForgeVM server's `custom` provider can use this one. */
export function customHttpInterface({ forge }: { forge: Forge }): ServerInterface {
  return {
    name: "custom-http",
    async register(app) {
      await app.register(customHttpRoutes, { prefix: CUSTOM_HTTP_PREFIX, forge });
    },
  };
}
