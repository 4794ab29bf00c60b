// `forgevm up`, `down` and a project's `ps` (docs/projects.md): a project file's sandboxes made
// to match it, idempotently. Each sandbox carries in its metadata the project it belongs to and a
// digest of each of its settings, so a second `up` changes nothing and a changed file recreates
// only the sandboxes whose settings changed, naming the settings.
import { createHash } from "node:crypto";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import type { Client, SandboxInfo } from "forgevm";
import { ForgevmError } from "forgevm";
import { buildDirectory } from "../build-context.js";
import type { Project, ProjectSandbox } from "./file.js";

const PROJECT = "forgevm.project";
const DIR = "forgevm.project.dir";
const MEMBER = "forgevm.project.sandbox";
/** {setting: digest} of what the sandbox was made from. */
const SETTINGS = "forgevm.project.settings";

const digest = (v: unknown) => createHash("sha256").update(JSON.stringify(v)).digest("hex").slice(0, 12);

/** The name a project's sandbox has on the server. */
export const serverName = (p: Project, sb: ProjectSandbox) => `${p.name}-${sb.name}`;

/** The project's sandboxes on the server (not destroyed ones), by their name in the file. */
export async function projectSandboxes(client: Client, p: Project): Promise<Map<string, SandboxInfo>> {
  const all = await client.list({ all: true });
  const mine = all.filter((s) => s.state !== "destroyed" && s.metadata?.[PROJECT] === p.name && s.metadata?.[DIR] === p.dir);
  return new Map(mine.map((s) => [s.metadata?.[MEMBER] ?? s.name ?? s.id, s]));
}

/** Makes the server's sandboxes match the file; says what it did, a line a sandbox. */
export async function up(client: Client, p: Project, say: (line: string) => void): Promise<void> {
  // Everything that needs building first: a failed build starts nothing.
  const wanted: { sb: ProjectSandbox; body: Record<string, unknown>; settings: Record<string, string> }[] = [];
  for (const sb of p.sandboxes) {
    const image = sb.build ? await built(client, p, sb, say) : undefined;
    const body = { ...sb.body, ...(image ? { image } : {}) };
    // By the file's names: a main process is its `command` and `restart`.
    const { main, ...rest } = body as { main?: { command?: unknown; restart?: unknown } };
    const settings: Record<string, string> = {};
    for (const [k, v] of Object.entries({ ...rest, command: main?.command, restart: main?.restart, mounts: sb.mounts })) if (v !== undefined) settings[k] = digest(v);
    wanted.push({ sb, body, settings });
  }
  const existing = await projectSandboxes(client, p);
  for (const { sb, body, settings } of wanted) {
    const now = existing.get(sb.name);
    const had = now ? (JSON.parse(now.metadata?.[SETTINGS] ?? "{}") as Record<string, string>) : {};
    const changed = [...new Set([...Object.keys(had), ...Object.keys(settings)])].filter((k) => had[k] !== settings[k]).sort();
    if (now && !changed.length && now.state !== "error") {
      if (now.state === "running" || now.state === "paused") say(`${sb.name}: up to date (${now.state})`);
      else {
        await client.start(now.id);
        say(`${sb.name}: started`);
      }
      continue;
    }
    if (now) await client.destroy(now.id);
    const metadata = { ...(body.metadata as Record<string, string> | undefined), [PROJECT]: p.name, [DIR]: p.dir, [MEMBER]: sb.name, [SETTINGS]: JSON.stringify(settings) };
    // Host directories go in as a spawn's "/dir:/path[:ro]" volumes: the server checks them before it starts anything.
    const volumes = [...((body.volumes as string[] | undefined) ?? []), ...sb.mounts.map((m) => `${m.host}:${m.path}${m.readOnly ? ":ro" : ""}`)];
    await client.spawn({ ...body, ...(volumes.length ? { volumes } : {}), name: serverName(p, sb), metadata }).catch((e: Error) => {
      throw new ForgevmError(`${sb.name}: ${e.message}`, (e as ForgevmError).code ?? "");
    });
    say(now ? `${sb.name}: recreated (${now.state === "error" ? "it had failed" : `${changed.join(", ")} changed`})` : `${sb.name}: created`);
  }
  for (const [name, s] of existing)
    if (!p.sandboxes.some((sb) => sb.name === name))
      say(`${name}: not in ${relative(process.cwd(), p.file) || p.file} any more (left as it is: \`forgevm rm ${s.id}\` removes it)`);
}

/** Stops the project's sandboxes; with `remove`, destroys them, and with `volumes` their named volumes too. */
export async function down(client: Client, p: Project, o: { remove?: boolean; volumes?: boolean }, say: (line: string) => void): Promise<void> {
  for (const [name, s] of await projectSandboxes(client, p)) {
    if (o.remove) {
      await client.destroy(s.id);
      say(`${name}: removed`);
    } else if (s.state === "running" || s.state === "paused") {
      await client.stop(s.id);
      say(`${name}: stopped`);
    } else say(`${name}: already ${s.state}`);
  }
  if (!o.volumes) return;
  const names = new Set(p.sandboxes.flatMap((sb) => ((sb.body.volumes as string[] | undefined) ?? []).map((v) => v.split(":")[0])));
  for (const v of names) {
    await client.volumes.remove(v);
    say(`volume ${v}: removed`);
  }
}

/** The image a `build` table makes, tagged by a digest of its context: built only when no image has that tag. */
async function built(client: Client, p: Project, sb: ProjectSandbox, say: (line: string) => void): Promise<string> {
  const b = sb.build as NonNullable<ProjectSandbox["build"]>;
  const tag = `${p.name}-${sb.name}:${contextDigest(b.context)}`.toLowerCase();
  if ((await client.images.list()).some((i) => i.name === tag || i.name === `${tag.split(":")[0]}:${tag.split(":")[1]}`)) return tag;
  say(`${sb.name}: building ${relative(p.dir, b.context) || "."} as ${tag}`);
  const job = await buildDirectory(client, b.context, { tag, dockerfile: b.dockerfile }, (l) => say(`  ${l}`));
  if (job.state !== "done")
    throw new ForgevmError(
      `${sb.name}: the build of ${b.context} ${job.state === "cancelled" ? "was cancelled" : `failed: ${job.error ?? "its log above says why"}`}`,
      job.error_code ?? "",
    );
  return tag;
}

/** A digest of every file's path, mode and bytes under a build context. */
function contextDigest(dir: string): string {
  const h = createHash("sha256");
  const walk = (d: string) => {
    for (const name of readdirSync(d).sort()) {
      const f = join(d, name);
      const st = statSync(f);
      h.update(`${relative(dir, f)}\0${st.mode}\0`);
      if (st.isDirectory()) walk(f);
      else if (st.isFile()) h.update(readFileSync(f));
    }
  };
  walk(dir);
  return h.digest("hex").slice(0, 12);
}
