// Snapshots, restores and forks with real VMs: what a copy carries over, what it must not share.
import assert from "node:assert/strict";
import { mkdtemp, readdir, readFile, rm, stat, truncate } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import type { Forge, Sandbox } from "../../src/index.js";
import { MAPPED_RAM } from "../../src/providers/qemu/ram-file.js";
import { alive, assertNoVmLeft, testForge, waitFor } from "../helpers.js";
import { writeBusyboxImage } from "../oci-writer.js";

const out = async (sb: Sandbox, cmd: string) => {
  const r = await sb.exec(cmd);
  assert.equal(r.exitCode, 0, `${cmd}: ${r.stderr}`);
  return r.stdout.trim();
};

let forge: Forge;
/** A snapshot row in any state (undefined once it is removed). */
const snapshotRow = (id: string) => forge.snapshots.list(["creating", "ready", "deleted"]).find((r) => r.id === id);
before(async () => {
  forge = await testForge();
});

after(async () => {
  await Promise.all(forge.sandboxes.list().map((r) => forge.sandboxes.destroy(r.id)));
  await assertNoVmLeft(forge);
  // Only kept snapshots remain on disk, with the (deleted) parents their disks are backed by:
  // no fork snapshot outlives its children.
  const onDisk = (await readdir(forge.paths.snapshotsDir)).sort();
  const kept = new Set(forge.snapshots.list().map((r) => r.id));
  for (const id of [...kept]) {
    for (let p = snapshotRow(id)?.parent_id; p && !kept.has(p); p = snapshotRow(p)?.parent_id) kept.add(p);
  }
  assert.deepEqual(onDisk, [...kept].sort());
  assert.ok(forge.snapshots.list().every((r) => r.kind !== "fork"));
});

describe("base snapshots", () => {
  it("spawns restore from the image's base snapshot, each with its own identity and the size asked for", async () => {
    const a = await forge.sandboxes.spawn();
    const b = await forge.sandboxes.spawn();
    for (const sb of [a, b]) {
      assert.equal(forge.sandboxes.get(sb.id).origin, "snapshot");
      assert.equal(sb.vm.info.restored, true);
      assert.equal(await out(sb, "hostname"), sb.id);
    }
    assert.notEqual(await out(a, "cat /etc/machine-id"), await out(b, "cat /etc/machine-id"));
    assert.notEqual(await out(a, "head -c 16 /dev/urandom | od -An -tx1"), await out(b, "head -c 16 /dev/urandom | od -An -tx1"));
    // The guest clock was set from the host's at restore, not left at the snapshot's.
    const skew = Math.abs(Number(await out(a, "date +%s")) - Date.now() / 1000);
    assert.ok(skew < 5, `guest clock is ${skew} s off`);
    // A different size gets its own snapshot: the guest sees the memory it was given.
    const small = await forge.sandboxes.spawn({ memoryMb: 256 });
    const memKb = (sb: Sandbox) => out(sb, "awk '/MemTotal/ {print $2}' /proc/meminfo").then(Number);
    assert.ok((await memKb(small)) < 256 * 1024 && (await memKb(small)) > 200 * 1024);
    assert.ok((await memKb(a)) > 256 * 1024);
    assert.notEqual(forge.sandboxes.get(small.id).snapshot_id, forge.sandboxes.get(a.id).snapshot_id);
    await Promise.all([a.destroy(), b.destroy(), small.destroy()]);
  });

  it("boots cold when the base snapshot is unusable, and stops using it", async () => {
    const first = await forge.sandboxes.spawn({ memoryMb: 256 });
    const base = snapshotRow(forge.sandboxes.get(first.id).snapshot_id!)!;
    await first.destroy();
    await truncate(join(base.dir, "state"), 100);
    const sb = await forge.sandboxes.spawn({ memoryMb: 256 });
    assert.equal(forge.sandboxes.get(sb.id).origin, "boot");
    assert.equal(await out(sb, "echo ok"), "ok");
    assert.equal(snapshotRow(base.id)?.state ?? "deleted", "deleted");
    await sb.destroy();
  });

  it("drops a base snapshot no spawn can use again once its replacement is made (the image changed)", async () => {
    const work = await mkdtemp(join(tmpdir(), "fvt-bases-"));
    try {
      const imageOf = async (marker: string) => {
        const dir = await mkdtemp(join(work, "img-"));
        await forge.images.import(await writeBusyboxImage(dir, ["sh", "cat"], [{ path: "marker", data: marker }]), { name: "local/base-churn:v1" });
      };
      await imageOf("one");
      const first = await forge.sandboxes.spawn({ image: "local/base-churn:v1", memoryMb: 256 });
      const old = snapshotRow(forge.sandboxes.get(first.id).snapshot_id!)!;
      assert.equal(old.kind, "base");
      await first.destroy();
      await imageOf("two");
      const second = await forge.sandboxes.spawn({ image: "local/base-churn:v1", memoryMb: 256 });
      assert.equal(await out(second, "cat /marker"), "two");
      assert.notEqual(forge.sandboxes.get(second.id).snapshot_id, old.id);
      assert.equal(snapshotRow(old.id), undefined, "the old base is gone, row and files");
      await assert.rejects(stat(old.dir));
      await second.destroy();
    } finally {
      await rm(work, { recursive: true, force: true });
    }
  });
});

// Every fork test runs twice: a parent whose RAM goes through the migration stream, and a
// forkable one whose RAM file is copied while it stops.
for (const forkable of [false, true])
  describe(forkable ? "fork of a forkable sandbox (RAM file copied)" : "fork", () => {
    let parent: Sandbox;
    let children: Sandbox[];
    let pauseMs: number;
    const NAME = forkable ? "forkfile" : "forkme";

    before(async () => {
      parent = await forge.sandboxes.spawn({ name: NAME, metadata: { name: NAME, team: "a" }, forkable });
      await out(parent, "echo before > /root/before.txt");
      // A process started before the fork: a counter that keeps ticking.
      await out(parent, "nohup sh -c 'i=0; while true; do i=$((i+1)); echo $i > /tmp/counter; sleep 0.1; done' >/dev/null 2>&1 & echo started");
      await waitFor(async () => (await parent.exec("cat /tmp/counter")).exitCode === 0, 5000, "the counter");
      const r = await forge.snapshots.fork(parent.id, { count: 2 });
      children = r.sandboxes;
      pauseMs = r.pauseMs;
    });

    it("makes running copies: processes started before keep running in every copy", async () => {
      assert.equal(children.length, 2);
      assert.ok(pauseMs > 0);
      for (const c of [parent, ...children]) {
        const n1 = Number(await out(c, "cat /tmp/counter"));
        await waitFor(async () => Number(await out(c, "cat /tmp/counter")) > n1, 5000, `the counter in ${c.id} to move on`);
        assert.equal(forge.sandboxes.get(c.id).state, "running");
      }
      for (const c of children) assert.equal(forge.sandboxes.get(c.id).origin, "fork");
    });

    it("copies get names of their own: NAME-1, NAME-2 (the metadata's too), and the name still finds the parent", () => {
      assert.deepEqual(
        children.map((c) => forge.sandboxes.get(c.id).name),
        [`${NAME}-1`, `${NAME}-2`],
      );
      assert.deepEqual(forge.sandboxes.get(children[1].id).metadata, { name: `${NAME}-2`, team: "a" });
      assert.equal(forge.sandboxes.get(NAME).id, parent.id);
      assert.equal(forge.sandboxes.get(`${NAME}-2`).id, children[1].id);
      assert.equal(!!parent.vm.info.forkable, forkable);
      for (const c of children) assert.equal(!!c.vm.info.forkable, false, "copies share the snapshot's pages unless asked");
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

    it("once a fork's copies are gone its snapshot is listed no more and its memory is freed; the parent pauses, resumes and forks on", async () => {
      const [temp] = (await forge.snapshots.fork(parent.id, { count: 1 })).sandboxes;
      const snap = snapshotRow(forge.sandboxes.get(temp.id).snapshot_id!)!;
      assert.ok(
        forge.snapshots.list().some((s) => s.id === snap.id),
        "listed while a copy restores from it",
      );
      await temp.destroy();
      assert.ok(!forge.snapshots.list().some((s) => s.id === snap.id), "an unnamed fork snapshot is not left behind");
      await assert.rejects(stat(join(snap.dir, "state")), "its memory is gone");
      // Its disk stays as a layer of the parent's, which pauses and resumes on it.
      await forge.sandboxes.pause(parent.id);
      parent = await forge.sandboxes.resume(parent.id);
      assert.equal(await out(parent, "cat /root/before.txt"), "before");
    });

    it("a copy from a second fork outlives its parent, and pauses and resumes with its files after the parent is gone", async () => {
      // The second fork's disk is an overlay on the parent's overlay since the first fork: the
      // chain must name files that stay, not the parent's own directory.
      const [late] = (await forge.snapshots.fork(parent.id, { count: 1 })).sandboxes;
      await out(late, "echo late > /root/late.txt");
      const { pid } = parent.vm.info;
      await parent.destroy();
      assert.equal(alive(pid), false);
      await forge.sandboxes.pause(late.id);
      const back = await forge.sandboxes.resume(late.id);
      assert.equal(await out(back, "cat /root/before.txt /root/after.txt /root/late.txt"), "before\nparent\nlate");
      await back.destroy();
    });

    it("a copy outlives its parent, and destroying it leaves nothing behind", async () => {
      assert.equal(forge.sandboxes.get(parent.id).state, "destroyed");
      assert.equal(await out(children[0], "cat /root/before.txt"), "before");
      const forkSnap = forge.sandboxes.get(children[0].id).snapshot_id!;
      assert.ok(await stat(snapshotRow(forkSnap)!.dir));
      await Promise.all(children.map((c) => c.destroy()));
      assert.equal(snapshotRow(forkSnap), undefined);
    });

    it("refuses a bad count and an unknown sandbox", async () => {
      await assert.rejects(forge.snapshots.fork("sb-00000000"), { code: "NOT_FOUND" });
      const sb = await forge.sandboxes.spawn();
      await assert.rejects(forge.snapshots.fork(sb.id, { count: 0 }), { code: "BAD_REQUEST", message: /count/ });
      await assert.rejects(forge.snapshots.fork(sb.id, { count: 1000 }), { code: "BAD_REQUEST", message: /count/ });
      await sb.destroy();
    });
  });

/** Resident and proportional KiB of the process's mapping of `file` (a child's view of its fork's RAM file), and the part of it private to the process. */
async function mappingKib(pid: number, file: string): Promise<{ rss: number; pss: number; private: number }> {
  const text = await readFile(`/proc/${pid}/smaps`, "utf8");
  const total = { rss: 0, pss: 0, private: 0 };
  for (const block of text.split(/\n(?=[0-9a-f]+-[0-9a-f]+ )/)) {
    if (!block.split("\n")[0].endsWith(` ${file}`)) continue;
    const field = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+)`, "m").exec(block)?.[1] ?? 0);
    total.rss += field("Rss");
    total.pss += field("Pss");
    total.private += field("Private_Clean") + field("Private_Dirty");
  }
  return total;
}

describe("copy-on-write forks", () => {
  it("a forkable parent stops about as long for 10 copies as for 1, and the copies share its pages", async () => {
    const parent = await forge.sandboxes.spawn({ forkable: true });
    // 40 MiB the guest touched (a tmpfs file lives in guest RAM), and a process that runs on.
    const sum = await out(parent, "head -c 41943040 /dev/urandom > /dev/shm/blob && md5sum /dev/shm/blob | cut -d' ' -f1");
    await out(parent, "nohup sh -c 'while true; do sleep 1; done' >/dev/null 2>&1 & echo $! > /tmp/pid");
    const one = await forge.snapshots.fork(parent.id, { count: 1 });
    // The stop saves devices and copies the touched RAM, whatever the count (the goal is ≤ 1.3×;
    // a noisy host's scheduling moves a copy of ~100 MiB by up to 150 ms here). A fork through the
    // migration stream stops the parent ~2.9 s for 10 copies against ~0.4 s for 1. The suite's
    // heaviest neighbours (a desktop VM) have stalled one stop by ~400 ms, so the ten-copy fork is
    // tried up to three times and its best stop counts: one that grew with the count fails each.
    const limit = Math.max(one.pauseMs * 1.3, one.pauseMs + 150);
    let ten = await forge.snapshots.fork(parent.id, { count: 10 });
    const tries = [ten.pauseMs];
    while (ten.pauseMs > limit && tries.length < 3) {
      await Promise.all(ten.sandboxes.map((c) => c.destroy()));
      ten = await forge.snapshots.fork(parent.id, { count: 10 });
      tries.push(ten.pauseMs);
    }
    assert.ok(ten.pauseMs <= limit, `parent pause: ${one.pauseMs} ms for 1 copy, ${tries.join(", ")} ms for 10`);
    for (const c of [one.sandboxes[0], ten.sandboxes[0], ten.sandboxes[9]]) {
      assert.equal(await out(c, "md5sum /dev/shm/blob | cut -d' ' -f1"), sum);
      assert.equal(await out(c, "kill -0 $(cat /tmp/pid) && echo alive"), "alive");
    }
    // Each copy maps the fork's RAM file copy-on-write: the 40 MiB are in every copy's resident
    // set, but counted once across the ten (proportional set size), and what is private to a
    // copy is only what it wrote since.
    await Promise.all(ten.sandboxes.map((c) => out(c, "cat /dev/shm/blob > /dev/null")));
    // Each maps it by the link in its own directory (the same inode as the snapshot's file).
    const file = join(snapshotRow(forge.sandboxes.get(ten.sandboxes[0].id).snapshot_id!)!.dir, "memory");
    const inode = (await stat(file)).ino;
    const maps = await Promise.all(
      ten.sandboxes.map(async (c) => {
        const link = join(c.vm.info.dir, MAPPED_RAM);
        assert.equal((await stat(link)).ino, inode, "the copy maps the fork's RAM file");
        return mappingKib(c.vm.info.pid, link);
      }),
    );
    const rss = Math.min(...maps.map((m) => m.rss));
    const pss = maps.reduce((a, m) => a + m.pss, 0);
    const priv = maps.map((m) => m.private).sort((a, b) => a - b)[5];
    assert.ok(rss > 40 * 1024, `each copy has the blob resident (${rss} KiB)`);
    assert.ok(pss < 2 * rss, `the ten copies' RAM mappings count ${pss} KiB together, against ${rss} KiB resident in each`);
    assert.ok(priv < 8 * 1024, `a copy's own pages of its RAM mapping: ${priv} KiB (median)`);
    await Promise.all([...one.sandboxes, ...ten.sandboxes].map((c) => c.destroy()));
    await parent.destroy();
  });

  it("a forkable sandbox's pause hands its RAM file over and its resume takes it back: processes, memory and files as they were", async () => {
    const sb = await forge.sandboxes.spawn({ forkable: true });
    const sum = await out(sb, "head -c 20971520 /dev/urandom > /dev/shm/blob && md5sum /dev/shm/blob | cut -d' ' -f1");
    const pid = await out(sb, "nohup sh -c 'while true; do sleep 1; done' >/dev/null 2>&1 & echo $!");
    await forge.sandboxes.pause(sb.id);
    const snap = snapshotRow(forge.sandboxes.get(sb.id).snapshot_id!)!;
    assert.equal(snap.format, "mapped");
    // The stream holds the devices only: the RAM is the file beside it.
    assert.ok((await stat(join(snap.dir, "state"))).size < 4 * 1048576);
    assert.ok((await stat(join(snap.dir, "memory"))).blocks * 512 >= 20 * 1048576);
    const back = await forge.sandboxes.resume(sb.id);
    assert.equal(back.vm.info.forkable, true);
    assert.equal(await out(back, "md5sum /dev/shm/blob | cut -d' ' -f1"), sum);
    assert.equal(await out(back, `kill -0 ${pid} && echo alive`), "alive");
    // And it forks as fast as before (its RAM file is its own again).
    const [copy] = (await forge.snapshots.fork(back.id)).sandboxes;
    assert.equal(await out(copy, "md5sum /dev/shm/blob | cut -d' ' -f1"), sum);
    await copy.destroy();
    await back.destroy();
  });
});

describe("forkable copies", () => {
  it("a named snapshot (RAM in its stream) restores into a forkable sandbox, which forks by its RAM file", async () => {
    const src = await forge.sandboxes.spawn();
    await out(src, "echo kept > /root/kept.txt");
    const snap = await forge.snapshots.take(src.id, "to-forkable");
    await src.destroy();
    const [copy] = await forge.snapshots.restore(snap.id, { forkable: true });
    assert.equal(copy.vm.info.forkable, true);
    assert.equal(forge.sandboxes.get(copy.id).forkable, 1);
    const [grandchild] = (await forge.snapshots.fork(copy.id)).sandboxes;
    assert.equal(await out(grandchild, "cat /root/kept.txt"), "kept");
    assert.equal(snapshotRow(forge.sandboxes.get(grandchild.id).snapshot_id!)!.format, "mapped");
    await Promise.all([grandchild.destroy(), copy.destroy()]);
    await forge.snapshots.remove(snap.id);
  });
});

describe("named snapshots", () => {
  it("restores copies of a sandbox as it was; deleting the snapshot waits for them", async () => {
    const src = await forge.sandboxes.spawn();
    await out(src, "echo one > /root/state.txt");
    const snap = await forge.snapshots.take(src.id, "test-ready");
    assert.equal(snap.name, "test-ready");
    assert.equal(snap.kind, "sandbox");
    assert.ok(snap.size_bytes > 0);
    await assert.rejects(forge.snapshots.take(src.id, "test-ready"), { code: "CONFLICT" });
    await out(src, "echo two > /root/state.txt");
    const [r1, r2] = await forge.snapshots.restore("test-ready", { count: 2 });
    assert.equal(await out(r1, "cat /root/state.txt"), "one");
    assert.equal(await out(r2, "hostname"), r2.id);
    assert.equal(await out(src, "cat /root/state.txt"), "two");
    await forge.snapshots.remove("test-ready");
    assert.throws(() => forge.snapshots.get("test-ready"), { code: "NOT_FOUND" });
    assert.ok(await stat(snap.dir), "files stay while restored sandboxes run");
    assert.equal(await out(r1, "cat /root/state.txt"), "one");
    await Promise.all([r1.destroy(), r2.destroy(), src.destroy()]);
    await assert.rejects(stat(snap.dir), { code: "ENOENT" });
  });
});

describe("many snapshots of one sandbox", () => {
  // Past eight, every snapshot, fork, pause and stop of the sandbox used to fail; past twelve layers
  // the chain is collapsed (providers/qemu/disk-layers.ts). bench/layers.ts goes to 50 and 50.
  it("20 snapshots and 20 forks of one sandbox, then a pause, a stop, a start: each answers, files intact, processes there", async () => {
    const sb0 = await forge.sandboxes.spawn({ memoryMb: 128, forkable: true });
    await sb0.exec("nohup sh -c 'exec sleep 3600' >/dev/null 2>&1 &");
    const pid = await out(sb0, "pgrep -x sleep");
    for (let i = 0; i < 20; i++) {
      // Each one moves the sandbox onto a new disk layer; the snapshot itself goes at once.
      await sb0.writeFile(`/root/s${i}`, `snapshot ${i}`);
      const snap = await forge.snapshots.take(sb0.id);
      await forge.snapshots.remove(snap.id);
    }
    for (let i = 0; i < 20; i++) {
      await sb0.writeFile(`/root/f${i}`, `fork ${i}`);
      const { sandboxes } = await forge.snapshots.fork(sb0.id);
      if (i % 10 === 9) assert.equal(await out(sandboxes[0], `cat /root/f${i} /root/s${i}`), `fork ${i}snapshot ${i}`);
      await sandboxes[0].destroy();
    }
    await forge.sandboxes.pause(sb0.id);
    let sb = await forge.sandboxes.use(sb0.id, "test");
    assert.equal(await out(sb, `kill -0 ${pid} && echo alive`), "alive", "its process, through 40 layers and a pause");
    await forge.sandboxes.stop(sb.id, 1000);
    sb = await forge.sandboxes.start(sb.id);
    assert.equal(await out(sb, "cat /root/s0 /root/s19 /root/f0 /root/f19"), "snapshot 0snapshot 19fork 0fork 19");
    await forge.sandboxes.destroy(sb.id);
  });
});
