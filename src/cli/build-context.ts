// A build context directory sent to the server as `docker build` sends one: a tar of the
// directory, less what .dockerignore leaves out (the Dockerfile and .dockerignore always go).
// `forgevm build` and `forgevm up` both send theirs this way.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { Readable } from "node:stream";
import type { BuildJob, BuildOptions, Client } from "forgevm";
import { DockerIgnore } from "../util/dockerignore.js";
import { packLocal } from "./host-tree.js";

/** Builds `context` on the server; the finished (or failed) job. */
export async function buildDirectory(client: Client, context: string, opts: BuildOptions, say: (line: string) => void): Promise<BuildJob> {
  let ignoreText = "";
  try {
    ignoreText = readFileSync(join(context, ".dockerignore"), "utf8");
  } catch {
    // no .dockerignore: everything goes
  }
  const ignore = new DockerIgnore(ignoreText);
  const always = new Set([opts.dockerfile ?? "Dockerfile", ".dockerignore"]);
  const tar = Readable.from(packLocal(context, "", say, (name) => !always.has(name) && ignore.ignores(name)));
  return client.images.build(Readable.toWeb(tar) as ReadableStream<Uint8Array>, opts, say);
}
