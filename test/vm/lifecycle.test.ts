// Boot failures and teardown: every path must leave no process and no file behind.
import assert from "node:assert/strict";
import { stat } from "node:fs/promises";
import { after, describe, it } from "node:test";
import { alive, assertNoVmLeft, testForge } from "../helpers.js";
import { SHARED_BASE_SIZES } from "../shared-bases.js";

after(async () => {
  await assertNoVmLeft(await testForge());
});

describe("lifecycle", () => {
  it("a data directory seeded with the suite's shared bases restores them: a spawn at their sizes makes no base of its own", {
    skip: process.env.TEST_SEED_DATA_DIR ? false : "only the suite's runner seeds data directories with shared bases",
  }, async () => {
    const forge = await testForge();
    const bases = () =>
      forge.snapshots
        .list()
        .filter((r) => r.kind === "base")
        .map((r) => r.id)
        .sort();
    const shared = bases();
    assert.equal(shared.length, SHARED_BASE_SIZES.length, "the shared bases were adopted");
    for (const memoryMb of SHARED_BASE_SIZES) {
      const sb = await forge.sandboxes.spawn({ memoryMb });
      assert.ok(shared.includes(forge.sandboxes.get(sb.id).snapshot_id ?? ""), `the ${memoryMb} MiB spawn restored a shared base`);
      await sb.destroy();
    }
    assert.deepEqual(bases(), shared, "no base was made beside them (a key that differs boots cold and makes one)");
  });

  it("destroy stops QEMU and removes every file of the VM", async () => {
    const forge = await testForge();
    const sb = await forge.sandboxes.spawn();
    const { pid, dir } = sb.vm.info;
    assert.ok(alive(pid));
    assert.equal((await sb.exec("hostname")).stdout, `${sb.id}\n`);
    await sb.destroy();
    assert.equal(alive(pid), false);
    await assert.rejects(stat(dir), { code: "ENOENT" });
    await sb.destroy(); // idempotent
  });

  it("shuts the guest down on request: QEMU exits and destroy cleans up", async () => {
    const forge = await testForge();
    const sb = await forge.sandboxes.spawn({ memoryMb: 256 });
    const { pid, dir } = sb.vm.info;
    await sb.exec("echo persisted > /root/f && sync");
    assert.deepEqual(await sb.vm.guest.request<"shutdown">({ op: "shutdown" }), { ok: true });
    await sb.vm.exited;
    assert.equal(alive(pid), false);
    await sb.destroy();
    await assert.rejects(stat(dir), { code: "ENOENT" });
  });

  it("refuses an image that is not there before launching anything", async () => {
    const forge = await testForge();
    await assert.rejects(forge.sandboxes.spawn({ image: "forgevm/no-such" }), /image "forgevm\/no-such" is not in/);
  });
});
