import assert from "node:assert/strict";
import { randomBytes, randomInt } from "node:crypto";
import { describe, it } from "node:test";
import { FrameDecoder, HEADER_SIZE, Kind, MAX_PAYLOAD, ProtocolError, encodeFrame } from "../../src/agent-client/index.js";

describe("frame codec", () => {
  it("round-trips frames split at arbitrary points", () => {
    const frames = Array.from({ length: 200 }, (_, i) => ({
      id: randomInt(0, 0xffffffff),
      kind: [Kind.Hello, Kind.Response, Kind.Data, Kind.Window, Kind.Event][i % 5],
      channel: i % 3,
      flags: i % 2,
      payload: randomBytes(randomInt(0, 3000)),
    }));
    const wire = Buffer.concat(frames.map((f) => encodeFrame(f.id, f.kind, f.channel, f.flags, f.payload)));
    const dec = new FrameDecoder();
    const got = [];
    for (let off = 0; off < wire.length; ) {
      const n = randomInt(1, 5000);
      got.push(...dec.push(wire.subarray(off, off + n)));
      off += n;
    }
    assert.equal(got.length, frames.length);
    got.forEach((g, i) => {
      assert.equal(g.id, frames[i].id);
      assert.equal(g.kind, frames[i].kind);
      assert.equal(g.channel, frames[i].channel);
      assert.equal(g.flags, frames[i].flags);
      assert.ok(g.payload.equals(frames[i].payload));
    });
    assert.equal(dec.pending, 0);
  });

  it("rejects an oversized length before buffering the payload", () => {
    const h = Buffer.alloc(HEADER_SIZE);
    h.writeUInt32LE(MAX_PAYLOAD + 1, 0);
    h.writeUInt8(Kind.Data, 8);
    assert.throws(() => new FrameDecoder().push(h), ProtocolError);
  });

  it("rejects unknown frame kinds", () => {
    const f = encodeFrame(1, Kind.Data, 0, 0);
    f.writeUInt8(99, 8);
    assert.throws(() => new FrameDecoder().push(f), /unknown frame kind 99/);
  });

  it("refuses to encode an oversized payload", () => {
    assert.throws(() => encodeFrame(1, Kind.Data, 0, 0, Buffer.alloc(MAX_PAYLOAD + 1)), ProtocolError);
  });

  it("survives randomized malformed input: frames or ProtocolError, nothing else, bounded memory", () => {
    for (let round = 0; round < 2000; round++) {
      const dec = new FrameDecoder();
      try {
        for (let k = 0; k < 8; k++) {
          const junk = randomBytes(randomInt(1, 64));
          // Bias towards plausible headers so the length and kind checks are exercised.
          if (randomInt(0, 2) === 0 && junk.length >= HEADER_SIZE) junk.writeUInt8(randomInt(0, 8), 8);
          for (const f of dec.push(junk)) {
            assert.ok(f.payload.length <= MAX_PAYLOAD);
            assert.ok(f.kind >= Kind.Hello && f.kind <= Kind.Event);
          }
          assert.ok(dec.pending <= HEADER_SIZE + MAX_PAYLOAD);
        }
      } catch (e) {
        assert.ok(e instanceof ProtocolError, `unexpected ${(e as Error).name}: ${(e as Error).message}`);
      }
    }
  });
});
