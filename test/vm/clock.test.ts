// Guest clocks within a second of the host's: a guest with two vCPUs keeps time with its TSC
// (under TCG the kernel used to find its vCPUs' TSCs unsynchronized and fall back to jiffies,
// which lose time under load), a guest clock set wrong is put right by the server, and guests
// restored from a snapshot, resumed from a pause and forked are right at their first exec. The
// long run under host load is bench/clock.ts.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { Forge } from "../../src/index.js";
import type { Sandbox } from "../../src/core/guest/sandbox.js";
import { assertNoVmLeft, openForge, waitFor } from "../helpers.js";

let forge: Forge;

before(async () => {
  // The server's keeper every 2 s rather than 30, so the test need not wait.
  forge = await openForge({ clockEveryMs: 2000 });
});

after(async () => {
  await forge?.close();
  if (forge) await assertNoVmLeft(forge);
});

/** The guest's clock minus the host's, in ms, at the middle of the exec that read it. */
async function offsetMs(sb: Sandbox): Promise<number> {
  const t0 = Date.now();
  const r = await sb.exec("date +%s%N");
  const t1 = Date.now();
  return Number(BigInt(r.stdout.trim()) / 1_000_000n) - (t0 + t1) / 2;
}

describe("guest clocks", () => {
  it("a guest with two vCPUs keeps time with its TSC, not with jiffies", async () => {
    const sb = await forge.sandboxes.spawn({ vcpus: 2, memoryMb: 256 });
    const r = await sb.exec("cat /sys/devices/system/clocksource/clocksource0/current_clocksource");
    assert.ok(["tsc", "kvm-clock"].includes(r.stdout.trim()), `clocksource ${r.stdout.trim()}`);
    assert.ok(Math.abs(await offsetMs(sb)) < 1000);
    await sb.destroy();
  });

  it("a guest clock set an hour wrong is put right by the server, and a running guest is not stepped for the message's own delay", async () => {
    const sb = await forge.sandboxes.spawn({ memoryMb: 256 });
    await sb.exec("date -s @$(( $(date +%s) - 3600 )) >/dev/null");
    assert.ok((await offsetMs(sb)) < -3000_000);
    await waitFor(async () => Math.abs(await offsetMs(sb)) < 1000, 15_000, "the guest clock to be put right");
    await sb.destroy();
  });

  it("guests restored from a snapshot, resumed from a pause and forked are within a second of the host at their first exec", async () => {
    const sb = await forge.sandboxes.spawn({ memoryMb: 256, forkable: true });
    const snap = await forge.snapshots.take(sb.id);
    // Time passes while the snapshot and the pause wait: a guest that woke with its old clock would be behind by it.
    await new Promise((r) => setTimeout(r, 3000));
    const [restored] = await forge.snapshots.restore(snap.id);
    assert.ok(Math.abs(await offsetMs(forge.sandboxes.running(restored.id))) < 1000, "restored");
    await forge.sandboxes.pause(sb.id);
    await new Promise((r) => setTimeout(r, 3000));
    const resumed = await forge.sandboxes.use(sb.id, "test");
    assert.ok(Math.abs(await offsetMs(resumed)) < 1000, "resumed");
    const fork = await forge.snapshots.fork(sb.id);
    assert.ok(Math.abs(await offsetMs(fork.sandboxes[0])) < 1000, "forked");
    for (const id of [sb.id, restored.id, fork.sandboxes[0].id]) await forge.sandboxes.destroy(id);
    await forge.snapshots.remove(snap.id);
  });
});
