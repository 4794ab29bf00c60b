// Benchmarks leave the user's machine alone as the tests do: each run works in a data directory
// of its own, seeded from the one ./setup.sh prepared, and an explicit configuration.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { defaultConfig, type Config } from "../src/config/config.js";
import { preparedDataDir } from "../src/setup/index.js";
import { seedDataDir } from "../src/setup/seed.js";
import { Forge, type ForgeOptions } from "../src/index.js";

const runDir = mkdtempSync(join(tmpdir(), "fvb-"));
process.once("exit", () => rmSync(runDir, { recursive: true, force: true }));
let n = 0;

/** A fresh data directory with the kernel, initramfs and built-in images (default: the default image) of the prepared one. */
export async function benchDataDir(images?: string[]): Promise<string> {
  const dir = join(runDir, `d${n++}`);
  await seedDataDir(preparedDataDir(), dir, images);
  return dir;
}

/** A Forge on a data directory of its own. */
export async function benchForge(opts: ForgeOptions = {}): Promise<Forge> {
  return Forge.open({ ...opts, dataDir: opts.dataDir ?? (await benchDataDir()) });
}

/** An explicit server configuration on a data directory of its own (with these built-in images) and a free port. */
export async function benchConfig(change: (c: Config) => void = () => {}, images?: string[]): Promise<Config> {
  const c = defaultConfig({});
  c.data_dir = await benchDataDir(images);
  c.server.port = 0;
  change(c);
  return c;
}
