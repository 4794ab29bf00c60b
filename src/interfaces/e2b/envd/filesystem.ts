// envd's filesystem.Filesystem service: Stat, ListDir (with depth), MakeDir, Move, Remove, and
// WatchDir. As envd does, what creates runs as root and gives what it makes to the calling user
// (MakeDir, Move: `/workspace` for the default user, where only root may write); what reads or
// removes runs with the user's filesystem identity, so the guest's kernel decides.
import { posix } from "node:path";
import type { FastifyInstance } from "fastify";
import type { DirEntry, FileStat } from "../../../core/types.js";
import { toForgevmError } from "../../../core/error-map.js";
import type { Forge } from "../../../core/forge.js";
import { ConnectError, deadlineMs, serverStreaming, unary } from "../connect.js";
import { keepaliveMs, quietTicker } from "../keepalive.js";
import { envdContext, resolvePath, type EnvdContext } from "./context.js";
import { ignore } from "../../../util/ignore.js";

const SERVICE = "filesystem.Filesystem";
/** Most entries one ListDir answers (a deep listing of a big tree stops there). */
const MAX_ENTRIES = 10_000;
const MAX_DEPTH = 64;

/** Our change kinds as envd's event types. */
const EVENT_TYPES = { create: "EVENT_TYPE_CREATE", write: "EVENT_TYPE_WRITE", remove: "EVENT_TYPE_REMOVE", rename: "EVENT_TYPE_RENAME", chmod: "EVENT_TYPE_CHMOD" } as const;

const FILE_TYPES: Partial<Record<FileStat["type"], string>> = { file: "FILE_TYPE_FILE", dir: "FILE_TYPE_DIRECTORY", symlink: "FILE_TYPE_SYMLINK" };

/** The letter Go's FileMode prints for each kind of file (L for a symlink). */
const KIND_LETTER: Record<FileStat["type"], string> = { file: "-", dir: "d", symlink: "L", fifo: "p", socket: "S", chardev: "c", blockdev: "D", other: "-" };

/** `drwxr-xr-x`, as Go's FileMode prints it. */
function permissions(st: FileStat): string {
  const bits = "rwxrwxrwx";
  let out = KIND_LETTER[st.type] ?? "-";
  for (let i = 0; i < 9; i++) out += st.mode & (1 << (8 - i)) ? bits[i] : "-";
  return out;
}

/** `EntryInfo` of a path. */
export async function entryInfo(ctx: EnvdContext, path: string, st: FileStat): Promise<Record<string, unknown>> {
  const owner = await ctx.sandbox.guestUser(String(st.uid));
  const group = await ctx.sandbox.guestGroupName(st.gid);
  return {
    name: posix.basename(path) || "/",
    type: FILE_TYPES[st.type] ?? "FILE_TYPE_UNSPECIFIED",
    path,
    size: String(st.size),
    mode: st.mode & 0o7777,
    permissions: permissions(st),
    owner: owner?.name ?? String(st.uid),
    group: group ?? String(st.gid),
    modifiedTime: new Date(st.mtime_ms).toISOString(),
    ...(st.type === "symlink" && st.target !== undefined ? { symlinkTarget: st.target } : {}),
  };
}

/** Stat of a path as the user; missing is not_found. */
async function statOf(ctx: EnvdContext, path: string): Promise<FileStat> {
  return ctx.sandbox.stat(path, ctx.as);
}

export async function filesystemService(app: FastifyInstance, { forge }: { forge: Forge }): Promise<void> {
  unary(app, SERVICE, "Stat", async (msg, req) => {
    const ctx = await envdContext(forge, req);
    const path = resolvePath(ctx, msg.path);
    return { entry: await entryInfo(ctx, path, await statOf(ctx, path)) };
  });

  unary(app, SERVICE, "ListDir", async (msg, req) => {
    const ctx = await envdContext(forge, req);
    const root = resolvePath(ctx, msg.path);
    const depth = msg.depth === undefined ? 1 : Number(msg.depth);
    if (!Number.isInteger(depth) || depth < 0 || depth > MAX_DEPTH) throw new ConnectError("invalid_argument", `depth must be an integer from 0 to ${MAX_DEPTH}`);
    const st = await statOf(ctx, root);
    const dir = st.type === "symlink" ? await ctx.sandbox.stat(`${root}/.`, ctx.as).catch(() => st) : st;
    if (dir.type !== "dir") throw new ConnectError("invalid_argument", `${root} is not a directory`);
    const entries: Record<string, unknown>[] = [];
    const walk = async (path: string, level: number): Promise<void> => {
      let list: DirEntry[];
      try {
        list = await ctx.sandbox.listFiles(path, ctx.as);
      } catch (e) {
        // Below the top, a directory the user may not read is skipped, as envd does.
        if (level > 1) return;
        throw e;
      }
      for (const e of list) {
        if (entries.length >= MAX_ENTRIES) return;
        const child = posix.join(path, e.name);
        entries.push(await entryInfo(ctx, child, e));
        if (e.type === "dir" && level < Math.max(depth, 1)) await walk(child, level + 1);
      }
    };
    await walk(root, 1);
    return { entries };
  });

  unary(app, SERVICE, "MakeDir", async (msg, req) => {
    const ctx = await envdContext(forge, req);
    const path = resolvePath(ctx, msg.path);
    const existing = await statOf(ctx, path).catch(() => null);
    if (existing)
      throw new ConnectError(existing.type === "dir" ? "already_exists" : "invalid_argument", `${path} already exists${existing.type === "dir" ? "" : " and is not a directory"}`);
    await (ctx.as ? ctx.sandbox.mkdirFor(path, ctx.as) : ctx.sandbox.mkdir(path, 0o755));
    return { entry: await entryInfo(ctx, path, await statOf(ctx, path)) };
  });

  unary(app, SERVICE, "Move", async (msg, req) => {
    const ctx = await envdContext(forge, req);
    const from = resolvePath(ctx, msg.source, "source");
    const to = resolvePath(ctx, msg.destination, "destination");
    await statOf(ctx, from);
    const parent = posix.dirname(to);
    await (ctx.as ? ctx.sandbox.mkdirFor(parent, ctx.as) : ctx.sandbox.mkdir(parent, 0o755)).catch(ignore("the parent may exist; the move reports what matters"));
    await ctx.sandbox.move(from, to, true);
    return { entry: await entryInfo(ctx, to, await statOf(ctx, to)) };
  });

  serverStreaming(app, SERVICE, "WatchDir", async (msg, stream, req) => {
    const ctx = await envdContext(forge, req);
    const path = resolvePath(ctx, msg.path);
    const st = await statOf(ctx, path);
    if (st.type !== "dir") throw new ConnectError("invalid_argument", `${path} is not a directory`);
    // A client that stops reading loses changes (as when the guest's queue overflows), never our memory.
    let backlogged = false;
    const send = (m: unknown) => {
      keepalive.touch();
      if (backlogged) return;
      if (!stream.send(m)) {
        backlogged = true;
        void stream.drained().then(() => (backlogged = false));
      }
    };
    // Changes can come in the same chunk as the guest's "watching": they wait for the start event.
    let early: unknown[] | null = [];
    const w = await ctx.sandbox.watchDir(path, { recursive: msg.recursive === true, as: ctx.as }, (c) => {
      const m = { filesystem: { name: c.name, type: EVENT_TYPES[c.op] } };
      if (early) early.push(m);
      else send(m);
    });
    const keepalive = quietTicker(keepaliveMs(req), () => send({ keepalive: {} }));
    const deadline = deadlineMs(req);
    let timer: NodeJS.Timeout | undefined;
    const expired = new Promise<boolean>((r) => (timer = deadline ? setTimeout(() => r(true), deadline) : undefined));
    try {
      // WatchDirResponse holds its oneof directly (unlike the process events, wrapped in `event`).
      stream.send({ start: {} });
      for (const m of early) send(m);
      early = null;
      if (
        await Promise.race([
          stream.closed.then(() => false),
          w.done.then(
            () => false,
            () => false,
          ),
          expired,
        ])
      ) {
        throw new ConnectError("deadline_exceeded", "the watch ran past its deadline (Connect-Timeout-Ms)");
      }
    } finally {
      keepalive.stop();
      clearTimeout(timer);
      w.close();
    }
  });

  unary(app, SERVICE, "Remove", async (msg, req) => {
    const ctx = await envdContext(forge, req);
    const path = resolvePath(ctx, msg.path);
    try {
      await ctx.sandbox.remove(path, true, ctx.as);
    } catch (e) {
      throw toForgevmError(e);
    }
    return {};
  });
}
