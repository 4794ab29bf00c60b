// The built-in default image: Debian bookworm (minbase + python3, bash, ca-certificates,
// coreutils, ping, curl, ps, ip) made with debootstrap from the Debian archive, packed into a read-only ext4 file
// with mkfs.ext4 -d (no loop mounts needed). A fresh machine with no registry access still has
// a working image this way.
import { mkdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { Paths } from "../config/paths.js";
import { DEFAULT_IMAGE, imageDir, type ImageMeta } from "../images/store.js";
import { buildExt4 } from "../images/ext4.js";
import { run } from "../util/process.js";

const PACKAGES = ["python3", "bash", "ca-certificates", "coreutils", "iputils-ping", "curl", "procps", "iproute2"];
const DESCRIPTION = `Debian 12 bookworm minbase with ${PACKAGES.join(", ")}`;

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

/** Builds DEFAULT_IMAGE into the image store unless it is already there with the current package list. */
export async function ensureBaseImage(paths: Paths, log: (m: string) => void): Promise<void> {
  const dir = imageDir(paths, DEFAULT_IMAGE);
  const built = await readFile(join(dir, "image.json"), "utf8").then(
    (t) => JSON.parse(t) as ImageMeta,
    () => null,
  );
  if (built?.description === DESCRIPTION) {
    log(`image ${DEFAULT_IMAGE}: already built`);
    return;
  }
  if (built) log(`image ${DEFAULT_IMAGE}: rebuilding (its package list changed)`);
  if (process.getuid?.() !== 0) {
    throw new Error(`building ${DEFAULT_IMAGE} needs root (debootstrap creates device nodes and owners): run sudo ./setup.sh`);
  }
  const staging = `${dir}.build-${process.pid}`;
  const rootfs = join(staging, "rootfs");
  await rm(staging, { recursive: true, force: true });
  await mkdir(staging, { recursive: true });
  try {
    const mirror = await debianMirror();
    log(`image ${DEFAULT_IMAGE}: debootstrap bookworm from ${mirror} (about a minute)`);
    await run("debootstrap", ["--variant=minbase", `--include=${PACKAGES.join(",")}`, "bookworm", rootfs, mirror]);
    // Caches and package lists are not part of an image; machine identity is set per VM.
    await run("sh", ["-c", 'rm -rf "$0"/var/cache/apt/archives/*.deb "$0"/var/lib/apt/lists/* "$0"/var/log/*.log; : > "$0"/etc/machine-id', rootfs]);
    await writeFile(join(rootfs, "etc", "hostname"), "forgevm\n");
    await writeFile(join(rootfs, "etc", "hosts"), "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n");
    const size = await buildExt4(rootfs, join(staging, "rootfs.ext4"), "forgevm-root");
    await rm(rootfs, { recursive: true, force: true });
    const meta: ImageMeta = {
      name: DEFAULT_IMAGE,
      source: `debootstrap --variant=minbase bookworm (${mirror})`,
      createdAt: new Date().toISOString(),
      size,
      description: DESCRIPTION,
    };
    await writeFile(join(staging, "image.json"), `${JSON.stringify(meta, null, 2)}\n`);
    await rm(dir, { recursive: true, force: true });
    await rename(staging, dir);
    log(`image ${DEFAULT_IMAGE}: built (${(size / 1048576).toFixed(0)} MiB)`);
  } catch (e) {
    await rm(staging, { recursive: true, force: true });
    throw e;
  }
}
