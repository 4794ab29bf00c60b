// `forgevm setup` after the system packages and the build: kernel, initramfs, default image.
// Each step checks what is already there and says so, so a second run does nothing.
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { Paths } from "../config/paths.js";
import { ensureBaseImage } from "./base-image.js";
import { ensureInitramfs } from "./initramfs.js";
import { ensureKernel } from "./kernel.js";

/** Where the build puts the static agent, relative to the repository. */
export const AGENT_BINARY = join(fileURLToPath(new URL("../../../", import.meta.url)), "agent", "build", "forgevm-agent");

export async function runSetup(paths: Paths, log: (m: string) => void): Promise<void> {
  log(`data directory: ${paths.dataDir}`);
  await ensureKernel(paths, log);
  await ensureInitramfs(paths, AGENT_BINARY, log);
  await ensureBaseImage(paths, log);
}
