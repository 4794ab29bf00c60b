// `forgevm setup -y` on a data directory with nothing in it: every step checked (what this
// installation prepared before is reused, by hard link), the defaults taken without asking, and
// a test sandbox booted that runs a command. Then `forgevm status` reports it, with and without a
// server running.
import assert from "node:assert/strict";
import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, it } from "node:test";
import type { RunningServer } from "../../src/compose/serve.js";
import { apiRequest, assertNoVmLeft, childEnv, removeAtExit, runCli, startTestServer } from "../helpers.js";

let server: RunningServer;

before(async () => {
  server = await startTestServer();
});

after(async () => {
  await server?.close();
  if (server) await assertNoVmLeft(server.forge);
});

it("setup -y on an empty data directory ends with a test sandbox's command, and status reports what is there", async () => {
  const dir = await mkdtemp(join(tmpdir(), "fvt-setup-guide-"));
  removeAtExit(dir);
  const r = await runCli(["--data-dir", dir, "setup", "-y"], childEnv());
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stdout, /setup: reused what this installation prepared before/);
  assert.match(r.stdout, /setup: image forgevm\/code-interpreter:bookworm: already built/, "the default: the code-interpreter image too");
  assert.match(r.stdout, /setup: a test sandbox booted and ran `uname -sr` \(Linux [^)]+\) in \d+\.\d s: ready/);

  const again = await runCli(["--data-dir", dir, "setup", "-y", "--no-test-sandbox", "--quiet"], childEnv());
  assert.equal(again.status, 0, again.stderr);
  assert.equal(again.stdout, "", "a second run has nothing to do or say");

  const s = await runCli(["--data-dir", dir, "status", "--json"], childEnv());
  assert.equal(s.status, 0, s.stderr);
  const st = JSON.parse(s.stdout);
  assert.match(st.kernel, /^linux-image-/);
  assert.match(st.qemu, /^\d+\.\d+/);
  assert.deepEqual(
    st.images.map((i: { name: string }) => i.name),
    ["forgevm/code-interpreter:bookworm", "forgevm/debian:bookworm"],
  );
  assert.match(st.ssh_server, /^openssh-server /);
  assert.equal(st.server.url, null, "no server runs on that directory");
  assert.deepEqual(st.updates, []);
  assert.ok(st.disk.used_bytes > 0 && st.disk.free_bytes > 0);
});

it("status through a running server counts its sandboxes and names its accelerator", async () => {
  const sb = await apiRequest(server.url, "POST", "/sandboxes", { memory_mb: 256 });
  assert.equal(sb.status, 201, JSON.stringify(sb.body));
  const s = await runCli(["--server", server.url, "status", "--json"], childEnv());
  assert.equal(s.status, 0, s.stderr);
  const st = JSON.parse(s.stdout);
  assert.equal(st.server.url, server.url);
  assert.equal(st.server.sandboxes.running, 1);
  assert.match(st.server.accel, /^(kvm|tcg)$/);
  await apiRequest(server.url, "DELETE", `/sandboxes/${sb.body.id}`);
});
