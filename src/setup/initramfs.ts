// The shared initramfs: the agent as /init plus the kernel modules it loads. Every VM boots it,
// whatever its image, so upgrading the agent never touches an image.
import { createHash } from "node:crypto";
import { mkdir, readFile, rename, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import type { Paths } from "../config/paths.js";
import { cpioNewc, type CpioEntry } from "./cpio.js";

/** Builds paths.initramfs from the agent binary and installed modules, unless it is current. */
export async function ensureInitramfs(paths: Paths, agentBinary: string, log: (m: string) => void): Promise<void> {
  const agent = await readFile(agentBinary).catch(() => {
    throw new Error(`agent binary missing at ${agentBinary} (build it with: make -C agent)`);
  });
  const order = (await readFile(join(paths.modulesDir, "modules.order"), "utf8")).split("\n").filter(Boolean);
  const entries: CpioEntry[] = [
    { name: "init", mode: 0o100755, data: agent },
    { name: "modules.order", mode: 0o100644, data: Buffer.from(`${order.join("\n")}\n`) },
    { name: "lib", mode: 0o040755 },
    { name: "lib/modules", mode: 0o040755 },
  ];
  for (const m of order) entries.push({ name: `lib/modules/${m}`, mode: 0o100644, data: await readFile(join(paths.modulesDir, m)) });
  const archive = cpioNewc(entries);
  const digest = createHash("sha256").update(archive).digest("hex");
  const stampFile = `${paths.initramfs}.sha256`;
  const current = await readFile(stampFile, "utf8").catch(() => "");
  await installBinary(paths.agentBinary, agent);
  if (current.trim() === digest) {
    log(`initramfs: up to date (agent ${digest.slice(0, 12)})`);
    return;
  }
  await mkdir(dirname(paths.initramfs), { recursive: true });
  await writeFile(`${paths.initramfs}.tmp`, archive);
  await rename(`${paths.initramfs}.tmp`, paths.initramfs);
  await writeFile(stampFile, `${digest}\n`);
  log(`initramfs: built (${(archive.length / 1024).toFixed(0)} KiB, ${order.length} modules)`);
}

/**
 * Copies a guest binary into the data directory unless it is there already: the agent (the local
 * provider runs it without a VM), the git credential helper (copied into sandboxes that forward git).
 */
export async function installBinary(to: string, binary: Buffer): Promise<void> {
  const now = await readFile(to).catch(() => null);
  if (now?.equals(binary)) return;
  await mkdir(dirname(to), { recursive: true });
  await writeFile(`${to}.tmp`, binary, { mode: 0o755 });
  await rename(`${to}.tmp`, to);
}
