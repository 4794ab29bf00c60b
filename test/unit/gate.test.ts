// The gate that lets a burst of VM starts through a few at a time (util/gate.ts): never more than
// its limit at once, in the order asked, and a failed start passes its turn on.
import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import { describe, it } from "node:test";
import { Gate } from "../../src/util/gate.js";

describe("gate", () => {
  it("runs at most its limit at once, first come first served, and a failure passes the turn on", async () => {
    const gate = new Gate(2);
    let now = 0;
    let most = 0;
    const started: number[] = [];
    const finished: number[] = [];
    const work = (i: number) =>
      gate.run(async () => {
        started.push(i);
        most = Math.max(most, ++now);
        await sleep(i % 3 === 0 ? 15 : 5);
        now--;
        finished.push(i);
        if (i === 4) throw new Error("start 4 failed");
        return i;
      });
    const results = await Promise.allSettled(Array.from({ length: 10 }, (_, i) => work(i)));
    assert.equal(most, 2);
    assert.deepEqual(started, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9], "in the order asked");
    assert.equal(results[4].status, "rejected");
    assert.deepEqual(
      results.filter((r) => r.status === "fulfilled").map((r) => (r as PromiseFulfilledResult<number>).value),
      [0, 1, 2, 3, 5, 6, 7, 8, 9],
    );
    assert.equal(finished.length, 10);
    assert.equal(gate.queued, 0);
    // Free again: the next runs at once.
    assert.equal(await gate.run(async () => "free"), "free");
  });

  it("refuses a limit below one", () => {
    assert.throws(() => new Gate(0), /at least 1/);
  });
});
