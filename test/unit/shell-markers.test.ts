// The end markers of shell-session commands (core/guest/shell-sessions.ts) found in output however
// it is cut into chunks, with nothing before or after them lost, and nothing held back that
// cannot be the start of a marker (a live follower sees output as it comes).
import assert from "node:assert/strict";
import { it } from "node:test";
import { MarkerReader } from "../../src/core/guest/shell-sessions.js";

const PREFIX = "\x1eEtok123:";

function read(chunks: string[]): { data: string; markers: string[]; events: string[] } {
  let data = "";
  const markers: string[] = [];
  const events: string[] = [];
  const r = new MarkerReader(
    Buffer.from(PREFIX),
    (b) => {
      if (b.length) events.push(`data:${b.toString("latin1")}`);
      data += b.toString("latin1");
    },
    (payload) => {
      markers.push(payload);
      events.push(`marker:${payload}`);
    },
  );
  for (const c of chunks) r.push(Buffer.from(c, "latin1"));
  return { data, markers, events };
}

it("finds a marker cut at every byte, keeping the output on both sides of it", () => {
  const whole = `line one\n\x1eEtok\x1e not ours${PREFIX}0\x1enext command's${PREFIX}42\x1e`;
  for (let cut = 1; cut < whole.length; cut++) {
    const r = read([whole.slice(0, cut), whole.slice(cut)]);
    assert.deepEqual(r.markers, ["0", "42"], `cut at ${cut}`);
    assert.equal(r.data, "line one\n\x1eEtok\x1e not oursnext command's", `cut at ${cut}`);
  }
});

it("holds back only a tail that could still become a marker", () => {
  const r = read(["tick1\n", "tick2\n\x1eE"]);
  assert.deepEqual(r.events, ["data:tick1\n", "data:tick2\n"]);
  const all = read(["abc\x1e", "x"]);
  assert.equal(all.data, "abc\x1ex");
});

it("takes a marker split byte by byte", () => {
  const whole = `out${PREFIX}7\x1erest`;
  const r = read([...whole]);
  assert.deepEqual(r.markers, ["7"]);
  assert.equal(r.data, "outrest");
});
