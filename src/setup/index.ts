// `forgevm setup` after the system packages and the build: kernel, initramfs, default image.
// Each step checks what is already there and says so, so a second run does nothing.
import { existsSync } from "node:fs";
import { mkdir, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { pathsFor, type Paths } from "../config/paths.js";
import { storedImageDir } from "../images/store.js";
import { BUILT_IN_IMAGES, SYSTEM_IMAGES, baseImageBuilt, ensureBaseImages, ensureSystemImages } from "./base-image.js";
import { ensureInitramfs, installBinary } from "./initramfs.js";
import { INSTALL_ROOT, IS_CHECKOUT } from "./install.js";
import { ensureKernel } from "./kernel.js";
import { ensureSshServer } from "./ssh-server.js";
import { ignore } from "../util/ignore.js";
import { seedDataDir, shareImage } from "./seed.js";

/** Where the build puts the static agent, relative to the repository. */
export const AGENT_BINARY = join(INSTALL_ROOT, "agent", "build", "forgevm-agent");
/** ... and the guest's git credential helper, built beside it. */
const GIT_HELPER_BINARY = join(INSTALL_ROOT, "agent", "build", "git-credential-forgevm");

/**
 * The checkout's own copy of what setup prepared (kernel, initramfs, built-in images, by hard
 * link), which tests and benchmarks seed from: it outlives whatever data directory the
 * environment pointed setup at, and no environment is read to find it.
 */
const PREPARED = join(INSTALL_ROOT, ".forgevm-test", "prepared");

export interface SetupOptions {
  /** The built-in images to build (default: all of them). */
  images?: string[];
}

export async function runSetup(paths: Paths, log: (m: string) => void, o: SetupOptions = {}): Promise<void> {
  log(`data directory: ${paths.dataDir}`);
  await reusePrepared(paths, log);
  // The ssh server for guests needs none of the rest: it is fetched while they are made.
  const ssh = ensureSshServer(paths, log);
  ssh.catch(ignore("awaited below, where its failure is reported"));
  await ensureKernel(paths, log);
  await ensureInitramfs(paths, AGENT_BINARY, log);
  const helper = await readFile(GIT_HELPER_BINARY).catch(() => {
    throw new Error(`the guest's git credential helper is missing at ${GIT_HELPER_BINARY} (build it with: make -C agent)`);
  });
  await installBinary(paths.gitCredentialHelper, helper);
  await ensureBaseImages(paths, log, o.images);
  await ssh;
  // An installed package runs no tests: nothing to keep a copy for.
  if (IS_CHECKOUT) await keepPrepared(paths, log);
}

/**
 * A data directory with nothing in it yet starts from what this installation already prepared
 * for another one (kernel, initramfs, images, the ssh server: shared read-only, by hard link),
 * so a second data directory costs seconds; each step below then checks it as any other.
 */
async function reusePrepared(paths: Paths, log: (m: string) => void): Promise<void> {
  if (existsSync(paths.kernel) || !existsSync(pathsFor(PREPARED).initramfs) || paths.dataDir === PREPARED) return;
  const images = [];
  for (const i of BUILT_IN_IMAGES) if (await baseImageBuilt(pathsFor(PREPARED), i.name)) images.push(i.name);
  await seedDataDir(PREPARED, paths.dataDir, images);
  log(`reused what this installation prepared before (${PREPARED}): the kernel, the initramfs${images.length ? `, ${images.join(", ")}` : ""}`);
}

/** The files a prepared data directory is made of: what seedDataDir shares. */
async function preparedFiles(p: Paths): Promise<string[]> {
  const images = await Promise.all(BUILT_IN_IMAGES.map(async (i) => join(await storedImageDir(p, i.name), "rootfs.ext4")));
  return [p.kernel, p.initramfs, join(p.sshServer, "bundle.json"), ...images];
}

/** Where preparedFiles puts the ssh bundle's description. */
const SSH_BUNDLE = 2;

/** Makes the checkout's copy the same files as the user's data directory's (nothing when it is already). */
async function keepPrepared(paths: Paths, log: (m: string) => void): Promise<void> {
  const ino = (f: string) =>
    stat(f).then(
      (s) => `${s.dev}:${s.ino}`,
      () => null,
    );
  const ours = await preparedFiles(pathsFor(PREPARED));
  const theirs = await preparedFiles(paths);
  // A data directory set up without an optional image is not what the checkout's tests need.
  if ((await Promise.all(theirs.slice(SSH_BUNDLE + 1).map(ino))).includes(null)) return;
  // A file neither has (the ssh bundle, on a host it is not built for) is no difference.
  const same = await Promise.all(ours.map(async (f, i) => (await ino(f)) === (await ino(theirs[i])) && ((await ino(f)) !== null || i === SSH_BUNDLE)));
  if (same.every(Boolean)) return;
  const staging = `${PREPARED}.new-${process.pid}`;
  await rm(staging, { recursive: true, force: true });
  await seedDataDir(
    paths.dataDir,
    staging,
    BUILT_IN_IMAGES.map((i) => i.name),
  );
  await rm(PREPARED, { recursive: true, force: true });
  await rename(staging, PREPARED);
  log(`kept a copy for this checkout's tests and benchmarks in ${PREPARED}`);
}

/**
 * Gives data directory `to` the system image (docs/system-images.md), or another of SYSTEM_IMAGES
 * by its short name (the desktop image), built once per checkout (a few minutes of debootstrap) in
 * a data directory of its own beside the prepared one, which a later setup replaces but never
 * this: tests and benchmarks of system images share it. One process builds at a time (the test
 * runner starts the builds ahead of the test files that wait here).
 */
export async function preparedSystemImage(to?: string, log: (m: string) => void = () => {}, short = "debian-12"): Promise<string> {
  const [name] = await preparedSystemImages([short], log);
  if (to) await shareImage(SYSTEM_IMAGE_CACHE, to, name);
  return name;
}

const SYSTEM_IMAGE_CACHE = join(INSTALL_ROOT, ".forgevm-test", "system-images");

/**
 * preparedSystemImage's build for several at once: images with one package list share a
 * debootstrap (the system and the desktop images do), and each is stored, and can be shared, as
 * soon as it is built, while the next one builds.
 */
export async function preparedSystemImages(shorts: string[], log: (m: string) => void = () => {}): Promise<string[]> {
  const paths = pathsFor(SYSTEM_IMAGE_CACHE);
  const built = async () => (await Promise.all(shorts.map((s) => SYSTEM_IMAGES[s] && baseImageBuilt(paths, SYSTEM_IMAGES[s].name)))).every(Boolean);
  // What is built is not waited for while another image of the cache builds.
  if (await built()) return shorts.map((s) => SYSTEM_IMAGES[s].name);
  return oneAtATime(join(SYSTEM_IMAGE_CACHE, ".building"), () => ensureSystemImages(paths, shorts, log), built);
}

/**
 * Runs `fn` while holding `lock` (a file with the holder's pid): a second process waits for the
 * first, or takes over from one that died. A waiter whose `done` comes true while it waits (the
 * holder made what it wanted, and goes on with more) runs `fn` without the lock: it finds nothing to do.
 */
async function oneAtATime<T>(lock: string, fn: () => Promise<T>, done: () => Promise<boolean>): Promise<T> {
  await mkdir(dirname(lock), { recursive: true });
  for (;;) {
    try {
      await writeFile(lock, String(process.pid), { flag: "wx" });
      break;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e;
    }
    if (await done()) return fn();
    const holder = Number(await readFile(lock, "utf8").catch(() => "0"));
    if (holder && alive(holder)) await sleep(1000);
    else if (holder) await rm(lock, { force: true });
    else await sleep(100); // made but not yet written
  }
  try {
    return await fn();
  } finally {
    await rm(lock, { force: true });
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "EPERM";
  }
}

/**
 * The data directory this checkout's setup prepared: tests and benchmarks share its kernel,
 * initramfs and default image (read-only, by hard link) without looking at any environment.
 */
export function preparedDataDir(): string {
  if (!existsSync(pathsFor(PREPARED).initramfs)) throw new Error(`${PREPARED} is not set up: run ./setup.sh first`);
  return PREPARED;
}
