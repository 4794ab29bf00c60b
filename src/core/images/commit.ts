// Commit: a sandbox's disk becomes a new image, one layer on top of its image's (or one layer
// in all, squashed). The guest's processes are stopped and its filesystems flushed; a scan of
// its root filesystem is diffed against the image's file index (inode and change time, see
// images/file-index.ts); the changed files are read out as a layer; and the disk is copied as
// the new image's root filesystem, so a spawn of the new image sees exactly what was committed.
// An image whose layers or index are not known yet gets them first (image-layers.ts).
import { randomBytes } from "node:crypto";
import { rm } from "node:fs/promises";
import { join } from "node:path";
import { repairExt4 } from "../../images/ext4.js";
import { diffFiles, indexOf, type FileIndex, type FileRecord } from "../../images/file-index.js";
import { installRootfs } from "../../images/install.js";
import { childConfig, storeImage, storeLayer, type ImageChanges, type StoredImage, type StoredLayer } from "../../images/oci-build.js";
import { parseImageConfig } from "../../images/oci.js";
import { canonicalName, resolveImage, type LocalImage } from "../../images/store.js";
import { parseImageReference } from "./images.js";
import type { Paths } from "../../config/paths.js";
import type { SandboxStore } from "../../store/sandboxes.js";
import type { EventBus } from "../events.js";
import type { Providers } from "../providers.js";
import type { Sandbox } from "../guest/sandbox.js";
import { badRequest, conflict, sandboxGone } from "../../http/errors.js";
import { layerTar, type LayerCounts } from "../guest/guest-layer.js";
import { scanGuest } from "../guest/guest-scan.js";
import { baseConfigDoc, imageLayers, type ImageWork } from "./image-layers.js";
import { ignore } from "../../util/ignore.js";

export interface CommitOptions {
  /** NAME[:TAG] of the new image. */
  image: string;
  changes?: ImageChanges;
  /** One layer holding the whole filesystem instead of one on top of the image's. */
  squash?: boolean;
  comment?: string;
  /** Stop the guest's processes while its disk is read (default true). */
  pause?: boolean;
  log?: (m: string) => void;
}

export interface CommitResult {
  image: LocalImage;
  /** The layer this commit added. */
  layer: { digest: string; size: number; entries: number; whiteouts: number };
  /** How long the guest's processes were stopped, and its vCPUs for the disk copy. */
  frozenMs: number;
  diskPauseMs: number;
  durationMs: number;
}

/** Commits a running sandbox's disk as a new image. */
/** What a commit takes: the sandbox's row and its running VM, its provider's features, where images live and where the event goes. */
export interface CommitDeps {
  readonly paths: Paths;
  readonly sandboxes: Pick<SandboxStore, "get">;
  readonly table: { readonly live: ReadonlyMap<string, Sandbox> };
  readonly providers: Pick<Providers, "of" | "require">;
  readonly events: Pick<EventBus, "emit">;
}

export async function commit(core: CommitDeps, deps: ImageWork, id: string, o: CommitOptions): Promise<CommitResult> {
  const t0 = performance.now();
  const log = o.log ?? (() => {});
  const row = core.sandboxes.get(id);
  if (!row) throw sandboxGone(id, `no sandbox ${id}`);
  const sb = core.table.live.get(id);
  if (!sb || row.state !== "running") throw conflict(`sandbox ${id} is ${row.state}: only a running sandbox can be committed (start it first)`);
  if (sb.tenant) throw conflict(`sandbox ${id} shares its VM with others (pool mode) and has no disk of its own to commit`);
  core.providers.require(core.providers.of(row), "commit", `sandbox ${id}`);
  const name = imageName(o.image);
  const users = deps.imageUsers(name);
  if (users.length) throw conflict(`image ${name} is in use by ${users.join(", ")}: commit under another name or tag`);
  const base = await resolveImage(core.paths, row.image);

  let parent: StoredImage | null = null;
  let index: FileIndex | null = null;
  if (!o.squash) {
    ({ parent, index } = await imageLayers(deps, base, log, true));
  }
  const pause = o.pause !== false;
  const dest = join(core.paths.imagesDir, `.commit-${randomBytes(6).toString("hex")}.ext4`);
  let frozenMs = 0;
  try {
    const tf = performance.now();
    if (pause) await sb.freeze(true);
    const counts: LayerCounts = { entries: 0, whiteouts: 0 };
    let layer: StoredLayer;
    let scanned: FileRecord[];
    let diskPauseMs = 0;
    try {
      await sb.sync();
      scanned = await scanGuest(sb);
      const diff = diffFiles(index, scanned);
      log(`${diff.changed.length} paths changed, ${diff.removed.length} removed`);
      layer = await storeLayer(deps.blobs, layerTar(sb, diff.changed, diff.removed, counts));
      const copied = await sb.copyDisk(dest);
      if (!copied) throw conflict(`sandbox ${id} has no disk to commit`);
      diskPauseMs = copied.pauseMs;
    } finally {
      if (pause) await sb.freeze(false).catch(ignore("the commit's own error is the one reported"));
      frozenMs = Math.round(performance.now() - tf);
    }
    log(`layer ${layer.descriptor.digest.slice(7, 19)}: ${counts.entries} entries, ${counts.whiteouts} whiteouts, ${layer.descriptor.size} bytes`);
    await repairExt4(dest);
    const createdBy = o.comment ? `forgevm commit: ${o.comment}` : `forgevm commit ${id}`;
    const configDoc = childConfig(parent?.configDoc ?? baseConfigDoc(base), { diffId: layer.diffId, createdBy, comment: o.comment }, o.changes, !!o.squash);
    const layers = [...(parent?.manifest.layers ?? []), layer.descriptor];
    const stored = await storeImage(deps.blobs, configDoc, layers);
    const meta = await installRootfs(core.paths, {
      name,
      source: `commit:${id}`,
      rootfs: dest,
      manifestDigest: stored.manifestDigest,
      configDigest: stored.configDigest,
      layers: layers.map((l) => l.digest),
      config: parseImageConfig(stored.configBytes),
      parent: base.name,
      index: indexOf(scanned),
    });
    core.events.emit("image.committed", id, { image: meta.name, digest: meta.digest, layers: layers.length });
    return {
      image: await resolveImage(core.paths, meta.name),
      layer: { digest: layer.descriptor.digest, size: layer.descriptor.size, ...counts },
      frozenMs,
      diskPauseMs,
      durationMs: Math.round(performance.now() - t0),
    };
  } finally {
    await rm(dest, { force: true });
  }
}

/** The stored name for NAME[:TAG] (":latest" when no tag is given), or a 400 naming the field. */
export function imageName(given: string): string {
  if (typeof given !== "string" || !given.trim()) throw badRequest("image: the name of the new image is required");
  if (given.length > 255) throw badRequest(`image: a name of ${given.length} characters is longer than 255`);
  // The one reference parser says what a name may be (no NUL, no "..", no digest on a new image).
  if (!given.trim().startsWith("forgevm/")) parseImageReference(given.trim());
  const name = canonicalName(given.trim());
  if (/[\s@]/.test(name)) throw badRequest(`image: "${given}" is not an image name (NAME[:TAG]; a digest is made, not given)`);
  return name;
}
