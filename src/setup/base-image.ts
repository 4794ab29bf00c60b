// The built-in images: the default one, Debian bookworm (minbase + python3, bash, ca-certificates,
// coreutils, ping, curl, ps, ip, and an unprivileged `user`), and the code-interpreter one (the
// same plus matplotlib, pandas, Node.js, git and ssh's client), made with debootstrap from the Debian archive and packed into read-only ext4
// files with mkfs.ext4 -d (no loop mounts needed). A fresh machine with no registry access still
// has working images this way.
import { createHash } from "node:crypto";
import { mkdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import type { Paths } from "../config/paths.js";
import { CODE_IMAGE, DEFAULT_IMAGE, DESKTOP_IMAGE, imageDir, storedImageDir, SYSTEM_IMAGE, type ImageMeta, type ImageSize } from "../images/store.js";
import type { BuiltInImages } from "../images/built-in.js";
import { buildExt4 } from "../images/ext4.js";
import { run } from "../util/process.js";
import { DESKTOP_AFTER, DESKTOP_FILES, DESKTOP_PACKAGES, DESKTOP_WARM } from "./desktop-image.js";

const PACKAGES = ["python3", "bash", "ca-certificates", "coreutils", "iputils-ping", "curl", "procps", "iproute2"];
/**
 * Installed with apt after debootstrap, whose resolver takes first alternatives (here: scipy and
 * compilers). python3-munkres satisfies fonttools' "scipy | munkres" with 100 kB.
 */
const CODE_EXTRAS = ["python3-matplotlib", "python3-pandas", "python3-munkres", "nodejs", "git", "openssh-client"];
/** Run in each image once built: an unprivileged `user` (uid 1000, home /home/user), whom E2B's SDKs run commands as. */
const ADD_USER = "useradd --create-home --uid 1000 --user-group --shell /bin/bash user";
/**
 * Run in the default and code images: a login shell that starts no program. E2B's SDKs run every
 * command in one (`bash -l -c`), and Debian's /etc/profile asks `id -u` for what bash knows as
 * $EUID, and root's ~/.profile runs `mesg n` for a terminal there is none of: two programs, ~110 ms
 * of a login shell's 180 under TCG. Where the shell is not bash, and on a terminal, they run as before.
 */
const LOGIN_WITHOUT_PROGRAMS = `sed -i 's/"$(id -u)"/"\${EUID:-$(id -u)}"/' /etc/profile && sed -i 's/^mesg n 2> \\/dev\\/null || true$/if [ -t 0 ]; then mesg n 2> \\/dev\\/null || true; fi/' /root/.profile`;
/** ... and in the code image: matplotlib's font cache, which its first import would spend seconds on. */
const CODE_AFTER = `${ADD_USER} && ${LOGIN_WITHOUT_PROGRAMS} && mkdir -p /var/cache/matplotlib && MPLCONFIGDIR=/var/cache/matplotlib MPLBACKEND=Agg python3 -c 'import matplotlib.pyplot' && chmod -R a+rwX /var/cache/matplotlib`;

/**
 * The system image: systemd as init (with journald and D-Bus), an sshd, and nothing started that a
 * sandbox does not need: no getty on the console, no daily apt runs. Its ssh host keys are made
 * when sshd first starts, not at build time, and marked with the machine's id: every sandbox has
 * an id of its own, so ForgeVM's ssh makes them again in a sandbox restored from the image's base
 * snapshot before it pins them (core/guest/ssh.ts), and no two sandboxes share them.
 */
const SYSTEM_PACKAGES = [...PACKAGES, "systemd", "systemd-sysv", "dbus"];
const SYSTEM_FILES: Record<string, string> = {
  "etc/systemd/system/ssh.service.d/host-keys.conf": `[Service]
ExecStartPre=
ExecStartPre=/bin/sh -c 'ls /etc/ssh/ssh_host_*_key >/dev/null 2>&1 || { ssh-keygen -A && cat /etc/machine-id > /etc/ssh/forgevm-host-keys; }'
ExecStartPre=/usr/sbin/sshd -t
`,
};
const SYSTEM_AFTER = [
  ADD_USER,
  "rm -f /etc/ssh/ssh_host_*",
  ...["serial-getty@ttyS0.service", "getty@tty1.service", "apt-daily.timer", "apt-daily-upgrade.timer"].map((u) => `ln -sf /dev/null /etc/systemd/system/${u}`),
].join(" && ");

interface BuiltIn {
  name: string;
  packages: string[];
  extras?: string[];
  after?: string;
  /** "systemd": a system image (docs/system-images.md). */
  init?: "systemd";
  /** The size its sandboxes get when their spawn does not say (ImageMeta.size). */
  sandboxSize?: ImageSize;
  /** Files written into it (paths relative to its root) after the packages and before `after`. */
  files?: Record<string, string>;
  /**
   * A shell script for work that a VM under TCG does slowly on first use and the host does in
   * seconds: run on the host after `after`, as root, in mount, PID and network namespaces of its
   * own (what it starts ends with it, and it reaches no network), with the image's root as $1. A
   * failure is logged and the image is kept: the work is then done on first use, as before.
   */
  warm?: string;
}

/** The images setup builds, and what is in each. */
export const BUILT_IN_IMAGES: BuiltIn[] = [
  { name: DEFAULT_IMAGE, packages: PACKAGES, after: `${ADD_USER} && ${LOGIN_WITHOUT_PROGRAMS}` },
  { name: CODE_IMAGE, packages: PACKAGES, extras: CODE_EXTRAS, after: CODE_AFTER },
];

/** System images, built when asked for (forgevm image system NAME, or setup's question), by their short names. */
export const SYSTEM_IMAGES: Record<string, BuiltIn> = {
  "debian-12": { name: SYSTEM_IMAGE, packages: SYSTEM_PACKAGES, extras: ["openssh-server"], files: SYSTEM_FILES, after: SYSTEM_AFTER, init: "systemd" },
  // The same Debian with a desktop that runs from boot (desktop-image.ts).
  desktop: {
    name: DESKTOP_IMAGE,
    packages: SYSTEM_PACKAGES,
    extras: ["openssh-server", ...DESKTOP_PACKAGES],
    files: { ...SYSTEM_FILES, ...DESKTOP_FILES },
    after: [SYSTEM_AFTER, ...DESKTOP_AFTER].join(" && "),
    init: "systemd",
    warm: DESKTOP_WARM,
    // XFCE, Firefox and the X server want more than a shell does.
    sandboxSize: { memoryMb: 2048, vcpus: 2 },
  },
};

/** Builds the system image `short` ("debian-12", "desktop") unless it is built; its name in the store. */
export async function ensureSystemImage(paths: Paths, short: string, log: (m: string) => void): Promise<string> {
  return (await ensureSystemImages(paths, [short], log))[0];
}

/** ensureSystemImage for several: those with one package list share a debootstrap (the system and desktop images do). */
export async function ensureSystemImages(paths: Paths, shorts: string[], log: (m: string) => void): Promise<string[]> {
  const images = shorts.map((short) => {
    const image = SYSTEM_IMAGES[short];
    if (image) return image;
    const ubuntu = short.startsWith("ubuntu") ? "; Ubuntu's need its archive, which this machine's package sources do not reach (docs/system-images.md)" : "";
    throw new Error(`no system image "${short}": the ones ForgeVM builds are ${Object.keys(SYSTEM_IMAGES).join(", ")}${ubuntu}`);
  });
  const wanted: BuiltIn[] = [];
  for (const image of images) if (await needsBuild(paths, image, log)) wanted.push(image);
  for (const group of byPackages(wanted)) await buildDebianImages(paths, group, log, `sudo forgevm image system ${shorts.join(" ")}`);
  return images.map((i) => i.name);
}

/** The server's builder of system images, for a spawn that names one nobody built yet (root only: debootstrap makes device nodes). */
export function systemImageBuilder(paths: Paths): BuiltInImages {
  const short = (name: string) => Object.keys(SYSTEM_IMAGES).find((k) => SYSTEM_IMAGES[k].name === name);
  return {
    canBuild: (name) => process.getuid?.() === 0 && short(name) !== undefined,
    build: async (name, log) => {
      const which = short(name);
      if (!which) throw new Error(`${name} is not an image this server builds`);
      await ensureSystemImages(paths, [which], log);
    },
  };
}

/** Images grouped by package list: each group is built from one debootstrap. */
function byPackages(images: BuiltIn[]): BuiltIn[][] {
  const groups = new Map<string, BuiltIn[]>();
  for (const image of images) {
    const key = image.packages.join(",");
    groups.set(key, [...(groups.get(key) ?? []), image]);
  }
  return [...groups.values()];
}

/** The Debian mirror to use: $FORGEVM_DEBIAN_MIRROR, else the host's apt source, else deb.debian.org. */
export async function debianMirror(env: NodeJS.ProcessEnv = process.env): Promise<string> {
  if (env.FORGEVM_DEBIAN_MIRROR) return env.FORGEVM_DEBIAN_MIRROR;
  for (const f of ["/etc/apt/sources.list.d/debian.sources", "/etc/apt/sources.list"]) {
    const text = await readFile(f, "utf8").catch(() => "");
    const m = /^URIs:\s*(\S+\/debian)\/?\s*$/m.exec(text) ?? /^deb\s+(?:\[[^\]]*\]\s+)?(\S+\/debian)\/?\s+\S+/m.exec(text);
    if (m) return m[1];
  }
  return "http://deb.debian.org/debian";
}

/**
 * Builds built-in images (`names`, default all) into the image store, each unless it is there with
 * its current package list. Images with the same package list share one debootstrap, most of a
 * build (about 90 s here against half a second to copy its root), as the default and the
 * code-interpreter images do.
 */
export async function ensureBaseImages(paths: Paths, log: (m: string) => void, names = BUILT_IN_IMAGES.map((i) => i.name)): Promise<void> {
  const wanted: BuiltIn[] = [];
  for (const image of BUILT_IN_IMAGES) if (names.includes(image.name) && (await needsBuild(paths, image, log))) wanted.push(image);
  for (const images of byPackages(wanted)) await buildDebianImages(paths, images, log);
}

/** Whether a built-in image is in the store with its current package list (nothing to build). */
export async function baseImageBuilt(paths: Paths, name: string): Promise<boolean> {
  const image = [...BUILT_IN_IMAGES, ...Object.values(SYSTEM_IMAGES)].find((i) => i.name === name);
  if (!image) return false;
  const meta = await readFile(join(await storedImageDir(paths, name), "image.json"), "utf8").then(
    (t) => JSON.parse(t) as ImageMeta,
    () => null,
  );
  return meta?.description === describe(image);
}

function describe({ packages, extras = [], after, init, files = {}, warm, sandboxSize: size }: BuiltIn): string {
  const own = Object.keys(files).length
    ? ` (${createHash("sha256")
        .update(JSON.stringify(warm ? [files, after, warm] : [files, after]))
        .digest("hex")
        .slice(0, 8)})`
    : "";
  const sized = size ? `; sandboxes of ${size.memoryMb} MiB, ${size.vcpus} vCPUs` : "";
  return `Debian 12 bookworm minbase with ${[...packages, ...extras].join(", ")}${after?.includes(ADD_USER) ? ", and user" : ""}${after?.includes(LOGIN_WITHOUT_PROGRAMS) ? "; login shells start no program" : ""}${init ? `, booted by ${init}${own}` : ""}${sized}`;
}

/** Whether `image` is to be built: not in the store, or there with another package list (said in the log). */
async function needsBuild(paths: Paths, image: BuiltIn, log: (m: string) => void): Promise<boolean> {
  const built = await readFile(join(await storedImageDir(paths, image.name), "image.json"), "utf8").then(
    (t) => JSON.parse(t) as ImageMeta,
    () => null,
  );
  if (built?.description === describe(image)) {
    log(`image ${image.name}: already built`);
    return false;
  }
  if (built) log(`image ${image.name}: rebuilding (what goes into it changed)`);
  return true;
}

/** Builds `images`, which have one package list, from one debootstrap of it. */
async function buildDebianImages(paths: Paths, images: BuiltIn[], log: (m: string) => void, asRoot = "sudo ./setup.sh"): Promise<void> {
  const names = images.map((i) => i.name).join(", ");
  if (process.getuid?.() !== 0) {
    throw new Error(`building ${names} needs root (debootstrap creates device nodes and owners): run ${asRoot}`);
  }
  const stagings = images.map((i) => `${imageDir(paths, i.name)}.build-${process.pid}`);
  try {
    for (const s of stagings) {
      await rm(s, { recursive: true, force: true });
      await mkdir(s, { recursive: true });
    }
    const mirror = await debianMirror();
    log(`image ${names}: debootstrap bookworm from ${mirror} (about a minute)`);
    const first = join(stagings[0], "rootfs");
    await run("debootstrap", ["--variant=minbase", `--include=${images[0].packages.join(",")}`, "bookworm", first, mirror]);
    // A copy keeps owners, modes, device nodes and hard links, as debootstrap made them.
    for (const s of stagings.slice(1)) await run("cp", ["-a", "--reflink=auto", first, join(s, "rootfs")]);
    for (const [i, image] of images.entries()) await finishDebianImage(paths, image, stagings[i], mirror, log);
  } catch (e) {
    for (const s of stagings) await rm(s, { recursive: true, force: true });
    throw e;
  }
}

/** Adds `image`'s own packages, files and commands to the debootstrapped root in `staging`, packs it and stores it. */
async function finishDebianImage(paths: Paths, image: BuiltIn, staging: string, mirror: string, log: (m: string) => void): Promise<void> {
  const { name, extras = [], after, init, files = {}, warm } = image;
  const rootfs = join(staging, "rootfs");
  if (extras.length || after) {
    if (extras.length) log(`image ${name}: installing ${extras.join(", ")}`);
    const env = { PATH: "/usr/sbin:/usr/bin:/sbin:/bin", DEBIAN_FRONTEND: "noninteractive", HOME: "/root", LANG: "C.UTF-8" };
    const resolv = join(rootfs, "etc", "resolv.conf");
    const kept = await readFile(resolv).catch(() => Buffer.alloc(0));
    await writeFile(resolv, await readFile("/etc/resolv.conf").catch(() => ""));
    if (extras.length) {
      // No package's maintainer script may start its service: in a chroot it would run on the host.
      const policy = join(rootfs, "usr", "sbin", "policy-rc.d");
      await writeFile(policy, "#!/bin/sh\nexit 101\n", { mode: 0o755 });
      try {
        await run("chroot", [rootfs, "apt-get", "update", "-q"], { env });
        await run("chroot", [rootfs, "apt-get", "install", "-y", "-q", "--no-install-recommends", ...extras], { env });
      } finally {
        await rm(policy, { force: true });
      }
    }
    for (const [path, text] of Object.entries(files)) {
      await mkdir(dirname(join(rootfs, path)), { recursive: true });
      await writeFile(join(rootfs, path), text);
    }
    if (after) await run("chroot", [rootfs, "sh", "-c", after], { env });
    await writeFile(resolv, kept);
  }
  if (warm) {
    const t0 = performance.now();
    await run("unshare", ["--mount", "--pid", "--net", "--fork", "--kill-child", "sh", "-c", warm, "warm", rootfs], { env: { PATH: "/usr/sbin:/usr/bin:/sbin:/bin" } }).then(
      () => log(`image ${name}: first uses made ahead (${((performance.now() - t0) / 1000).toFixed(0)} s)`),
      (e) => log(`image ${name}: first uses not made ahead, they happen in each sandbox instead: ${(e as Error).message.split("\n").slice(-3).join(" ")}`),
    );
  }
  // Caches and package lists are not part of an image; machine identity is set per VM.
  await run("sh", ["-c", 'rm -rf "$0"/var/cache/apt/archives/*.deb "$0"/var/lib/apt/lists/* "$0"/var/log/*.log; : > "$0"/etc/machine-id', rootfs]);
  await writeFile(join(rootfs, "etc", "hostname"), "forgevm\n");
  await writeFile(join(rootfs, "etc", "hosts"), "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n");
  const size = await buildExt4(rootfs, join(staging, "rootfs.ext4"), "forgevm-root");
  await rm(rootfs, { recursive: true, force: true });
  const meta: ImageMeta = {
    name,
    source: `debootstrap --variant=minbase bookworm (${mirror})`,
    createdAt: new Date().toISOString(),
    size,
    description: describe(image),
    ...(init ? { init } : {}),
    ...(image.sandboxSize ? { sandboxSize: image.sandboxSize } : {}),
  };
  await writeFile(join(staging, "image.json"), `${JSON.stringify(meta, null, 2)}\n`);
  await rm(await storedImageDir(paths, name), { recursive: true, force: true });
  await rename(staging, imageDir(paths, name));
  log(`image ${name}: built (${(size / 1048576).toFixed(0)} MiB)`);
}
