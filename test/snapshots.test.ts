// Snapshots, restores and forks with real VMs: what a copy carries over, what it must not share.
import assert from "node:assert/strict";
import { mkdtemp, readdir, rm, stat, truncate } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import type { Forge, Sandbox } from "../src/index.js";
import { alive, assertNoVmLeft, testForge, waitFor } from "./helpers.js";
import { writeBusyboxImage } from "./oci-writer.js";

const out = async (sb: Sandbox, cmd: string) => {
  const r = await sb.exec(cmd);
  assert.equal(r.exitCode, 0, `${cmd}: ${r.stderr}`);
  return r.stdout.trim();
};

let forge: Forge;
/** A snapshot row in any state (undefined once it is removed). */
const snapshotRow = (id: string) => forge.listSnapshots(["creating", "ready", "deleted"]).find((r) => r.id === id);
before(async () => {
  forge = await testForge();
});

after(async () => {
  await Promise.all(forge.list().map((r) => forge.destroy(r.id)));
  await assertNoVmLeft(forge);
  // Only kept snapshots remain on disk, with the (deleted) parents their disks are backed by:
  // no fork snapshot outlives its children.
  const onDisk = (await readdir(forge.paths.snapshotsDir)).sort();
  const kept = new Set(forge.listSnapshots().map((r) => r.id));
  for (const id of [...kept]) {
    for (let p = snapshotRow(id)?.parent_id; p && !kept.has(p); p = snapshotRow(p)?.parent_id) kept.add(p);
  }
  assert.deepEqual(onDisk, [...kept].sort());
  assert.ok(forge.listSnapshots().every((r) => r.kind !== "fork"));
});

describe("base snapshots", () => {
  it("spawns restore from the image's base snapshot, each with its own identity and the size asked for", async () => {
    const a = await forge.spawn({ memoryMb: 384 });
    const b = await forge.spawn({ memoryMb: 384 });
    for (const sb of [a, b]) {
      assert.equal(forge.get(sb.id).origin, "snapshot");
      assert.equal(sb.vm.info.restored, true);
      assert.equal(await out(sb, "hostname"), sb.id);
    }
    assert.notEqual(await out(a, "cat /etc/machine-id"), await out(b, "cat /etc/machine-id"));
    assert.notEqual(await out(a, "head -c 16 /dev/urandom | od -An -tx1"), await out(b, "head -c 16 /dev/urandom | od -An -tx1"));
    // The guest clock was set from the host's at restore, not left at the snapshot's.
    const skew = Math.abs(Number(await out(a, "date +%s")) - Date.now() / 1000);
    assert.ok(skew < 5, `guest clock is ${skew} s off`);
    // A different size gets its own snapshot: the guest sees the memory it was given.
    const small = await forge.spawn({ memoryMb: 256 });
    const memKb = (sb: Sandbox) => out(sb, "awk '/MemTotal/ {print $2}' /proc/meminfo").then(Number);
    assert.ok((await memKb(small)) < 256 * 1024 && (await memKb(small)) > 200 * 1024);
    assert.ok((await memKb(a)) > 256 * 1024);
    assert.notEqual(forge.get(small.id).snapshot_id, forge.get(a.id).snapshot_id);
    await Promise.all([a.destroy(), b.destroy(), small.destroy()]);
  });

  it("boots cold when the base snapshot is unusable, and stops using it", async () => {
    const first = await forge.spawn({ memoryMb: 320 });
    const base = snapshotRow(forge.get(first.id).snapshot_id!)!;
    await first.destroy();
    await truncate(join(base.dir, "state"), 100);
    const sb = await forge.spawn({ memoryMb: 320 });
    assert.equal(forge.get(sb.id).origin, "boot");
    assert.equal(await out(sb, "echo ok"), "ok");
    assert.equal(snapshotRow(base.id)?.state ?? "deleted", "deleted");
    await sb.destroy();
  });

  it("drops a base snapshot no spawn can use again once its replacement is made (the image changed)", async () => {
    const work = await mkdtemp(join(tmpdir(), "fvt-bases-"));
    try {
      const imageOf = async (marker: string) => {
        const dir = await mkdtemp(join(work, "img-"));
        await forge.importImage(await writeBusyboxImage(dir, ["sh", "cat"], [{ path: "marker", data: marker }]), { name: "local/base-churn:v1" });
      };
      await imageOf("one");
      const first = await forge.spawn({ image: "local/base-churn:v1", memoryMb: 256 });
      const old = snapshotRow(forge.get(first.id).snapshot_id!)!;
      assert.equal(old.kind, "base");
      await first.destroy();
      await imageOf("two");
      const second = await forge.spawn({ image: "local/base-churn:v1", memoryMb: 256 });
      assert.equal(await out(second, "cat /marker"), "two");
      assert.notEqual(forge.get(second.id).snapshot_id, old.id);
      assert.equal(snapshotRow(old.id), undefined, "the old base is gone, row and files");
      await assert.rejects(stat(old.dir));
      await second.destroy();
    } finally {
      await rm(work, { recursive: true, force: true });
    }
  });
});

describe("fork", () => {
  let parent: Sandbox;
  let children: Sandbox[];
  let pauseMs: number;

  before(async () => {
    parent = await forge.spawn({ name: "forkme", metadata: { name: "forkme", team: "a" } });
    await out(parent, "echo before > /root/before.txt");
    // A process started before the fork: a counter that keeps ticking.
    await out(parent, "nohup sh -c 'i=0; while true; do i=$((i+1)); echo $i > /tmp/counter; sleep 0.1; done' >/dev/null 2>&1 & echo started");
    await waitFor(async () => (await parent.exec("cat /tmp/counter")).exitCode === 0, 5000, "the counter");
    const r = await forge.fork(parent.id, { count: 2 });
    children = r.sandboxes;
    pauseMs = r.pauseMs;
  });

  it("makes running copies: processes started before keep running in every copy", async () => {
    assert.equal(children.length, 2);
    assert.ok(pauseMs > 0);
    for (const c of [parent, ...children]) {
      const n1 = Number(await out(c, "cat /tmp/counter"));
      await waitFor(async () => Number(await out(c, "cat /tmp/counter")) > n1, 5000, `the counter in ${c.id} to move on`);
      assert.equal(forge.get(c.id).state, "running");
    }
    for (const c of children) assert.equal(forge.get(c.id).origin, "fork");
  });

  it("copies get names of their own: NAME-1, NAME-2 (the metadata's too), and the name still finds the parent", () => {
    assert.deepEqual(
      children.map((c) => forge.get(c.id).name),
      ["forkme-1", "forkme-2"],
    );
    assert.deepEqual(forge.get(children[1].id).metadata, { name: "forkme-2", team: "a" });
    assert.equal(forge.get("forkme").id, parent.id);
    assert.equal(forge.get("forkme-2").id, children[1].id);
  });

  it("files written before are in every copy; writes after are private", async () => {
    for (const c of children) assert.equal(await out(c, "cat /root/before.txt"), "before");
    await out(parent, "echo parent > /root/after.txt");
    await out(children[0], "echo child0 > /root/after.txt");
    assert.equal(await out(parent, "cat /root/after.txt"), "parent");
    assert.equal(await out(children[0], "cat /root/after.txt"), "child0");
    assert.notEqual((await children[1].exec("cat /root/after.txt")).exitCode, 0);
  });

  it("gives every copy a new identity: hostname, machine id, random bytes", async () => {
    const all = [parent, ...children];
    const hosts = await Promise.all(all.map((c) => out(c, "hostname")));
    assert.deepEqual(
      hosts,
      all.map((c) => c.id),
    );
    const ids = await Promise.all(all.map((c) => out(c, "cat /etc/machine-id")));
    assert.equal(new Set(ids).size, 3);
    const rnd = await Promise.all(all.map((c) => out(c, "head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n'")));
    assert.equal(new Set(rnd).size, 3);
  });

  it("a copy outlives its parent, and destroying it leaves nothing behind", async () => {
    const { pid } = parent.vm.info;
    await parent.destroy();
    assert.equal(alive(pid), false);
    assert.equal(await out(children[0], "cat /root/before.txt"), "before");
    const forkSnap = forge.get(children[0].id).snapshot_id!;
    assert.ok(await stat(snapshotRow(forkSnap)!.dir));
    await Promise.all(children.map((c) => c.destroy()));
    assert.equal(snapshotRow(forkSnap), undefined);
  });

  it("refuses a bad count and an unknown sandbox", async () => {
    await assert.rejects(forge.fork("sb-00000000"), { code: "NOT_FOUND" });
    const sb = await forge.spawn();
    await assert.rejects(forge.fork(sb.id, { count: 0 }), { code: "BAD_REQUEST", message: /count/ });
    await assert.rejects(forge.fork(sb.id, { count: 1000 }), { code: "BAD_REQUEST", message: /count/ });
    await sb.destroy();
  });
});

describe("named snapshots", () => {
  it("restores copies of a sandbox as it was; deleting the snapshot waits for them", async () => {
    const src = await forge.spawn();
    await out(src, "echo one > /root/state.txt");
    const snap = await forge.snapshot(src.id, "test-ready");
    assert.equal(snap.name, "test-ready");
    assert.equal(snap.kind, "sandbox");
    assert.ok(snap.size_bytes > 0);
    await assert.rejects(forge.snapshot(src.id, "test-ready"), { code: "CONFLICT" });
    await out(src, "echo two > /root/state.txt");
    const [r1, r2] = await forge.restore("test-ready", { count: 2 });
    assert.equal(await out(r1, "cat /root/state.txt"), "one");
    assert.equal(await out(r2, "hostname"), r2.id);
    assert.equal(await out(src, "cat /root/state.txt"), "two");
    await forge.deleteSnapshot("test-ready");
    assert.throws(() => forge.getSnapshot("test-ready"), { code: "NOT_FOUND" });
    assert.ok(await stat(snap.dir), "files stay while restored sandboxes run");
    assert.equal(await out(r1, "cat /root/state.txt"), "one");
    await Promise.all([r1.destroy(), r2.destroy(), src.destroy()]);
    await assert.rejects(stat(snap.dir), { code: "ENOENT" });
  });
});
