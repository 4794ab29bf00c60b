// The host↔guest wire format, frozen: the bytes of each kind of frame, and the constants and
// operation table the C agent and the TypeScript host each keep, which must be the same.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, it } from "node:test";
import {
  Channel,
  DATA_CHUNK,
  FIELD_FEATURES,
  HELLO_FEATURES,
  Flag,
  HEADER_SIZE,
  INITIAL_WINDOW,
  Kind,
  MAX_PAYLOAD,
  OP_FEATURES,
  PROTOCOL_VERSION,
  encodeFrame,
  encodeJson,
} from "../../src/agent-client/index.js";

const agent = join(fileURLToPath(new URL("../../..", import.meta.url)), "agent", "src");
const header = readFileSync(join(agent, "agent.h"), "utf8");
const dispatch = readFileSync(join(agent, "dispatch.c"), "utf8");

/** The value of `#define NAME value` in agent.h, evaluated (they are simple integer expressions). */
function define(name: string): number {
  const m = new RegExp(`^#define ${name} (.+?)(?:\\s*/\\*.*)?$`, "m").exec(header);
  assert.ok(m, `agent.h defines ${name}`);
  return Function(`return (${m[1].replace(/(\d+)u\b/g, "$1")});`)() as number;
}

/** The members of a C enum in agent.h, by name. */
function enumValues(first: string): Record<string, number> {
  const m = new RegExp(`enum[^{]*\\{([^}]*\\b${first}\\b[^}]*)\\}`).exec(header);
  assert.ok(m, `agent.h has the enum with ${first}`);
  return Object.fromEntries(
    m[1]
      .split(",")
      .map((kv) => kv.split("=").map((x) => x.trim()))
      .map(([k, v]) => [k, Number(v)]),
  );
}

describe("the wire format", () => {
  it("frames are these bytes (12-byte little-endian header, then the payload)", () => {
    assert.equal(encodeJson(7, Kind.Request, { op: "ping" }).toString("hex"), "0d000000070000000200000" + "07b226f70223a2270696e67227d");
    assert.equal(encodeFrame(0xfffffffe, Kind.Data, Channel.Stdin, Flag.Eof, Buffer.from("ab")).toString("hex"), "02000000feffffff0400010061" + "62");
    const credit = Buffer.alloc(4);
    credit.writeUInt32LE(65536);
    assert.equal(encodeFrame(3, Kind.Window, Channel.Stdout, 0, credit).toString("hex"), "04000000030000000501000000000100");
    assert.equal(encodeJson(0, Kind.Hello, { nonce: "n" }).toString("hex"), `0d0000000000000001000000${Buffer.from('{"nonce":"n"}').toString("hex")}`);
  });

  it("the agent and the host agree on every constant", () => {
    assert.equal(define("PROTO_VERSION"), PROTOCOL_VERSION);
    assert.equal(define("HDR_SIZE"), HEADER_SIZE);
    assert.equal(define("MAX_PAYLOAD"), MAX_PAYLOAD);
    assert.equal(define("DATA_CHUNK"), DATA_CHUNK);
    assert.equal(define("INITIAL_WINDOW"), INITIAL_WINDOW);
    assert.deepEqual(enumValues("K_HELLO"), { K_HELLO: Kind.Hello, K_REQ: Kind.Request, K_RES: Kind.Response, K_DATA: Kind.Data, K_WINDOW: Kind.Window, K_EVENT: Kind.Event });
    assert.deepEqual(enumValues("CH_IN"), { CH_IN: Channel.Stdin, CH_OUT: Channel.Stdout, CH_ERR: Channel.Stderr });
    assert.deepEqual(enumValues("F_EOF"), { F_EOF: Flag.Eof });
  });

  it("the agent's operation table and the host's feature table are the same", () => {
    const rows = [...dispatch.matchAll(/\{"([a-z]+)", op_[a-z_]+, [01], "([a-z-]+)"\}/g)].map((m) => [m[1], m[2]]);
    assert.ok(rows.length >= 20, `found ${rows.length} rows of OPS in dispatch.c`);
    assert.deepEqual(Object.fromEntries(rows), OP_FEATURES);
    const fieldFeatures = /FIELD_FEATURES\[\] = \{([^}]*)\}/
      .exec(dispatch)![1]
      .match(/"([a-z-]+)"/g)!
      .map((x) => x.slice(1, -1));
    const hostFields = new Set(
      Object.values(FIELD_FEATURES)
        .flatMap((m) => Object.values(m))
        .filter((f) => !Object.values(OP_FEATURES).includes(f)),
    );
    const hello = Object.values(HELLO_FEATURES);
    assert.deepEqual(fieldFeatures.filter((f) => !hello.includes(f)).sort(), [...hostFields].sort());
    for (const f of hello) assert.ok(fieldFeatures.includes(f) || Object.values(OP_FEATURES).includes(f), `the agent advertises ${f}`);
  });
});
