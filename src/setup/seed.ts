// A new data directory that shares another's read-only artifacts (guest kernel, initramfs,
// default image, the ssh server for guests), so that it works at once and nothing is rebuilt. Files are hard-linked (or
// cloned, or copied across filesystems); nothing is ever written through them: setup and image
// installs replace files by renaming, never in place.
import { constants } from "node:fs";
import { copyFile, link, lstat, mkdir, readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { pathsFor } from "../config/paths.js";
import { DEFAULT_IMAGE, imageDir, storedImageDir } from "../images/store.js";

/** Small files that are rewritten in place somewhere: copied, never linked. */
const COPY = new Set(["initramfs.cpio.sha256", "accel.json"]);

/**
 * Fills `to` with the kernel, initramfs, images (default: the default image) and cached
 * accelerator verdict of the prepared data directory `from`. Throws, naming what is missing,
 * when `from` is not set up.
 */
export async function seedDataDir(from: string, to: string, images: string[] = [DEFAULT_IMAGE]): Promise<void> {
  const src = pathsFor(from);
  const dst = pathsFor(to);
  const stored = await Promise.all(images.map((i) => storedImageDir(src, i)));
  for (const need of [src.kernel, src.initramfs, ...stored.map((d) => join(d, "rootfs.ext4"))]) {
    if (!(await lstat(need).catch(() => null))) throw new Error(`${need} is missing: ${from} is not set up (run ./setup.sh)`);
  }
  await mkdir(to, { recursive: true });
  await shareTree(src.kernelDir, dst.kernelDir);
  await mkdir(join(to, "agent"), { recursive: true });
  await share(src.initramfs, dst.initramfs);
  await share(`${src.initramfs}.sha256`, `${dst.initramfs}.sha256`);
  for (const binary of ["agentBinary", "gitCredentialHelper"] as const) if (await lstat(src[binary]).catch(() => null)) await share(src[binary], dst[binary]);
  for (const i of images) await shareImage(from, to, i);
  if (await lstat(src.sshServer).catch(() => null)) await shareTree(src.sshServer, dst.sshServer);
  const accel = join(src.stateDir, "accel.json");
  if (await lstat(accel).catch(() => null)) {
    await mkdir(dst.stateDir, { recursive: true });
    await share(accel, join(dst.stateDir, "accel.json"));
  }
}

/** Gives data directory `to` the image `name` of data directory `from`: its files and the blobs its metadata names, shared. */
export async function shareImage(from: string, to: string, name: string): Promise<void> {
  const src = pathsFor(from);
  const dir = await storedImageDir(src, name);
  await shareTree(dir, imageDir(pathsFor(to), name));
  await shareBlobs(src.blobsDir, pathsFor(to).blobsDir, dir);
}

/** The blobs an image's metadata names (manifest, config, layers), where `from` has them: a seeded image keeps its OCI form. */
async function shareBlobs(from: string, to: string, image: string): Promise<void> {
  const meta = JSON.parse(await readFile(join(image, "image.json"), "utf8").catch(() => "{}")) as { digest?: string; configDigest?: string; layers?: string[] };
  for (const digest of [meta.digest, meta.configDigest, ...(meta.layers ?? [])]) {
    const hex = /^sha256:([0-9a-f]{64})$/.exec(digest ?? "")?.[1];
    if (!hex || !(await lstat(join(from, "sha256", hex)).catch(() => null))) continue;
    await mkdir(join(to, "sha256"), { recursive: true });
    if (!(await lstat(join(to, "sha256", hex)).catch(() => null))) await share(join(from, "sha256", hex), join(to, "sha256", hex));
  }
}

async function shareTree(from: string, to: string): Promise<void> {
  await mkdir(to, { recursive: true });
  for (const e of await readdir(from, { withFileTypes: true })) {
    if (e.isDirectory()) await shareTree(join(from, e.name), join(to, e.name));
    else if (e.isFile()) await share(join(from, e.name), join(to, e.name));
  }
}

async function share(from: string, to: string): Promise<void> {
  const name = from.slice(from.lastIndexOf("/") + 1);
  if (!COPY.has(name)) {
    try {
      await link(from, to);
      return;
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code !== "EXDEV" && code !== "EPERM" && code !== "EMLINK") throw e;
    }
  }
  await copyFile(from, to, constants.COPYFILE_FICLONE);
}
