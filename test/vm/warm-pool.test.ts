// Warm pools with real VMs: claims are ready sandboxes, invisible until claimed, never reused.
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { after, before, describe, it } from "node:test";
import { WarmPools, type PoolTarget } from "../../src/core/pools/warm-pool.js";
import type { Forge, Sandbox } from "../../src/index.js";
import type { Vm } from "../../src/providers/provider.js";
import { assertNoVmLeft, openForge, waitFor } from "../helpers.js";

const out = async (sb: Sandbox, cmd: string) => (await sb.exec(cmd)).stdout.trim();
/** Niceness of a process's main thread, from /proc (field 19 of stat). */
const niceOf = async (pid: number) => Number((await readFile(`/proc/${pid}/stat`, "utf8")).split(") ")[1].split(" ")[16]);

let forge: Forge;
before(async () => {
  forge = await openForge({ warmPool: { size: 2, memoryBudgetMb: 4096 } });
});
after(async () => {
  await forge.close();
  await assertNoVmLeft(forge);
});

const ready = () => forge.pools.warm().reduce((n, p) => n + p.ready, 0);

describe("warm pool", () => {
  it("fills in the background with VMs nobody can see", async () => {
    await waitFor(() => ready() === 2, 120_000, "the pool to fill");
    assert.deepEqual(forge.sandboxes.list(), []);
    assert.equal(forge.pools.warm()[0].size, 2);
  });

  it("a spawn claims a warm VM: running at once, normal priority, its own hostname", async () => {
    const sb = await forge.sandboxes.spawn();
    assert.equal(forge.sandboxes.get(sb.id).origin, "pool");
    assert.equal(forge.sandboxes.get(sb.id).state, "running");
    assert.deepEqual(
      forge.sandboxes.list().map((r) => r.id),
      [sb.id],
    );
    assert.equal(await out(sb, "hostname"), sb.id);
    assert.equal(await niceOf(sb.vm.info.pid), 0);
    await waitFor(() => ready() === 2, 60_000, "the pool to refill");
    await sb.destroy();
  });

  it("a claimed VM carries nothing from an earlier user", async () => {
    const first = await forge.sandboxes.spawn();
    await out(first, "echo secret > /root/secret.txt; echo secret > /tmp/secret.txt");
    await out(first, "nohup sleep 1000 >/dev/null 2>&1 & echo");
    const firstMachine = await out(first, "cat /etc/machine-id");
    await first.destroy();
    for (let i = 0; i < 3; i++) {
      await waitFor(() => ready() >= 1, 60_000, "a warm VM");
      const next = await forge.sandboxes.spawn();
      assert.equal(forge.sandboxes.get(next.id).origin, "pool");
      assert.notEqual(next.id, first.id);
      assert.notEqual((await next.exec("cat /root/secret.txt /tmp/secret.txt")).exitCode, 0);
      assert.notEqual((await next.exec("pgrep -x sleep")).exitCode, 0);
      assert.notEqual(await out(next, "cat /etc/machine-id"), firstMachine);
      await next.destroy();
    }
  });

  it("a template's pool_size keeps its own pool, made after its setup commands", async () => {
    assert.ok(await forge.templates.create({ name: "test-warm-tpl", setup: ["echo prepared > /root/setup.txt"], pool_size: 1, memory_mb: 256 }));
    try {
      await waitFor(() => forge.pools.warm().some((p) => p.pool === "template:test-warm-tpl" && p.ready === 1), 120_000, "the template pool");
      const sb = await forge.sandboxes.spawn({ template: "test-warm-tpl" });
      assert.equal(forge.sandboxes.get(sb.id).origin, "pool");
      assert.equal(await out(sb, "cat /root/setup.txt"), "prepared");
      assert.equal(sb.vm.info.memoryMb, 256);
      await sb.destroy();
    } finally {
      await forge.templates.remove("test-warm-tpl");
    }
    assert.ok(!forge.pools.warm().some((p) => p.pool === "template:test-warm-tpl"));
  });
});

describe("warm pool bookkeeping", () => {
  // A stand-in VM: enough for the pool's accounting, which is what these tests check.
  const fakeVm = (id: string) => {
    let destroyed = false;
    return {
      vm: {
        info: { id },
        guest: {
          get isOpen() {
            return !destroyed;
          },
        },
        destroy: async () => void (destroyed = true),
      } as unknown as Vm,
      snapshotId: "snap-x",
      destroyed: () => destroyed,
    };
  };

  it("stays within the memory budget and refills after a claim", async () => {
    let made = 0;
    const pools = new WarmPools(1000, () => {});
    const target: PoolTarget = { key: "k", label: "l", size: 5, memoryMb: 300, make: async () => fakeVm(`v${made++}`) };
    await pools.configure([target]);
    await pools.refill();
    assert.equal(pools.status()[0].ready, 3); // 3 × 300 MiB fit in 1000, a 4th does not
    assert.ok(pools.claim("k"));
    await pools.refill();
    assert.equal(pools.status()[0].ready, 3);
    assert.equal(made, 4);
    assert.equal(pools.claim("other"), null);
    await pools.close();
    assert.deepEqual(pools.status(), []);
  });

  it("drops VMs that died while waiting, and releases a pool that is no longer wanted", async () => {
    const vms = [fakeVm("a"), fakeVm("b")];
    let i = 0;
    const pools = new WarmPools(10_000, () => {});
    await pools.configure([{ key: "k", label: "l", size: 2, memoryMb: 100, make: async () => vms[i++] ?? fakeVm(`x${i}`) }]);
    await pools.refill();
    await vms[0].vm.destroy(); // its QEMU died
    const got = pools.claim("k");
    assert.equal(got?.vm.info.id, "b");
    await pools.configure([]);
    assert.deepEqual(pools.status(), []);
    await pools.close();
  });
});
