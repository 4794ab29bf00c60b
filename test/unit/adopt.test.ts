// The note a tracked process's exec carries (guest/adopt.ts): what the server started it as,
// kept by the guest and read back by a later server. It comes back from the guest, so it is
// parsed field by field and anything else is dropped.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { noteOf, specOfNote } from "../../src/core/guest/adopt.js";

describe("process notes", () => {
  it("a spec goes into a note and comes back as it was; one too large for the agent drops its env first", () => {
    const spec = { cmd: "/bin/bash", args: ["-l", "-c", "npm run dev"], env: { A: "1" }, cwd: "/app", user: "user", tag: "dev", stdin: true, pty: { rows: 30, cols: 100 } };
    assert.deepEqual(specOfNote(noteOf(spec)), spec);
    const big = { ...spec, env: { HUGE: "x".repeat(20_000) } };
    assert.ok(Buffer.byteLength(noteOf(big)) <= 8192);
    assert.deepEqual(specOfNote(noteOf(big))?.env, {});
    const worse = { ...spec, args: ["y".repeat(20_000)] };
    const lean = specOfNote(noteOf(worse));
    assert.ok(Buffer.byteLength(noteOf(worse)) <= 8192);
    assert.deepEqual([lean?.cmd, lean?.args, lean?.tag], ["/bin/bash", [], "dev"]);
  });

  it("what the guest sends back is taken field by field: not ours, malformed or mistyped fields are dropped", () => {
    for (const bad of [undefined, "", "not json", "null", "[]", '{"v":2,"cmd":"x"}', '{"v":1}', '{"v":1,"cmd":42}']) assert.equal(specOfNote(bad), null, String(bad));
    assert.deepEqual(specOfNote('{"v":1,"cmd":"sh","args":[1,2],"env":{"A":5},"cwd":7,"user":[],"tag":{},"stdin":"yes","pty":{"rows":"x","cols":1},"extra":"dropped"}'), {
      cmd: "sh",
      args: [],
      env: {},
      stdin: false,
    });
  });
});
