// Resource walls with real VMs: a guest that fills its disk hits its own quota, not the host's.
import assert from "node:assert/strict";
import { readdir, stat, statfs } from "node:fs/promises";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { assertNoVmLeft, testForge } from "./helpers.js";

after(async () => {
  await assertNoVmLeft(await testForge());
});

describe("disk quota", () => {
  it("a guest filling its disk gets ENOSPC; the overlay stays within the quota and the host keeps its space", async () => {
    const forge = await testForge();
    const DISK_MB = 600;
    const sb = await forge.spawn({ diskMb: DISK_MB });
    const dir = sb.vm.info.dir;
    const hostFree = async () => {
      const s = await statfs(dir);
      return s.bavail * s.bsize;
    };
    const before = await hostFree();
    try {
      const r = await sb.exec("dd if=/dev/zero of=/root/fill bs=1M 2>&1; echo dd=$?; sync; df -m / | tail -1", { timeoutMs: 120_000 });
      assert.match(r.stdout, /No space left on device/);
      assert.match(r.stdout, /^dd=1$/m);
      const avail = Number(r.stdout.trim().split("\n").at(-1)!.split(/\s+/)[3]);
      assert.ok(avail <= 1, `the guest's disk is full (${avail} MiB available)`);
      // The overlay holds only what the guest wrote, bounded by the quota.
      let overlay = 0;
      for (const f of await readdir(dir)) if (f.endsWith(".qcow2")) overlay += (await stat(join(dir, f))).blocks * 512;
      assert.ok(overlay <= DISK_MB * 1024 * 1024 * 1.05, `overlay uses ${overlay} bytes for a ${DISK_MB} MiB disk`);
      assert.ok(before - (await hostFree()) <= DISK_MB * 1024 * 1024 * 1.05, "the host lost no more than the quota");
      // The sandbox still works once space is freed.
      assert.equal((await sb.exec("rm /root/fill; echo ok")).stdout, "ok\n");
    } finally {
      await sb.destroy();
    }
  });
});
