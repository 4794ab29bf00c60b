// The cluster catalogue on a real PostgreSQL (started by the test in a temporary directory):
// migrations run once however many processes open it at once; heartbeats make and refresh nodes;
// a node without one is marked down; placements locate sandboxes; a returning node reconciles;
// events are kept once each in one order; templates record writes and deletions; the pool
// reconnects after the database restarts.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { Catalogue, type NodeReport } from "../../src/store/catalogue.js";
import { startPostgres, type TestPostgres } from "../postgres.js";

let db: TestPostgres;
let cat: Catalogue;
before(async () => {
  db = await startPostgres();
  cat = await Catalogue.open(db.url);
});
after(async () => {
  await cat?.close();
  db?.stop();
});

const report = (id: string, free = 4096): NodeReport => ({
  id,
  url: `http://127.0.0.1:1/${id}`,
  memory_mb: 8192,
  vcpus: 4,
  free_memory_mb: free,
  running: 0,
  used_vcpus: 0,
  images: ["forgevm/debian:bookworm"],
  warm: [],
  version: "test",
});

/** Waits past the margin a heartbeat's figures are given (see catalogue.ts HELD): a heartbeat after this counts what was answered before. */
const settle = () => new Promise((r) => setTimeout(r, 600));

describe("catalogue", () => {
  it("migrates once, whoever opens it at the same time", async () => {
    const more = await Promise.all([1, 2, 3].map(() => Catalogue.open(db.url)));
    await Promise.all(more.map((c) => c.close()));
    assert.deepEqual(await cat.nodes(), []);
  });

  it("heartbeats make and refresh nodes; one without is marked down, and up again when it returns", async () => {
    const started = new Date();
    await cat.heartbeat(report("n1"), started);
    await cat.heartbeat(report("n2"), started);
    assert.deepEqual(
      (await cat.nodes()).map((n) => [n.id, n.state]),
      [
        ["n1", "up"],
        ["n2", "up"],
      ],
    );
    await sleep(1200);
    await cat.heartbeat(report("n1", 2048), started);
    assert.deepEqual(await cat.markDown(1000), ["n2"]);
    assert.equal((await cat.node("n1"))?.free_memory_mb, 2048);
    assert.equal((await cat.node("n2"))?.state, "down");
    await cat.heartbeat(report("n2"), new Date());
    assert.equal((await cat.node("n2"))?.state, "up");
  });

  it("places and locates sandboxes; a returning node's truth wins", async () => {
    await cat.place("sb-00000001", "n1");
    await cat.place("sb-00000002", "n1");
    await cat.place("sb-00000003", "n2");
    assert.equal((await cat.locate("sb-00000001"))?.node.id, "n1");
    assert.equal(await cat.locate("sb-ffffffff"), undefined);
    assert.equal(await cat.reconcile("n1", ["sb-00000002"]), 1);
    assert.deepEqual(
      (await cat.placements()).map((p) => p.sandbox_id),
      ["sb-00000002", "sb-00000003"],
    );
    await cat.unplace("sb-00000003");
    assert.equal(await cat.locate("sb-00000003"), undefined);
  });

  it("reserves room on the node with the image, then the most free memory and vCPUs, until released; none when nothing fits", async () => {
    await cat.heartbeat({ ...report("n1", 3000), images: [] }, new Date());
    await cat.heartbeat(report("n2", 2000), new Date());
    const want = (memoryMb: number, image: string | null, vcpus = 1) => ({ memoryMb, image, vcpus });
    const a = await cat.reserve(want(512, "forgevm/debian:bookworm"));
    assert.equal(a?.node.id, "n2", "the node that has the image");
    const b = await cat.reserve(want(512, "other"));
    assert.equal(b?.node.id, "n1", "the most free memory");
    assert.deepEqual((await cat.reserved()).get("n1"), { memory_mb: 512, vcpus: 1 });
    // A heartbeat that does not count it yet (the create is on its way) does not give the room back.
    await cat.heartbeat({ ...report("n1", 3000), images: [] }, new Date());
    assert.deepEqual((await cat.reserved()).get("n1"), { memory_mb: 512, vcpus: 1 });
    const c = await cat.reserve(want(512, "other"), ["n1"]);
    assert.equal(c?.node.id, "n2", "not an excluded one");
    assert.equal(await cat.reserve(want(99999, null)), null);
    const big = await cat.reserve(want(2600, null));
    assert.equal(big, null, "n1 has 3000 less 512 reserved, n2 2000 less 1024");
    for (const r of [a, b, c]) await cat.release(r!.reservation);
    // Answered, but no heartbeat has counted the sandboxes yet: the room stays held.
    assert.deepEqual((await cat.reserved()).get("n1"), { memory_mb: 512, vcpus: 1 });
    await settle();
    // Memory alike, vCPUs not: the node whose vCPUs are less given.
    await cat.heartbeat({ ...report("n1", 4096), used_vcpus: 6 }, new Date());
    await cat.heartbeat({ ...report("n2", 4096), used_vcpus: 1 }, new Date());
    assert.equal((await cat.reserved()).size, 0, "a heartbeat taken after the answers counts them: nothing is held");
    const d = await cat.reserve(want(256, null, 2));
    assert.equal(d?.node.id, "n2", "the fewer vCPUs given");
    await cat.release(d!.reservation);
    await settle();
    // Reserved at once by many: spread, since each counts the others' reservations.
    await cat.heartbeat({ ...report("n1", 4096), used_vcpus: 0 }, new Date());
    await cat.heartbeat({ ...report("n2", 4096), used_vcpus: 0 }, new Date());
    const many = await Promise.all(Array.from({ length: 6 }, () => cat.reserve(want(256, null))));
    const per = new Map<string, number>();
    for (const r of many) per.set(r!.node.id, (per.get(r!.node.id) ?? 0) + 1);
    assert.deepEqual(Object.fromEntries(per), { n1: 3, n2: 3 });
    for (const r of many) await cat.release(r!.reservation);
    // A create that never reached its node gives its room back at once.
    const e = await cat.reserve(want(256, null));
    await cat.release(e!.reservation, true);
    assert.equal((await cat.reserved()).get(e!.node.id)?.memory_mb ?? 0, (6 * 256) / 2, "only the answered ones of the node, not the failed one");
  });

  it("keeps every node's events once, in one order; forgets a restarted log's; trims", async () => {
    const ev = (seq: number, type = "sandbox.created", data: Record<string, unknown> | null = null) => ({
      seq,
      type,
      sandbox_id: `sb-${seq}`,
      timestamp: new Date().toISOString(),
      data,
    });
    await cat.heartbeat(report("e1"), new Date());
    await cat.heartbeat(report("e2"), new Date());
    const start = await cat.lastEventSeq();
    await cat.appendEvents("e1", [ev(1), ev(2, "exec.finished", { exit_code: 0, note: 'quote " and \\ backslash' })]);
    await cat.appendEvents("e2", [ev(1)]);
    await cat.appendEvents("e1", [ev(2), ev(3)]); // 2 again: kept once
    const got = await cat.eventsAfter(start);
    assert.deepEqual(
      got.map((e) => [e.node, e.sandbox_id, e.type]),
      [
        ["e1", "sb-1", "sandbox.created"],
        ["e1", "sb-2", "exec.finished"],
        ["e2", "sb-1", "sandbox.created"],
        ["e1", "sb-3", "sandbox.created"],
      ],
    );
    assert.deepEqual(got[1].data, { exit_code: 0, note: 'quote " and \\ backslash' });
    assert.equal(await cat.lastNodeEvent("e1"), 3);
    await cat.forgetNodeEventsAfter("e1", 1);
    assert.equal(await cat.lastNodeEvent("e1"), 1);
    await cat.trimEvents(3600_000, 1);
    assert.equal((await cat.eventsAfter(0)).length, 1);
  });

  it("records templates written and deleted, and what changed since a time", async () => {
    await cat.putTemplate("py", { name: "py", memory_mb: 512 });
    const first = await cat.templatesSince(null);
    assert.deepEqual(
      first.map((t) => [t.name, t.body, t.deleted]),
      [["py", { name: "py", memory_mb: 512 }, false]],
    );
    assert.deepEqual(await cat.templatesSince(first[0].updated_at), [], "nothing new since");
    await cat.putTemplate("py", null);
    const later = await cat.templatesSince(first[0].updated_at);
    assert.deepEqual(
      later.map((t) => [t.name, t.body, t.deleted]),
      [["py", null, true]],
    );
    assert.equal((await cat.template("py"))?.deleted, true);
    assert.equal(await cat.template("none"), undefined);
  });

  it("reconnects after the database restarts", async () => {
    const before = (await cat.nodes()).length;
    db.stop();
    await assert.rejects(cat.nodes());
    db.start();
    assert.equal((await cat.nodes()).length, before);
  });
});
