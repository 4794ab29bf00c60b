// Pool mode with real VMs: sandboxes share a VM as separate users and cannot reach each other.
import assert from "node:assert/strict";
import { after, describe, it } from "node:test";
import type { Forge, Sandbox } from "../../src/index.js";
import type { PoolModeOptions } from "../../src/core/forge.js";
import { alive, assertNoVmLeft, openForge, removeAtExit, testDataDir, waitFor } from "../helpers.js";

const run = async (sb: Sandbox, cmd: string) => sb.exec(cmd);
const out = async (sb: Sandbox, cmd: string) => {
  const r = await sb.exec(cmd);
  assert.equal(r.exitCode, 0, `${cmd}: ${r.stderr}`);
  return r.stdout.trim();
};
const pool = (o: Partial<PoolModeOptions>): PoolModeOptions => ({
  enabled: true,
  maxVms: 1,
  maxUsersPerVm: 2,
  memoryMb: 512,
  vcpus: 1,
  overflow: "reject",
  queueTimeoutMs: 0,
  ...o,
});

// One Forge at a time, on one data directory (so the pool image's base snapshot is made once).
let forge: Forge | null = null;
const dataDir = testDataDir();
after(async () => {
  await forge?.close();
  removeAtExit(await dataDir);
});

describe("pool mode: two tenants in one VM", () => {
  let a: Sandbox;
  let b: Sandbox;

  it("seats both sandboxes in one shared VM that is not listed itself", async () => {
    forge = await openForge({ dataDir: await dataDir, pool: pool({}) });
    [a, b] = await Promise.all([forge.sandboxes.spawn(), forge.sandboxes.spawn()]);
    const ra = forge.sandboxes.get(a.id);
    assert.ok(ra.vm_id);
    assert.equal(forge.sandboxes.get(b.id).vm_id, ra.vm_id);
    assert.deepEqual(
      forge.sandboxes
        .list()
        .map((r) => r.id)
        .sort(),
      [a.id, b.id].sort(),
    );
    const st = forge.pools.status() as Record<string, unknown>;
    assert.equal(st.enabled, true);
    assert.equal(st.vms, 1);
    assert.equal(st.total_users, 2);
    assert.equal(st.max_users_per_vm, 2);
    assert.equal(st.available_slots, 0);
    assert.notEqual(await out(a, "id -u"), await out(b, "id -u"));
    assert.equal(await out(a, "pwd"), `/workspace/${a.id}`);
  });

  it("a tenant cannot read, list or write another tenant's workspace", async () => {
    await a.writeFile(`/workspace/${a.id}/secret.txt`, "a's secret");
    await out(a, "echo more > secret2.txt");
    assert.equal(await out(a, "cat secret.txt"), "a's secret");
    // control: b can use its own workspace
    await b.writeFile(`/workspace/${b.id}/mine.txt`, "b");
    assert.equal((await b.readFile(`/workspace/${b.id}/mine.txt`)).toString(), "b");
    // the walls
    assert.notEqual((await run(b, `cat /workspace/${a.id}/secret.txt`)).exitCode, 0);
    assert.notEqual((await run(b, `ls /workspace/${a.id}`)).exitCode, 0);
    await assert.rejects(b.readFile(`/workspace/${a.id}/secret.txt`), /EACCES|ermission/);
    await assert.rejects(b.listFiles(`/workspace/${a.id}`), /EACCES|ermission/);
    await assert.rejects(b.writeFile(`/workspace/${a.id}/planted.txt`, "x"), /EACCES|ermission/);
    await assert.rejects(b.remove(`/workspace/${a.id}/secret.txt`), /EACCES|ermission/);
    assert.deepEqual(await b.glob(`/workspace/${a.id}/*`), []);
    // files a tenant makes elsewhere are private too (umask 077)
    await out(a, "echo tmp > /tmp/a-tmp.txt");
    assert.notEqual((await run(b, "cat /tmp/a-tmp.txt")).exitCode, 0);
  });

  it("a tenant cannot see or signal another tenant's processes, nor become root", async () => {
    const pid = Number(await out(a, "nohup sleep 1000 >/dev/null 2>&1 & echo $!"));
    assert.ok(pid > 1);
    assert.notEqual((await run(b, `kill -9 ${pid}`)).exitCode, 0);
    assert.notEqual((await run(b, `ls /proc/${pid}`)).exitCode, 0, "hidden from /proc");
    assert.equal((await run(a, `kill -0 ${pid}`)).exitCode, 0, "still running");
    await assert.rejects(b.exec("id", { user: "root" }), { code: "BAD_REQUEST", message: /user/ });
    assert.notEqual((await run(b, "cat /etc/shadow")).exitCode, 0);
  });

  it("a full pool with overflow reject answers 503 at once", async () => {
    const t0 = Date.now();
    await assert.rejects(forge!.sandboxes.spawn(), { code: "UNAVAILABLE", message: /pool is full/ });
    assert.ok(Date.now() - t0 < 2000);
  });

  it("refuses a different image, fork and snapshot of a shared VM", async () => {
    await assert.rejects(forge!.sandboxes.spawn({ image: "alpine:latest" }), { code: "BAD_REQUEST", message: /image/ });
    await assert.rejects(forge!.snapshots.fork(a.id), { code: "BAD_REQUEST" });
    await assert.rejects(forge!.snapshots.take(a.id), { code: "BAD_REQUEST" });
  });

  it("a leaving tenant takes its processes, files and user with it; the VM stays for the other", async () => {
    const root = a.vm.guest;
    const uid = Number(await out(a, "id -u"));
    const hostPid = a.vm.info.pid;
    await a.destroy();
    const left = await root.execBuffered({ cmd: `pgrep -u ${uid}; ls /workspace; grep -c '^u${uid}:' /etc/passwd; ls /tmp` });
    const text = left.stdout.toString();
    assert.ok(!text.includes(a.id), text);
    assert.ok(!text.includes("a-tmp.txt"), text);
    assert.match(text, /^0$/m, "user removed");
    assert.ok(alive(hostPid));
    assert.equal(await out(b, "cat mine.txt"), "b");
    // the freed seat is usable, by a fresh user that finds nothing of the old one
    const c = await forge!.sandboxes.spawn();
    assert.notEqual(Number(await out(c, "id -u")), uid);
    assert.equal(forge!.sandboxes.get(c.id).vm_id, forge!.sandboxes.get(b.id).vm_id);
    assert.notEqual((await run(c, `ls /workspace/${a.id}`)).exitCode, 0);
    await c.destroy();
  });

  it("the shared VM is not reaped while a tenant is attached, though another one expires", async () => {
    const short = await forge!.sandboxes.spawn({ ttlMs: 500 });
    const hostPid = b.vm.info.pid;
    await waitFor(() => forge!.sandboxes.get(short.id).state === "destroyed", 10_000, "the short sandbox to expire");
    assert.ok(alive(hostPid));
    assert.equal(await out(b, "echo alive"), "alive");
    await b.destroy();
    await forge!.close();
    await assertNoVmLeft(forge!);
    forge = null;
  });
});

describe("pool mode: overflow queue", () => {
  it("a spawn waits for a seat, and gives up with 503 after the queue timeout", async () => {
    // The timeout leaves a loaded machine seconds to free a seat in the second half.
    forge = await openForge({ dataDir: await dataDir, pool: pool({ maxUsersPerVm: 1, overflow: "queue", queueTimeoutMs: 4000 }) });
    const first = await forge.sandboxes.spawn();
    // Waits the whole timeout, then 503.
    const t0 = Date.now();
    await assert.rejects(forge.sandboxes.spawn(), { code: "UNAVAILABLE", message: /waited 4000 ms/ });
    assert.ok(Date.now() - t0 >= 3900);
    // A waiting spawn gets the seat once the first sandbox leaves.
    const t1 = Date.now();
    const waiting = forge.sandboxes.spawn();
    setTimeout(() => void first.destroy(), 500);
    const second = await waiting;
    assert.ok(Date.now() - t1 >= 450);
    assert.equal(await out(second, "echo hi"), "hi");
    await second.destroy();
    await forge.close();
    await assertNoVmLeft(forge);
    forge = null;
  });
});
