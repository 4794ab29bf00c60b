// Base snapshots built once per suite run and given to every test data directory: the suite runner
// builds the bases most tests spawn from (the default image at the sizes they use) in the run's
// seed, and each data directory seeded from it gets them as a server that had built them would
// have them: a row in its store and the files in its snapshots/ directory. The big files (the RAM
// file and the disk, sealed read-only) are hard-linked, so nothing is copied; the device state and
// the console log, small, are copied, so a test that damages a base damages only its own. A base's
// disk is an overlay on the seed's image, which lives as long as the run.
import { existsSync } from "node:fs";
import { copyFile, link, mkdir, readdir } from "node:fs/promises";
import { join } from "node:path";
import Database from "better-sqlite3";
import { pathsFor } from "../src/config/paths.js";
import { openDb } from "../src/store/db.js";
import { SnapshotStore, type SnapshotRow } from "../src/store/snapshots.js";
import { Forge } from "../src/index.js";
import { imageLayers } from "../src/core/images/image-layers.js";
import { DEFAULT_IMAGE, resolveImage } from "../src/images/store.js";

/** The sizes most tests spawn the default image at (memory MiB): its base at each is built once. */
export const SHARED_BASE_SIZES = [512, 256];

/** The files of a base that are linked; the rest are copied. */
const LINKED = new Set(["memory", "disk.qcow2"]);

/**
 * Builds the default image's bases at SHARED_BASE_SIZES in `seed` (a data directory of the run's
 * own), and its OCI form and file index, which every commit, push and build on it needs first
 * (a throwaway sandbox's scan, half a minute under TCG): each data directory seeded from `seed`
 * then has them. Returns how many bases are ready.
 */
export async function buildSharedBases(seed: string): Promise<number> {
  const forge = await Forge.open({ dataDir: seed, reapIntervalMs: 0, prestart: 0, metrics: { enabled: false } });
  try {
    // The image's OCI form first: it gives the image its digest, which is part of a base's key, so
    // a base made before it would match no spawn of a seeded data directory (each would boot cold
    // and make its own). Its throwaway sandbox's base, made before the digest, is left out below.
    await imageLayers(forge.images.work(), await resolveImage(pathsFor(seed), DEFAULT_IMAGE), () => {}, true);
    const made: string[] = [];
    for (const memoryMb of SHARED_BASE_SIZES) {
      const sb = await forge.sandboxes.spawn({ memoryMb });
      made.push(forge.sandboxes.get(sb.id).snapshot_id ?? "");
      await sb.destroy();
    }
    for (const r of forge.snapshots.list()) if (r.kind === "base" && !made.includes(r.id)) await forge.snapshots.remove(r.id);
    return forge.snapshots.list().filter((r) => r.kind === "base").length;
  } finally {
    await forge.close();
  }
}

/** Gives the data directory `to` (seeded, never opened) the ready base snapshots of `seed`. */
export async function adoptSharedBases(seed: string, to: string): Promise<void> {
  const seedDb = join(seed, "forgevm.db");
  if (!existsSync(seedDb)) return; // a seed no core has opened has no bases
  const from = new Database(seedDb, { fileMustExist: true });
  let rows: SnapshotRow[];
  try {
    rows = (from.prepare("SELECT * FROM snapshots WHERE kind = 'base' AND state = 'ready'").all() as (Omit<SnapshotRow, "env"> & { env: string | null })[]).map((r) => ({
      ...r,
      env: r.env ? JSON.parse(r.env) : null,
    }));
  } finally {
    from.close();
  }
  if (!rows.length) return;
  const db = openDb(join(to, "forgevm.db"));
  try {
    const store = new SnapshotStore(db);
    for (const row of rows) {
      const dir = join(pathsFor(to).snapshotsDir, row.id);
      await mkdir(dir, { recursive: true, mode: 0o700 });
      for (const name of await readdir(row.dir)) {
        if (LINKED.has(name)) await link(join(row.dir, name), join(dir, name));
        else await copyFile(join(row.dir, name), join(dir, name));
      }
      store.insert({ ...row, dir, last_used_at: null });
    }
  } finally {
    db.close();
  }
}
