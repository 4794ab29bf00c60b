// Boot failures and teardown: every path must leave no process and no file behind.
import assert from "node:assert/strict";
import { mkdtemp, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { BootError, type Forge } from "../src/index.js";
import { QemuProvider } from "../src/providers/qemu/qemu-provider.js";
import { alive, assertNoVmLeft, testForge } from "./helpers.js";

/** The VM layer under the forge, on its data directory. */
let raw: QemuProvider | null = null;
const provider = (forge: Forge) => (raw ??= new QemuProvider({ paths: forge.paths }));

after(async () => {
  await assertNoVmLeft(await testForge());
});

describe("lifecycle", () => {
  it("destroy stops QEMU and removes every file of the VM", async () => {
    const forge = await testForge();
    const sb = await forge.spawn();
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
    const sb = await forge.spawn({ memoryMb: 256 });
    const { pid, dir } = sb.vm.info;
    await sb.exec("echo persisted > /root/f && sync");
    assert.deepEqual(await sb.vm.channel.request<"shutdown">({ op: "shutdown" }), { ok: true });
    await sb.vm.exited;
    assert.equal(alive(pid), false);
    await sb.destroy();
    await assert.rejects(stat(dir), { code: "ENOENT" });
  });

  it("fails with a deadline error when the guest never says hello", async () => {
    const forge = await testForge();
    // -S: QEMU starts with the CPU stopped, so the agent never runs.
    const err = await provider(forge)
      .spawn({ id: "test-silent", memoryMb: 128, vcpus: 1, bootTimeoutMs: 1500, qemuArgs: ["-S"] })
      .then(() => null, (e) => e);
    assert.ok(err instanceof BootError, String(err));
    assert.match(err.message, /did not say hello within 1500 ms/);
    await assert.rejects(stat(join(forge.paths.vmsDir, "test-silent")), { code: "ENOENT" });
  });

  it("fails with the console tail when the root filesystem is unusable", async () => {
    const forge = await testForge();
    const dir = await mkdtemp(join(tmpdir(), "fvm-bad-"));
    const bad = join(dir, "bad.ext4");
    await writeFile(bad, Buffer.alloc(8 * 1024 * 1024)); // zeros: no filesystem
    try {
      const err = await provider(forge)
        .spawn({ id: "test-badroot", rootfs: bad, memoryMb: 128, vcpus: 1, bootTimeoutMs: 60000 })
        .then(() => null, (e) => e);
      assert.ok(err instanceof BootError, String(err));
      assert.match(err.message, /QEMU exited \(0\) before the agent said hello/);
      assert.match(err.consoleTail, /cannot mount root filesystem \/dev\/vda/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("rejects bad VM specs before launching anything", async () => {
    const forge = await testForge();
    await assert.rejects(provider(forge).spawn({ id: "Bad Id", memoryMb: 128, vcpus: 1 }), /id "Bad Id"/);
    await assert.rejects(provider(forge).spawn({ id: "ok", memoryMb: 1, vcpus: 1 }), /memoryMb must be/);
    await assert.rejects(provider(forge).spawn({ id: "ok", memoryMb: 128, vcpus: 0 }), /vcpus must be/);
    await assert.rejects(forge.spawn({ image: "forgevm/no-such" }), /image "forgevm\/no-such" is not in/);
  });
});
