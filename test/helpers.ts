// Shared fixtures for tests that boot real VMs.
import assert from "node:assert/strict";
import { readdir } from "node:fs/promises";
import { join } from "node:path";
import { Forge } from "../src/index.js";

let forge: Promise<Forge> | null = null;

/** One Forge per test process, on the data directory ./setup.sh prepared. */
export function testForge(): Promise<Forge> {
  forge ??= Forge.open();
  return forge;
}

// The runner stops a test file with a signal on timeout or Ctrl-C; exit normally then so the
// provider's exit hook kills the VMs this file started.
for (const sig of ["SIGINT", "SIGTERM"] as const) process.once(sig, () => process.exit(130));

export { processAlive as alive } from "../src/util/process.js";

/** Asserts that no VM directory is left under the data directory. */
export async function assertNoVmLeft(f: Forge): Promise<void> {
  const left = await readdir(f.paths.vmsDir).catch(() => []);
  assert.deepEqual(left, [], `VM directories left behind: ${left.join(", ")}`);
}

/** Polls `cond` until it holds or `ms` pass. */
export async function waitFor(cond: () => boolean | Promise<boolean>, ms: number, what: string): Promise<void> {
  const end = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Half-finished image installs or blob downloads left in the data directory. */
export async function imageLeftovers(f: Forge): Promise<string[]> {
  const imgs = await readdir(f.paths.imagesDir);
  const parts = await readdir(join(f.paths.blobsDir, "sha256")).catch(() => []);
  return [...imgs.filter((n) => n.startsWith(".staging")), ...parts.filter((n) => n.includes(".part"))];
}
