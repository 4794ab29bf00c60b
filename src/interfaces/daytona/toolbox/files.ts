// The toolbox's file operations, as Daytona's daemon answers them: list (to a depth), details,
// make a folder, delete, move, find (lines containing a text), search (names matching a glob),
// replace (a literal, in each file, failures per file) and permissions. Paths may be relative to
// the work directory. Operations run as the toolbox's user; a missing file is FILE_NOT_FOUND.
import { posix } from "node:path";
import type { FastifyInstance, FastifyRequest } from "fastify";
import { Type, type Static } from "typebox";
import type { DirEntry, FileStat } from "../../../core/types.js";
import type { Forge } from "../../../core/forge.js";
import { badRequest, conflict, notFound } from "../../../http/errors.js";
import { DaemonError } from "../errors.js";
import { type Toolbox, toolboxOf } from "./context.js";

const MAX_OUTPUT = 16 * 1024 * 1024;
/** The deepest listing `depth` may ask for, and the most entries it returns. */
const MAX_DEPTH = 32;
const MAX_ENTRIES = 100_000;

const PathQuery = Type.Object({ path: Type.String({ minLength: 1 }) }, { additionalProperties: true });
const ListQuery = Type.Object({ path: Type.String({ minLength: 1 }), depth: Type.Optional(Type.String({ pattern: "^[1-9][0-9]{0,2}$" })) }, { additionalProperties: true });
const FolderQuery = Type.Object({ path: Type.String({ minLength: 1 }), mode: Type.Optional(Type.String({ pattern: "^0?[0-7]{3,4}$" })) }, { additionalProperties: true });
const DeleteQuery = Type.Object({ path: Type.String({ minLength: 1 }), recursive: Type.Optional(Type.String({ enum: ["true", "false"] })) }, { additionalProperties: true });
const MoveQuery = Type.Object({ source: Type.String({ minLength: 1 }), destination: Type.String({ minLength: 1 }) }, { additionalProperties: true });
const PatternQuery = Type.Object({ path: Type.String({ minLength: 1 }), pattern: Type.String({ minLength: 1 }) }, { additionalProperties: true });
const ReplaceBody = Type.Object(
  { files: Type.Array(Type.String({ minLength: 1 }), { maxItems: 10_000 }), pattern: Type.String({ minLength: 1 }), newValue: Type.String() },
  { additionalProperties: true },
);
const PermissionsQuery = Type.Object(
  {
    path: Type.String({ minLength: 1 }),
    mode: Type.Optional(Type.String({ pattern: "^0?[0-7]{3,4}$" })),
    owner: Type.Optional(Type.String({ minLength: 1, pattern: "^[A-Za-z0-9_.][A-Za-z0-9_.-]*$" })),
    group: Type.Optional(Type.String({ minLength: 1, pattern: "^[A-Za-z0-9_.][A-Za-z0-9_.-]*$" })),
  },
  { additionalProperties: true },
);

/** Go's FileMode.String(): the type letter, then rwx for each of user, group and other. */
function modeString(st: FileStat): string {
  const type = st.type === "dir" ? "d" : st.type === "symlink" ? "L" : "-";
  const bits = "rwxrwxrwx";
  return type + [...bits].map((c, i) => (st.mode & (1 << (8 - i)) ? c : "-")).join("");
}

/** Daytona's FileInfo of an entry at `path`. */
function fileInfo(path: string, st: FileStat) {
  const at = new Date(st.mtime_ms);
  return {
    name: posix.basename(path) || "/",
    size: st.size,
    isDir: st.type === "dir",
    mode: modeString(st),
    permissions: (st.mode & 0o7777).toString(8).padStart(4, "0"),
    owner: String(st.uid),
    group: String(st.gid),
    modifiedAt: at.toISOString(),
    modTime: at.toISOString(),
    path,
  };
}

/** A file's stat, or the daemon's 404. */
async function statOf(t: Toolbox, path: string): Promise<FileStat> {
  try {
    return await t.sandbox.stat(path, t.as);
  } catch (e) {
    if ((e as { code?: string }).code === "ENOENT" || (e as { status?: number }).status === 404) throw notFound(`file not found: ${path}`);
    throw e;
  }
}

async function exists(t: Toolbox, path: string): Promise<boolean> {
  return t.sandbox.stat(path, t.as).then(
    () => true,
    () => false,
  );
}

export async function fileRoutes(app: FastifyInstance, { forge }: { forge: Forge }): Promise<void> {
  app.get("/files", { schema: { querystring: ListQuery, hide: true } }, async (req: FastifyRequest<{ Querystring: Static<typeof ListQuery> }>) => {
    const t = await toolboxOf(forge, req);
    const root = t.resolve(req.query.path);
    const depth = Math.min(Number(req.query.depth ?? 1), MAX_DEPTH);
    const st = await statOf(t, root);
    if (st.type !== "dir") throw new DaemonError("BAD_REQUEST", `not a directory: ${root}`, "INVALID_FILE_PATH");
    const out: ReturnType<typeof fileInfo>[] = [];
    const walk = async (dir: string, level: number): Promise<void> => {
      const entries: DirEntry[] = await t.sandbox.listAllFiles(dir, t.as);
      for (const e of entries) {
        if (out.length >= MAX_ENTRIES) return;
        const path = posix.join(dir, e.name);
        out.push(fileInfo(path, e));
        if (e.type === "dir" && level < depth) await walk(path, level + 1);
      }
    };
    await walk(root, 1);
    return out;
  });

  app.get("/files/info", { schema: { querystring: PathQuery, hide: true } }, async (req: FastifyRequest<{ Querystring: Static<typeof PathQuery> }>) => {
    const t = await toolboxOf(forge, req);
    const path = t.resolve(req.query.path);
    return fileInfo(path, await statOf(t, path));
  });

  app.post("/files/folder", { schema: { querystring: FolderQuery, hide: true } }, async (req: FastifyRequest<{ Querystring: Static<typeof FolderQuery> }>, reply) => {
    const t = await toolboxOf(forge, req);
    await t.sandbox.mkdir(t.resolve(req.query.path), req.query.mode ? Number.parseInt(req.query.mode, 8) : 0o755, t.as);
    return reply.status(201).send();
  });

  app.delete("/files", { schema: { querystring: DeleteQuery, hide: true } }, async (req: FastifyRequest<{ Querystring: Static<typeof DeleteQuery> }>, reply) => {
    const t = await toolboxOf(forge, req);
    const path = t.resolve(req.query.path);
    const st = await statOf(t, path);
    const recursive = req.query.recursive === "true";
    if (st.type === "dir" && !recursive) throw new DaemonError("BAD_REQUEST", `${path} is a directory: delete it with recursive`, "INVALID_FILE_PATH");
    await t.sandbox.remove(path, recursive, t.as);
    return reply.status(204).send();
  });

  app.post("/files/move", { schema: { querystring: MoveQuery, hide: true } }, async (req: FastifyRequest<{ Querystring: Static<typeof MoveQuery> }>) => {
    const t = await toolboxOf(forge, req);
    const from = t.resolve(req.query.source);
    const to = t.resolve(req.query.destination);
    await statOf(t, from);
    if (await exists(t, to)) throw conflict(`destination exists: ${to}`);
    if (!(await exists(t, posix.dirname(to)))) throw notFound(`the destination's directory does not exist: ${posix.dirname(to)}`);
    await t.sandbox.move(from, to, false, t.as);
    return {};
  });

  app.get("/files/find", { schema: { querystring: PatternQuery, hide: true } }, async (req: FastifyRequest<{ Querystring: Static<typeof PatternQuery> }>) => {
    const t = await toolboxOf(forge, req);
    const root = t.resolve(req.query.path);
    await statOf(t, root);
    // Lines containing the text, in files that are not binary (-I), named in full (-H), NUL after the name (-Z).
    const r = await t.sandbox.exec(["grep", "-rnIHFZ", "-e", req.query.pattern, "--", root], { user: t.user.name, maxOutputBytes: MAX_OUTPUT });
    if (r.exitCode > 1) throw badRequest(`find: ${r.stderr.trim().split("\n")[0]}`);
    return r.stdout
      .split("\n")
      .filter(Boolean)
      .map((l) => {
        const nul = l.indexOf("\0");
        const rest = l.slice(nul + 1);
        const colon = rest.indexOf(":");
        return { file: l.slice(0, nul), line: Number(rest.slice(0, colon)), content: rest.slice(colon + 1) };
      });
  });

  app.get("/files/search", { schema: { querystring: PatternQuery, hide: true } }, async (req: FastifyRequest<{ Querystring: Static<typeof PatternQuery> }>) => {
    const t = await toolboxOf(forge, req);
    const root = t.resolve(req.query.path);
    await statOf(t, root);
    const r = await t.sandbox.exec(["find", root, "-mindepth", "1", "-name", req.query.pattern, "-print0"], { user: t.user.name, maxOutputBytes: MAX_OUTPUT });
    return { files: r.stdout.split("\0").filter(Boolean) };
  });

  app.post("/files/replace", { schema: { body: ReplaceBody, hide: true } }, async (req: FastifyRequest<{ Body: Static<typeof ReplaceBody> }>) => {
    const t = await toolboxOf(forge, req);
    const { pattern, newValue } = req.body;
    const results = [];
    for (const file of req.body.files) {
      const path = t.resolve(file);
      try {
        const st = await statOf(t, path);
        if (st.type !== "file") throw badRequest(`not a file: ${path}`);
        const text = (await t.sandbox.readFile(path, MAX_OUTPUT, t.as)).toString("utf8");
        if (text.includes(pattern)) await t.sandbox.writeFile(path, text.split(pattern).join(newValue), { mode: st.mode & 0o7777, as: t.as });
        results.push({ file, success: true });
      } catch (e) {
        results.push({ file, success: false, error: (e as Error).message });
      }
    }
    return results;
  });

  app.post("/files/permissions", { schema: { querystring: PermissionsQuery, hide: true } }, async (req: FastifyRequest<{ Querystring: Static<typeof PermissionsQuery> }>) => {
    const t = await toolboxOf(forge, req);
    const q = req.query;
    const path = t.resolve(q.path);
    await statOf(t, path);
    if (q.owner || q.group) {
      // Names or numbers, as chown takes them; only root may give files away.
      const r = await t.sandbox.exec(["chown", "--", `${q.owner ?? ""}${q.group ? `:${q.group}` : ""}`, path]);
      if (r.exitCode !== 0) throw badRequest(`permissions: ${r.stderr.trim()}`);
    }
    if (q.mode) await t.sandbox.chmod(path, Number.parseInt(q.mode, 8), t.as);
    return {};
  });
}
