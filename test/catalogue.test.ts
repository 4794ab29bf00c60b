// The cluster catalogue on a real PostgreSQL (started by the test in a temporary directory):
// migrations run once however many processes open it at once; heartbeats make and refresh nodes;
// a node without one is marked down; placements locate sandboxes; a returning node reconciles;
// the pool reconnects after the database restarts.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { Catalogue, type NodeReport } from "../src/store/catalogue.js";
import { startPostgres, type TestPostgres } from "./postgres.js";

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
  images: ["forgevm/debian:bookworm"],
  warm: [],
  version: "test",
});

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

  it("reserves room on the node with the image, then the most free memory; none when nothing fits", async () => {
    await cat.heartbeat({ ...report("n1", 3000), images: [] }, new Date());
    await cat.heartbeat(report("n2", 2000), new Date());
    assert.equal((await cat.reserve(512, "forgevm/debian:bookworm"))?.id, "n2", "the node that has the image");
    assert.equal((await cat.reserve(512, "other"))?.id, "n1", "the most free memory");
    assert.equal((await cat.node("n1"))?.free_memory_mb, 2488);
    assert.equal((await cat.reserve(512, "other", ["n1"]))?.id, "n2", "not an excluded one");
    assert.equal(await cat.reserve(99999, null), null);
  });

  it("reconnects after the database restarts", async () => {
    db.stop();
    await assert.rejects(cat.nodes());
    db.start();
    assert.equal((await cat.nodes()).length, 2);
  });
});
