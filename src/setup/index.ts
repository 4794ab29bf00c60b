// `forgevm setup` after the system packages and the build: kernel, initramfs, default image.
// Each step checks what is already there and says so, so a second run does nothing.
import { readFileSync } from "node:fs";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { Paths } from "../config/paths.js";
import { ensureBaseImages } from "./base-image.js";
import { ensureInitramfs } from "./initramfs.js";
import { ensureKernel } from "./kernel.js";

const REPO = fileURLToPath(new URL("../../../", import.meta.url));

/** Where the build puts the static agent, relative to the repository. */
export const AGENT_BINARY = join(REPO, "agent", "build", "forgevm-agent");

/** Where the last setup of this checkout records the data directory it prepared (beside the build). */
const PREPARED = join(REPO, "dist", "prepared-data-dir");

export async function runSetup(paths: Paths, log: (m: string) => void): Promise<void> {
  log(`data directory: ${paths.dataDir}`);
  await ensureKernel(paths, log);
  await ensureInitramfs(paths, AGENT_BINARY, log);
  await ensureBaseImages(paths, log);
  await writeFile(PREPARED, `${paths.dataDir}\n`);
}

/**
 * The data directory this checkout's setup prepared: tests and benchmarks share its kernel,
 * initramfs and default image (read-only, by hard link) without looking at any environment.
 */
export function preparedDataDir(): string {
  try {
    return readFileSync(PREPARED, "utf8").trim();
  } catch {
    throw new Error(`${PREPARED} is missing: run ./setup.sh first`);
  }
}
