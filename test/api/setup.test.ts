// ./setup.sh prepares the user's data directory (wherever FORGEVM_DATA_DIR points) and keeps the
// checkout's own copy for tests and benchmarks, which must outlive that directory.
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { join } from "node:path";
import { it } from "node:test";
import { tmpdir } from "node:os";
import { BUILT_IN_IMAGES } from "../../src/setup/base-image.js";
import { preparedDataDir } from "../../src/setup/index.js";
import { seedDataDir } from "../../src/setup/seed.js";
import { childEnv, runCli } from "../helpers.js";

it("a setup run with FORGEVM_DATA_DIR leaves the tests' prepared copy usable after that directory is gone", async () => {
  const before = preparedDataDir();
  const elsewhere = await mkdtemp(join(tmpdir(), "fvt-setup-"));
  try {
    // Set up already (shared files), so setup only checks: the test is about what it records.
    await seedDataDir(
      before,
      elsewhere,
      BUILT_IN_IMAGES.map((i) => i.name),
    );
    const r = await runCli(["setup", "-y", "--no-test-sandbox", "--quiet"], childEnv({ FORGEVM_DATA_DIR: elsewhere }));
    assert.equal(r.status, 0, r.stderr);
  } finally {
    await rm(elsewhere, { recursive: true, force: true });
  }
  assert.equal(preparedDataDir(), before, "the checkout's copy stays where it is");
  const seeded = await mkdtemp(join(tmpdir(), "fvt-setup-"));
  try {
    await seedDataDir(preparedDataDir(), seeded);
  } finally {
    await rm(seeded, { recursive: true, force: true });
  }
});
