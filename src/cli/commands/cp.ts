// `forgevm cp`: files and whole trees between the host and a sandbox, with Docker's rules for
// where things land (an existing directory receives the source by name; a new path becomes the
// copy; "SRC/." copies a directory's contents; "-" is a tar stream on stdin or stdout).
import { mkdir } from "node:fs/promises";
import { basename, dirname, posix } from "node:path";
import { Readable } from "node:stream";
import type { Command } from "commander";
import { NotFoundError, type Sandbox } from "forgevm";
import type { Cli } from "../context.js";
import { localKind, packLocal, unpackLocal } from "../host-tree.js";

interface Target {
  sandbox?: string;
  path: string;
}

/** "ID:/path" names a sandbox's path (the id or name before the first colon); anything else is local. */
export function parseTarget(arg: string): Target {
  const m = /^([A-Za-z0-9][A-Za-z0-9_.-]*):(.*)$/.exec(arg);
  if (!m || arg.startsWith("/") || arg.startsWith(".")) return { path: arg };
  const path = m[2] || "/";
  if (!path.startsWith("/")) throw new Error(`the path in ${arg} must be absolute inside the sandbox, e.g. ${m[1]}:/${path}`);
  return { sandbox: m[1], path };
}

function human(n: number): string {
  const units = ["B", "kB", "MB", "GB"];
  let i = 0;
  while (n >= 1000 && i < units.length - 1) {
    n /= 1000;
    i++;
  }
  return `${i ? n.toFixed(1) : n}${units[i]}`;
}

export function cpCommand(program: Command, cli: Cli): void {
  program
    .command("cp")
    .description("copy files or directories between the host and a sandbox (ID:PATH names the sandbox side)")
    .argument("<src>", "ID:PATH, a local path, or - for a tar stream on stdin")
    .argument("<dest>", "ID:PATH, a local path, or - to write a tar stream to stdout")
    .option("-q, --quiet", "print nothing on success")
    .addHelpText(
      "after",
      "\nExamples:\n  forgevm cp ./site web:/srv/www        # ./site becomes /srv/www/site (or /srv/www if it does not exist)\n  forgevm cp web:/var/log/app ./logs    # the other way\n  forgevm cp ./site/. web:/srv/www      # the contents of ./site",
    )
    .action(async (srcArg: string, destArg: string, o: { quiet?: boolean }) => {
      const src = srcArg === "-" ? { path: "-" } : parseTarget(srcArg);
      const dest = destArg === "-" ? { path: "-" } : parseTarget(destArg);
      if (src.sandbox && dest.sandbox) throw new Error("copying between two sandboxes is not supported: copy to the host first, then on");
      if (!src.sandbox && !dest.sandbox) throw new Error("one side must be in a sandbox: write it as ID:PATH (a local path with a colon: start it with ./)");
      const client = await cli.client();
      let said: string;
      if (src.sandbox) {
        const sb = await client.get(src.sandbox);
        said = await download(sb, src.path, dest.path);
      } else {
        const sb = await client.get(dest.sandbox as string);
        said = await upload(sb, src.path, dest.path);
      }
      if (!o.quiet && said) console.error(said);
    });
}

async function download(sb: Sandbox, from: string, to: string): Promise<string> {
  const contents = from.endsWith("/.");
  const guestPath = contents ? from.slice(0, -2) || "/" : from;
  const tar = Readable.fromWeb((await sb.downloadArchive(guestPath)) as import("node:stream/web").ReadableStream<Uint8Array>);
  if (to === "-") {
    await new Promise<void>((res, rej) => tar.pipe(process.stdout).on("finish", res).on("error", rej));
    return "";
  }
  const kind = await localKind(to);
  let r: Awaited<ReturnType<typeof unpackLocal>>;
  if (contents) {
    if (kind === "file") throw new Error(`${to} is a file: the contents of a directory go into a directory`);
    if (!kind) await mkdir(to);
    r = await unpackLocal(tar, to, { strip: true });
  } else if (kind === "dir") {
    r = await unpackLocal(tar, to);
  } else {
    if (to.endsWith("/")) throw new Error(`${to} does not exist: a destination ending in / must be an existing directory`);
    if ((await localKind(dirname(to))) !== "dir") throw new Error(`${dirname(to)} is not an existing directory`);
    r = await unpackLocal(tar, dirname(to), { rename: basename(to) });
    if (kind === "file" && r.dirs) throw new Error(`cannot copy a directory onto the file ${to}`);
  }
  return copied(r.bytes, r.files + r.dirs + r.links, to);
}

/** One summary for both directions: what Docker prints, with how many entries (files, directories, links). */
function copied(bytes: number, entries: number, to: string): string {
  return `Successfully copied ${human(bytes)} (${entries} ${entries === 1 ? "entry" : "entries"}) to ${to}`;
}

async function upload(sb: Sandbox, from: string, to: string): Promise<string> {
  if (from === "-") {
    const r = await sb.uploadArchive(to, Readable.toWeb(process.stdin) as ReadableStream<Uint8Array>);
    return copied(r.bytes, r.entries, `${sb.id}:${to}`);
  }
  const contents = from.endsWith("/.");
  const local = contents ? from.slice(0, -2) || "/" : from;
  const kind = await localKind(local);
  if (!kind) throw new Error(`${local} does not exist`);
  const guest = await sb.statFile(to).catch((e) => {
    if (e instanceof NotFoundError) return null;
    throw e;
  });
  let dir: string;
  let name: string;
  if (contents) {
    if (kind !== "dir") throw new Error(`${local} is not a directory: "/." copies a directory's contents`);
    if (guest && !guest.is_dir) throw new Error(`${to} is a file in the sandbox: the contents of a directory go into a directory`);
    dir = to;
    name = "";
  } else if (guest?.is_dir) {
    dir = to;
    name = basename(local);
  } else {
    if (guest && kind === "dir") throw new Error(`cannot copy a directory onto the file ${to} in the sandbox`);
    if (!guest && to.endsWith("/") && kind === "file") throw new Error(`${to} does not exist in the sandbox: a destination ending in / must be an existing directory`);
    dir = posix.dirname(to.replace(/\/+$/, "")) || "/";
    name = posix.basename(to.replace(/\/+$/, ""));
  }
  const warn = (m: string) => console.error(`warning: ${m}`);
  const r = await sb.uploadArchive(dir, Readable.from(packLocal(local, name, warn)));
  return copied(r.bytes, r.entries, `${sb.id}:${to}`);
}
