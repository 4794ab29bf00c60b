// Files: into and out of a sandbox as tool arguments (write_file, read_file, list_files), and
// between a sandbox and the host directories the operator shared (upload, download) — never any
// other host path.
import { constants, createReadStream, createWriteStream } from "node:fs";
import { absoluteGuestPath } from "../../../core/guest/session.js";
import { open, rm } from "node:fs/promises";
import { pipeline } from "node:stream/promises";
import { Type } from "typebox";
import { ForgevmError } from "../../../http/errors.js";
import { hostPath } from "../policy.js";
import { tool } from "../tool.js";
import { SandboxId } from "./common.js";
import { ignore } from "../../../util/ignore.js";

const GuestPath = Type.String({ minLength: 1, maxLength: 4096, description: "Absolute path in the sandbox" });
const HostPath = Type.String({
  minLength: 1,
  maxLength: 4096,
  description: "A path in a host directory the operator shared (mcp.host_dirs); relative paths are taken in the first one",
});

/**
 * Opens a host file a policy check let through. O_NOFOLLOW: a symlink swapped in after the check
 * is refused, not followed; O_NONBLOCK: a FIFO planted there cannot hang the call. Only regular
 * files are accepted.
 */
async function openHostFile(real: string, given: string, flags: number) {
  const fh = await open(real, flags | constants.O_NOFOLLOW | constants.O_NONBLOCK, 0o644).catch((e: NodeJS.ErrnoException) => {
    throw new ForgevmError("BAD_REQUEST", `host_path ${given}: ${e.code === "ELOOP" ? "is a symlink" : e.message}`);
  });
  if (!(await fh.stat()).isFile()) {
    await fh.close();
    throw new ForgevmError("BAD_REQUEST", `host_path ${given} is not a regular file`);
  }
  return fh;
}

const absolute = (path: string) => absoluteGuestPath(path);

export const writeFile = tool({
  name: "write_file",
  title: "Write a file",
  description: "Create or replace a file in a sandbox (parent directories are made).",
  input: Type.Object(
    {
      sandbox_id: SandboxId,
      path: GuestPath,
      content: Type.String({ maxLength: 33554432, description: "The file's content" }),
      encoding: Type.Optional(Type.Union([Type.Literal("utf8"), Type.Literal("base64")], { description: "How content is written (default utf8)" })),
      mode: Type.Optional(Type.String({ pattern: "^0?[0-7]{3,4}$", description: 'Permissions in octal, e.g. "0755" for a script' })),
    },
    { additionalProperties: false },
  ),
  output: Type.Object({ path: Type.String(), size: Type.Integer() }),
  bulky: ["content"],
  async run(ctx, a) {
    ctx.agents.row(a.sandbox_id);
    const data = a.encoding === "base64" ? Buffer.from(a.content, "base64") : Buffer.from(a.content, "utf8");
    if (a.encoding === "base64" && data.toString("base64").replace(/=+$/, "") !== a.content.replace(/\s/g, "").replace(/=+$/, "")) {
      throw new ForgevmError("BAD_REQUEST", "write_file: content is not valid base64");
    }
    await (await ctx.forge.sandboxes.use(a.sandbox_id, "mcp")).writeFile(absolute(a.path), data, { mode: a.mode ? Number.parseInt(a.mode, 8) : undefined });
    return { result: { path: a.path, size: data.length }, text: `wrote ${data.length} bytes to ${a.path}`, sandboxId: a.sandbox_id };
  },
});

export const readFile = tool({
  name: "read_file",
  title: "Read a file",
  description: "Read a file from a sandbox as text (or base64 for binary files); large files are cut at max_bytes.",
  input: Type.Object(
    {
      sandbox_id: SandboxId,
      path: GuestPath,
      encoding: Type.Optional(Type.Union([Type.Literal("text"), Type.Literal("base64")], { description: "text (default; binary files come back as base64) or base64" })),
      offset: Type.Optional(Type.Integer({ minimum: 0, description: "Start at this byte" })),
      max_bytes: Type.Optional(Type.Integer({ minimum: 1, description: "Read at most this many bytes (capped by the operator's limit)" })),
    },
    { additionalProperties: false },
  ),
  output: Type.Object({
    path: Type.String(),
    encoding: Type.Union([Type.Literal("text"), Type.Literal("base64")]),
    content: Type.String(),
    size: Type.Integer({ description: "The whole file's size" }),
    offset: Type.Integer(),
    truncated: Type.Boolean({ description: "More of the file lies beyond what was returned" }),
  }),
  annotations: { readOnlyHint: true },
  async run(ctx, a) {
    ctx.agents.row(a.sandbox_id);
    const limit = Math.min(a.max_bytes ?? ctx.policy.maxReadBytes, ctx.policy.maxReadBytes);
    const offset = a.offset ?? 0;
    const { data, stat } = await (await ctx.forge.sandboxes.use(a.sandbox_id, "mcp")).readFileRange(absolute(a.path), offset, limit);
    if (stat.type === "dir") throw new ForgevmError("BAD_REQUEST", `${a.path} is a directory: use list_files`);
    const asText = a.encoding !== "base64" && !data.includes(0) && Buffer.from(data.toString("utf8"), "utf8").equals(data);
    const truncated = offset + data.length < stat.size;
    const result = {
      path: a.path,
      encoding: asText ? ("text" as const) : ("base64" as const),
      content: asText ? data.toString("utf8") : data.toString("base64"),
      size: stat.size,
      offset,
      truncated,
    };
    const note = truncated ? `\n… [${stat.size - offset - data.length} more bytes: read on with offset ${offset + data.length}]` : "";
    return { result, text: asText ? result.content + note : `(${data.length} bytes, base64)\n${result.content}${note}`, sandboxId: a.sandbox_id };
  },
});

export const listFiles = tool({
  name: "list_files",
  title: "List a directory",
  description: "List the entries of a directory in a sandbox with their type, size and permissions.",
  input: Type.Object({ sandbox_id: SandboxId, path: Type.Optional(GuestPath) }, { additionalProperties: false }),
  output: Type.Object({
    path: Type.String(),
    entries: Type.Array(
      Type.Object({ name: Type.String(), type: Type.String(), size: Type.Integer(), mode: Type.String(), modified: Type.String(), target: Type.Optional(Type.String()) }),
    ),
  }),
  annotations: { readOnlyHint: true },
  async run(ctx, a) {
    ctx.agents.row(a.sandbox_id);
    const path = absolute(a.path ?? "/");
    const list = await (await ctx.forge.sandboxes.use(a.sandbox_id, "mcp")).listFiles(path);
    const entries = list
      .sort((x, y) => x.name.localeCompare(y.name))
      .map((e) => ({
        name: e.name,
        type: e.type,
        size: e.size,
        mode: (e.mode & 0o7777).toString(8).padStart(4, "0"),
        modified: new Date(e.mtime_ms).toISOString(),
        ...(e.target !== undefined ? { target: e.target } : {}),
      }));
    const text = entries
      .map(
        (e) =>
          `${e.type === "dir" ? "d" : e.type === "symlink" ? "l" : "-"} ${e.mode} ${String(e.size).padStart(10)} ${e.name}${e.type === "dir" ? "/" : ""}${e.target ? ` -> ${e.target}` : ""}`,
      )
      .join("\n");
    return { result: { path, entries }, text: text || "(empty directory)", sandboxId: a.sandbox_id };
  },
});

export const upload = tool({
  name: "upload",
  title: "Upload a host file",
  description: "Copy a file from a host directory the operator shared into a sandbox.",
  input: Type.Object({ sandbox_id: SandboxId, host_path: HostPath, path: GuestPath }, { additionalProperties: false }),
  output: Type.Object({ host_path: Type.String(), path: Type.String(), size: Type.Integer() }),
  async run(ctx, a) {
    ctx.agents.row(a.sandbox_id);
    const real = await hostPath(ctx.policy, a.host_path, "read");
    const fh = await openHostFile(real, a.host_path, constants.O_RDONLY);
    try {
      const st = await fh.stat();
      ctx.progress(0, st.size, `uploading ${st.size} bytes`);
      const r = await (await ctx.forge.sandboxes.use(a.sandbox_id, "mcp")).writeFile(absolute(a.path), createReadStream("", { fd: fh.fd, autoClose: false }));
      ctx.progress(st.size, st.size, "uploaded");
      return { result: { host_path: real, path: a.path, size: r.size }, text: `copied ${real} (${r.size} bytes) to ${a.path}`, sandboxId: a.sandbox_id };
    } finally {
      await fh.close();
    }
  },
});

export const download = tool({
  name: "download",
  title: "Download to the host",
  description: "Copy a file from a sandbox into a host directory the operator shared (replacing a file there).",
  input: Type.Object({ sandbox_id: SandboxId, path: GuestPath, host_path: HostPath }, { additionalProperties: false }),
  output: Type.Object({ host_path: Type.String(), path: Type.String(), size: Type.Integer() }),
  async run(ctx, a) {
    ctx.agents.row(a.sandbox_id);
    const real = await hostPath(ctx.policy, a.host_path, "write");
    const fh = await openHostFile(real, a.host_path, constants.O_WRONLY | constants.O_CREAT);
    let size = 0;
    try {
      await fh.truncate(0);
      const r = await (await ctx.forge.sandboxes.use(a.sandbox_id, "mcp")).openRead(absolute(a.path));
      if (r.stat && r.stat.type !== "file") {
        r.stream.destroy();
        r.done.catch(ignore("the read was given up: not a regular file"));
        throw new ForgevmError("BAD_REQUEST", `${a.path} is not a regular file`);
      }
      await pipeline(r.stream, createWriteStream("", { fd: fh.fd, autoClose: false }));
      size = (await r.done).size;
    } catch (e) {
      await rm(real, { force: true }).catch(ignore("already gone"));
      throw e;
    } finally {
      await fh.close();
    }
    return { result: { host_path: real, path: a.path, size }, text: `copied ${a.path} (${size} bytes) to ${real}`, sandboxId: a.sandbox_id };
  },
});
