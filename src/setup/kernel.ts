// The guest kernel: Debian's linux-image-cloud-amd64 package, unpacked without installing it.
// QEMU's microvm boots an uncompressed ELF vmlinux through its PVH entry, so the vmlinux is cut
// out of the bzImage; the virtio modules the agent needs are copied beside it in load order.
import { copyFile, mkdir, mkdtemp, readFile, readdir, rm, writeFile, rename, stat } from "node:fs/promises";
import { join } from "node:path";
import { tmpdir } from "node:os";
import type { Paths } from "../config/paths.js";
import { run } from "../util/process.js";
import { aptDownload } from "./apt.js";

/** Modules the agent loads, in the order they must be inserted (dependencies are added first). */
export const GUEST_MODULES = ["virtio_ring", "virtio", "virtio_mmio", "virtio_blk", "virtio_console", "virtio-rng", "virtio_net", "overlay", "fuse", "virtio_balloon"];
export const KERNEL_PACKAGE = "linux-image-cloud-amd64";

export interface KernelInfo {
  package: string;
  version: string;
  /** GUEST_MODULES when this kernel was installed; a change triggers a reinstall. */
  requested: string[];
  /** Module files in load order. */
  modules: string[];
}

/** Installs the kernel and modules into paths.kernelDir unless the same package is there. */
export async function ensureKernel(paths: Paths, log: (m: string) => void): Promise<KernelInfo> {
  const infoFile = join(paths.kernelDir, "kernel.json");
  const existing = await readFile(infoFile, "utf8").then(
    (t) => JSON.parse(t) as KernelInfo,
    () => null,
  );
  if (existing && existing.requested?.join() === GUEST_MODULES.join() && (await exists(paths.kernel))) {
    log(`kernel: already installed (${existing.package} ${existing.version})`);
    return existing;
  }
  log(`kernel: fetching ${KERNEL_PACKAGE} from the Debian archive`);
  const work = await mkdtemp(join(tmpdir(), "forgevm-kernel-"));
  try {
    const meta = await aptDownload(KERNEL_PACKAGE, work);
    const real = /linux-image-[0-9][^ ,]*cloud-amd64/.exec(meta.depends)?.[0];
    if (!real) throw new Error(`cannot tell which kernel ${KERNEL_PACKAGE} depends on (Depends: ${meta.depends})`);
    const pkg = await aptDownload(real, work);
    const root = join(work, "root");
    await run("dpkg-deb", ["-x", pkg.file, root]);
    const bootFiles = await readdir(join(root, "boot"));
    const vmlinuz = bootFiles.find((f) => f.startsWith("vmlinuz-"));
    if (!vmlinuz) throw new Error(`${real} contains no /boot/vmlinuz-*`);
    const release = vmlinuz.slice("vmlinuz-".length);
    const staging = `${paths.kernelDir}.new`;
    await rm(staging, { recursive: true, force: true });
    await mkdir(join(staging, "modules"), { recursive: true });
    await extractVmlinux(join(root, "boot", vmlinuz), join(staging, "vmlinux"), work);
    const order = await copyModules(join(root, "lib", "modules", release), join(staging, "modules"));
    const info: KernelInfo = { package: real, version: pkg.version, requested: GUEST_MODULES, modules: order };
    await writeFile(join(staging, "modules", "modules.order"), `${order.join("\n")}\n`);
    await writeFile(join(staging, "kernel.json"), `${JSON.stringify(info, null, 2)}\n`);
    await rm(paths.kernelDir, { recursive: true, force: true });
    await rename(staging, paths.kernelDir);
    log(`kernel: installed ${real} ${pkg.version} with ${order.length} modules`);
    return info;
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

function exists(p: string): Promise<boolean> {
  return stat(p).then(
    () => true,
    () => false,
  );
}

// A bzImage is a small decompressor followed by the compressed kernel; find the payload by its
// magic number and decompress it with the matching tool.
const PAYLOADS: { magic: number[]; cmd: string; args: string[] }[] = [
  { magic: [0x02, 0x21, 0x4c, 0x18], cmd: "lz4", args: ["-dc"] },
  { magic: [0x28, 0xb5, 0x2f, 0xfd], cmd: "zstd", args: ["-dcq"] },
  { magic: [0x1f, 0x8b, 0x08], cmd: "gzip", args: ["-dcq"] },
  { magic: [0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x00], cmd: "xz", args: ["-dcq"] },
];

async function extractVmlinux(bzImage: string, out: string, work: string): Promise<void> {
  const img = await readFile(bzImage);
  for (const p of PAYLOADS) {
    let at = img.indexOf(Buffer.from(p.magic));
    while (at >= 0) {
      const payload = join(work, "payload");
      await writeFile(payload, img.subarray(at));
      // Decompressors complain about the bytes that follow the payload; the ELF check decides.
      await run("sh", ["-c", `${p.cmd} ${p.args.join(" ")} < "$0" > "$1" 2>/dev/null; true`, payload, out]);
      const head = await readFile(out).then(
        (b) => b.subarray(0, 4),
        () => Buffer.alloc(0),
      );
      if (head.equals(Buffer.from([0x7f, 0x45, 0x4c, 0x46]))) return;
      at = img.indexOf(Buffer.from(p.magic), at + 1);
    }
  }
  throw new Error(`no known compressed vmlinux found inside ${bzImage}`);
}

async function findModules(dir: string): Promise<Map<string, string>> {
  const found = new Map<string, string>();
  const walk = async (d: string) => {
    for (const e of await readdir(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      if (e.isDirectory()) await walk(p);
      else if (e.name.endsWith(".ko")) found.set(e.name.slice(0, -3).replace(/_/g, "-"), p);
    }
  };
  await walk(dir);
  return found;
}

/** Copies GUEST_MODULES and everything they depend on, returning file names in load order. */
async function copyModules(srcDir: string, destDir: string): Promise<string[]> {
  const all = await findModules(srcDir);
  const order: string[] = [];
  const visit = async (name: string, chain: string[]) => {
    const key = name.replace(/_/g, "-");
    const file = all.get(key);
    if (!file) throw new Error(`kernel module ${name} not found in the kernel package`);
    const base = file.split("/").pop()!;
    if (order.includes(base)) return;
    if (chain.includes(key)) throw new Error(`module dependency cycle: ${chain.join(" -> ")}`);
    const { stdout } = await run("modinfo", ["-F", "depends", file]);
    for (const dep of stdout.trim().split(",").filter(Boolean)) await visit(dep, [...chain, key]);
    await copyFile(file, join(destDir, base));
    order.push(base);
  };
  for (const m of GUEST_MODULES) await visit(m, []);
  return order;
}
