// Sandboxes this server made on another service (a ForgeVM server, an E2B service, a Custom HTTP
// backend) are recorded in `<dir>/<id>/far.json` until destroyed, so that a server that died
// leaves nothing running there: its successor's sweep destroys what no one keeps.
import { readdir, readFile, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { ignore } from "../util/ignore.js";

/** Records a far sandbox for VM `dir` (with `where`, the service it runs on). */
export async function recordFar(dir: string, record: Record<string, unknown>, where: string): Promise<void> {
  await writeFile(join(dir, "far.json"), JSON.stringify({ ...record, where }));
}

/**
 * Destroys (with `kill`) each far sandbox recorded under `dir` on service `where` whose VM id is
 * neither kept nor live, and removes its directory; returns those ids.
 */
export async function sweepFar(dir: string, where: string, spare: (id: string) => boolean, kill: (record: Record<string, unknown>) => Promise<unknown>): Promise<string[]> {
  const gone: string[] = [];
  for (const id of await readdir(dir).catch(() => [] as string[])) {
    if (spare(id)) continue;
    const rec = await readFile(join(dir, id, "far.json"), "utf8")
      .then((t) => JSON.parse(t) as Record<string, unknown>)
      .catch(() => null);
    if (rec && rec.where === where) await kill(rec).catch(ignore("the sweep is retried at the next start"));
    await rm(join(dir, id), { recursive: true, force: true });
    gone.push(id);
  }
  return gone;
}
