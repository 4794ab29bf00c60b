// A project file, forgevm.toml at the root of a repository (docs/projects.md): one table per
// sandbox, `[sandboxes.NAME]`, with the REST spawn body's names wherever one exists. Everything is
// checked here, before anything starts: an unknown key, a bad value or a missing directory is an
// error that names the key and its line.
import { existsSync, readFileSync, statSync } from "node:fs";
import { basename, dirname, isAbsolute, join, resolve } from "node:path";
import { parse } from "smol-toml";
import { Value } from "typebox/value";
import { SpawnRequest } from "../../schemas/rest.js";
import { FORWARD_KINDS } from "../../schemas/bounds.js";

/** One sandbox of a project, as the server is asked for it. */
export interface ProjectSandbox {
  /** Its name in the file. */
  name: string;
  /** A directory with a Dockerfile to build its image from (absolute). */
  build?: { context: string; dockerfile?: string };
  /** The spawn body, without the image when it is built. */
  body: Record<string, unknown>;
  /** Host directories mounted live: absolute host path, guest path, read-only. */
  mounts: { host: string; path: string; readOnly: boolean }[];
}

export interface Project {
  /** The project's name: the file's `name`, else its directory's. Sandboxes are named PROJECT-NAME. */
  name: string;
  dir: string;
  file: string;
  sandboxes: ProjectSandbox[];
}

/** A project file's error: the key, the line, and what is wrong. */
export class ProjectFileError extends Error {
  override name = "ProjectFileError";
}

/** The keys a sandbox's table takes: the spawn body's own, and the project file's. */
const BODY_KEYS = [
  "image",
  "ports",
  "volumes",
  "env",
  "allow",
  "deny",
  "network",
  "memory_mb",
  "vcpus",
  "disk_mb",
  "user",
  "ttl",
  "metadata",
  "idle",
  "cache",
  "secrets",
  "forkable",
  "forward",
  "system",
];
const FILE_KEYS = ["build", "command", "mounts", "restart"];
/** A project's and a sandbox's name: together, "PROJECT-NAME", they make a sandbox name (at most 63). */
const PROJECT_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,29}$/;
const NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}$/;

/** Reads and checks a project file. */
export function readProject(file: string): Project {
  const text = readFileSync(file, "utf8");
  const at = lineFinder(text, file);
  let doc: Record<string, unknown>;
  try {
    doc = parse(text) as Record<string, unknown>;
  } catch (e) {
    const err = e as Error & { line?: number };
    throw new ProjectFileError(`${file}${err.line ? `:${err.line}` : ""}: ${err.message.split("\n")[0]}`);
  }
  for (const k of Object.keys(doc))
    if (k !== "name" && k !== "sandboxes") throw new ProjectFileError(`${at([k])}: unknown key "${k}" (a project file has "name" and [sandboxes.NAME] tables)`);
  const dir = dirname(resolve(file));
  const name = doc.name ?? basename(dir).replace(/[^A-Za-z0-9_.-]/g, "-");
  if (typeof name !== "string" || !PROJECT_NAME.test(name))
    throw new ProjectFileError(`${at(["name"])}: name must be letters, digits, "_", "." or "-" (at most 30), got ${JSON.stringify(name)}`);
  const tables = doc.sandboxes;
  if (!tables || typeof tables !== "object" || Array.isArray(tables) || !Object.keys(tables).length)
    throw new ProjectFileError(`${file}: no sandboxes: add a [sandboxes.NAME] table`);
  const sandboxes = Object.entries(tables as Record<string, unknown>).map(([sb, t]) => sandboxOf(sb, t, dir, at));
  return { name, dir, file, sandboxes };
}

function sandboxOf(name: string, table: unknown, dir: string, at: (path: string[]) => string): ProjectSandbox {
  const where = (k?: string) => at(k ? ["sandboxes", name, k] : ["sandboxes", name]);
  if (!NAME.test(name)) throw new ProjectFileError(`${where()}: sandbox name "${name}" must be letters, digits, "_", "." or "-" (at most 32)`);
  if (!table || typeof table !== "object" || Array.isArray(table)) throw new ProjectFileError(`${where()}: [sandboxes.${name}] must be a table`);
  const t = table as Record<string, unknown>;
  for (const k of Object.keys(t)) {
    if (!BODY_KEYS.includes(k) && !FILE_KEYS.includes(k))
      throw new ProjectFileError(`${where(k)}: unknown key "${k}" in [sandboxes.${name}] (known: ${[...BODY_KEYS, ...FILE_KEYS].sort().join(", ")})`);
  }
  if (t.forward !== undefined && (!Array.isArray(t.forward) || t.forward.some((k) => !(FORWARD_KINDS as readonly unknown[]).includes(k))))
    throw new ProjectFileError(`${where("forward")}: forward is a list of what to forward from the host: ${FORWARD_KINDS.map((k) => `"${k}"`).join(", ")}`);
  if (t.image !== undefined && t.build !== undefined) throw new ProjectFileError(`${where("build")}: give "image" or "build", not both`);
  const body: Record<string, unknown> = { ttl: "0" };
  for (const k of BODY_KEYS) if (t[k] !== undefined) body[k] = t[k];
  if (typeof body.idle === "string") body.idle = { after: body.idle, action: "pause" };
  const main: Record<string, unknown> = {};
  if (t.command !== undefined) {
    if (typeof t.command === "string") main.command = ["/bin/sh", "-c", t.command];
    else if (Array.isArray(t.command) && t.command.every((c) => typeof c === "string")) main.command = t.command;
    else throw new ProjectFileError(`${where("command")}: command must be a string (run by /bin/sh -c) or an array of strings`);
  }
  if (t.restart !== undefined) main.restart = t.restart;
  // As `forgevm create IMAGE`: a named or built image runs its own command (or the one given).
  if (Object.keys(main).length || t.image !== undefined || t.build !== undefined) body.main = main;
  if (!Value.Check(SpawnRequest, body)) {
    const e = [...Value.Errors(SpawnRequest, body)][0];
    const path = e?.instancePath.replace(/^\//, "").split("/") ?? [];
    const key = path[0] === "main" ? (path[1] === "restart" ? "restart" : "command") : path[0] || "?";
    throw new ProjectFileError(`${where(key)}: ${key}${path.length > 1 && path[0] !== "main" ? `.${path.slice(1).join(".")}` : ""} ${e?.message ?? "is invalid"}`);
  }
  let build: ProjectSandbox["build"];
  if (t.build !== undefined) {
    const b = typeof t.build === "string" ? { context: t.build } : (t.build as { context?: unknown; dockerfile?: unknown });
    if (typeof b !== "object" || typeof b.context !== "string" || (b.dockerfile !== undefined && typeof b.dockerfile !== "string")) {
      throw new ProjectFileError(`${where("build")}: build is a directory, or { context = "dir", dockerfile = "file" }`);
    }
    const context = resolve(dir, b.context);
    const dockerfile = join(context, (b.dockerfile as string | undefined) ?? "Dockerfile");
    if (!statSync(context, { throwIfNoEntry: false })?.isDirectory()) throw new ProjectFileError(`${where("build")}: ${context} is not a directory`);
    if (!existsSync(dockerfile)) throw new ProjectFileError(`${where("build")}: ${dockerfile} does not exist`);
    build = { context, dockerfile: b.dockerfile as string | undefined };
  }
  const mounts = mountsOf(t.mounts, dir, where("mounts"));
  return { name, build, body, mounts };
}

/** "HOST:/path" or "HOST:/path:ro", HOST relative to the project's directory. */
function mountsOf(v: unknown, dir: string, where: string): ProjectSandbox["mounts"] {
  if (v === undefined) return [];
  if (!Array.isArray(v)) throw new ProjectFileError(`${where}: mounts is an array of "HOST:/path[:ro]"`);
  return v.map((m) => {
    const parts = typeof m === "string" ? m.split(":") : [];
    const ro = parts.length === 3 && parts[2] === "ro";
    if ((parts.length !== 2 && !ro) || !parts[0] || !isAbsolute(parts[1] ?? ""))
      throw new ProjectFileError(`${where}: mount ${JSON.stringify(m)} must be "HOST:/path" or "HOST:/path:ro"`);
    const host = resolve(dir, parts[0]);
    if (!statSync(host, { throwIfNoEntry: false })?.isDirectory()) throw new ProjectFileError(`${where}: mount source ${host} is not a directory`);
    return { host, path: parts[1], readOnly: ro };
  });
}

/** "FILE:LINE" of a key path (["sandboxes", "web", "image"]), found by reading the text's tables and keys. */
function lineFinder(text: string, file: string): (path: string[]) => string {
  const lines = text.split("\n");
  return (path) => {
    const [top, sb, key] = path;
    let table = "";
    let tableLine = 0;
    for (const [i, raw] of lines.entries()) {
      const l = raw.trim();
      const header = /^\[\s*([^\]]+?)\s*\]$/.exec(l);
      if (header) {
        table = header[1].replace(/["']/g, "").replace(/\s*\.\s*/g, ".");
        if (table === `${top}.${sb}` && !key) return `${file}:${i + 1}`;
        if (table === `${top}.${sb}`) tableLine = i + 1;
        continue;
      }
      const k = /^["']?([A-Za-z0-9_.-]+)["']?\s*=/.exec(l)?.[1];
      if (!k) continue;
      if (path.length === 1 && table === "" && k === top) return `${file}:${i + 1}`;
      if (key && table === `${top}.${sb}` && k === key) return `${file}:${i + 1}`;
      if (key && table === top && (k === `${sb}.${key}` || k === sb)) return `${file}:${i + 1}`;
    }
    return tableLine ? `${file}:${tableLine}` : file;
  };
}
