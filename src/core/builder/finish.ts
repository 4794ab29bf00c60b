// The end of a build: the target stage's image stored under its name. Its root filesystem is the
// last build sandbox's disk when that holds the image, another tag's copied when the image is the
// same, or the layers flattened when every step came from the cache.
import { copyFile, rm } from "node:fs/promises";
import { join } from "node:path";
import { repairExt4 } from "../../images/ext4.js";
import { loadIndex, saveIndex } from "../../images/file-index.js";
import { installImage, installRootfs } from "../../images/install.js";
import { storeImage } from "../../images/oci-build.js";
import { parseImageConfig } from "../../images/oci.js";
import { listImages, resolveImage, type LocalImage } from "../../images/store.js";
import { conflict } from "../../http/errors.js";
import { familiarName } from "../images/image-reference.js";
import type { BuildRun } from "./build-run.js";
import { fixDiffIds, type StageState } from "./stages.js";

export async function finish(run: BuildRun, st: StageState): Promise<LocalImage> {
  const { host, work, report, name, o } = run;
  const config = fixDiffIds(st.config);
  const stored = await storeImage(work.blobs, config, st.layers);
  const same = (await listImages(host.paths)).find((i) => i.digest === stored.manifestDigest);
  if (same?.name === name) {
    report.log(`${name} is up to date (${stored.manifestDigest})`);
    return resolveImage(host.paths, name);
  }
  // Checked only now: a rebuild that comes out the same may keep a name sandboxes use.
  const users = work.imageUsers(name);
  if (users.length) throw conflict(`image ${name} is in use by ${users.join(", ")}: build it under another name or tag`);
  const base = {
    name,
    source: `build:${o.dockerfile ?? "Dockerfile"}`,
    manifestDigest: stored.manifestDigest,
    configDigest: stored.configDigest,
    layers: st.layers.map((l) => l.digest),
    config: parseImageConfig(stored.configBytes),
    ...(st.base ? { parent: st.base.name } : {}),
  };
  const tmp = join(host.paths.imagesDir, `.build-${run.buildId}.ext4`);
  try {
    if (same) {
      // Another tag of the same image: its root filesystem is copied, sparse.
      await copyFile(same.rootfs, tmp);
      await installRootfs(host.paths, { ...base, rootfs: tmp, index: (await loadIndex(same.dir)) ?? undefined });
    } else if (st.sb && st.synced) {
      await st.sb.sync();
      const copied = await st.sb.copyDisk(tmp);
      if (!copied) throw new Error("the build sandbox has no disk");
      await repairExt4(tmp);
      await installRootfs(host.paths, { ...base, rootfs: tmp, index: st.index ?? undefined });
    } else {
      report.log(`  (flattening ${st.layers.length} layers into ${familiarName(name)})`);
      await installImage(host.paths, work.blobs, { ...base, manifest: stored.manifest, manifestBytes: stored.manifestBytes, configBytes: stored.configBytes });
    }
  } finally {
    await rm(tmp, { force: true });
  }
  const image = await resolveImage(host.paths, name);
  if (st.index && st.synced && !same) await saveIndex(image.dir, st.index);
  host.events.emit("image.built", null, { image: name, digest: stored.manifestDigest });
  report.log(`built ${familiarName(name)} (${stored.manifestDigest})`);
  return image;
}
