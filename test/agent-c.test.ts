// The agent's own C tests (JSON reader fuzzed under ASan/UBSan), run as part of the suite.
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { it } from "node:test";
import { run } from "../src/util/process.js";

it("agent C tests pass under AddressSanitizer", async () => {
  const agentDir = fileURLToPath(new URL("../../agent/", import.meta.url));
  const { stdout } = await run("make", ["-s", "-C", agentDir, "test"]);
  assert.match(stdout, /200000 fuzzed inputs ok/);
});
