// The filter that stores a pause as what differs from the RAM file the VM maps
// (providers/qemu/ram-delta.ts, over ram-stream.ts), on streams written here in QEMU's format: it leaves out exactly
// the guest-RAM pages equal to the file's (zero pages where the file is zero too), keeps every
// other block's records and everything after the RAM sections byte for byte, names a block
// again where a record it kept continued one it left out, reads the stream in any chunking, and
// refuses a record it cannot size. Real QEMU streams go through it in test/vm/pause-cycles.test.ts.
import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { RamFile, deltaFilter } from "../../src/providers/qemu/ram-delta.js";
import { PAGE_BYTES, StreamFilter, leavesSharedRamOut } from "../../src/providers/qemu/ram-stream.js";

const ZERO = 0x02;
const MEM_SIZE = 0x04;
const PAGE = 0x08;
const EOS = 0x10;
const CONTINUE = 0x20;

const u8 = (n: number) => Buffer.from([n]);
const be32 = (n: number) => {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(n);
  return b;
};
const be64 = (n: number) => {
  const b = Buffer.alloc(8);
  b.writeBigUInt64BE(BigInt(n));
  return b;
};
const str = (s: string) => Buffer.concat([u8(s.length), Buffer.from(s, "latin1")]);
const page = (fill: number) => Buffer.alloc(PAGE_BYTES, fill);

/** A record: `block` null continues the last one named. */
function record(offset: number, block: string | null, body: Buffer | "zero"): Buffer {
  const flags = (body === "zero" ? ZERO : PAGE) | (block === null ? CONTINUE : 0);
  return Buffer.concat([be64(offset | flags), ...(block === null ? [] : [str(block)]), body === "zero" ? u8(0) : body]);
}

interface Parsed {
  block: string;
  offset: number;
  fill: number | "zero";
}

/** A stream as QEMU writes one: header, configuration, RAM setup, two rounds of records, a device section, the end. */
function qemuStream(o: { capabilities?: string[]; rounds: Buffer[][]; tail: Buffer }): Buffer {
  const ignore = o.capabilities?.includes("x-ignore-shared") ?? false;
  const blocks: [string, number][] = [
    ["pc.bios", 0x20000],
    ["ram0", 16 * PAGE_BYTES],
  ];
  const total = blocks.reduce((n, [, l]) => n + l, 0);
  const parts: Buffer[] = [be32(0x5145564d), be32(3), u8(0x07), be32(7), Buffer.from("microvm")];
  if (o.capabilities) parts.push(u8(0x05), str("configuration/capabilities"), be32(1), be32(o.capabilities.length), ...o.capabilities.map(str));
  parts.push(u8(0x01), be32(2), str("ram"), be32(0), be32(4), be64(total | MEM_SIZE));
  for (const [name, len] of blocks) parts.push(str(name), be64(len), ...(ignore ? [be64(0)] : []));
  parts.push(be64(EOS), u8(0x7e), be32(2));
  for (const [i, round] of o.rounds.entries()) parts.push(u8(i === o.rounds.length - 1 ? 0x03 : 0x02), be32(2), ...round, be64(EOS), u8(0x7e), be32(2));
  parts.push(o.tail);
  return Buffer.concat(parts);
}

/** The records of every RAM round of a stream, read with the filter keeping all. */
function records(stream: Buffer): Parsed[] {
  const seen: Parsed[] = [];
  const f = new StreamFilter({
    out() {},
    keep(block, offset, data, at) {
      seen.push({ block, offset, fill: at < 0 ? "zero" : data[at] });
      return true;
    },
  });
  f.push(stream);
  f.end();
  return seen;
}

let dir: string;
let baseFile: string;

before(async () => {
  dir = await mkdtemp(join(tmpdir(), "fvt-delta-"));
  // The RAM file: pages 0–3 hold 0xa0+i, the rest are a hole (zeros).
  baseFile = join(dir, "memory");
  await writeFile(baseFile, Buffer.concat([0, 1, 2, 3].map((i) => page(0xa0 + i))));
});

after(() => rm(dir, { recursive: true, force: true }));

describe("a pause stored as what differs from the mapped RAM", () => {
  const device = Buffer.from([0x04, 0, 0, 0, 9, 4, ...Buffer.from("apic"), 0, 0, 0, 0, 0, 0, 0, 1, 0xde, 0xad, 0x7e, 0, 0, 0, 9, 0x1f]);
  const full = qemuStream({
    rounds: [
      [
        record(0, "pc.bios", page(0x11)),
        record(0, "ram0", page(0xa0)), // the same as the file: left out
        record(1 * PAGE_BYTES, null, page(0x55)), // changed: kept, and it must name ram0 again
        record(2 * PAGE_BYTES, null, "zero"), // zeroed where the file has data: kept
        record(5 * PAGE_BYTES, null, "zero"), // zero where the file is a hole: left out
        record(6 * PAGE_BYTES, null, page(0x66)), // data where the file is a hole: kept
      ],
      [
        record(3 * PAGE_BYTES, null, page(0xa3)), // continues ram0 across sections; unchanged
        record(7 * PAGE_BYTES, null, page(0x77)),
      ],
    ],
    tail: device,
  });

  for (const chunk of [full.length, 4096, 1])
    it(`keeps the pages that differ and everything else as it was (chunks of ${chunk} bytes)`, () => {
      const base = new RamFile(baseFile);
      const out: Buffer[] = [];
      const { filter, counts } = deltaFilter(base, "ram0", (b) => out.push(Buffer.from(b)));
      for (let at = 0; at < full.length; at += chunk) filter.push(full.subarray(at, at + chunk));
      filter.end();
      base.close();
      const delta = Buffer.concat(out);
      assert.deepEqual(counts, { kept: 4, left: 3 });
      assert.deepEqual(records(delta), [
        { block: "pc.bios", offset: 0, fill: 0x11 },
        { block: "ram0", offset: 1 * PAGE_BYTES, fill: 0x55 },
        { block: "ram0", offset: 2 * PAGE_BYTES, fill: "zero" },
        { block: "ram0", offset: 6 * PAGE_BYTES, fill: 0x66 },
        { block: "ram0", offset: 7 * PAGE_BYTES, fill: 0x77 },
      ]);
      assert.ok(delta.subarray(-device.length).equals(device), "the device sections and the end, byte for byte");
      assert.ok(delta.length < full.length - 2 * PAGE_BYTES, "two whole pages less");
    });

  it("says whether a stream leaves the file-backed RAM out (x-ignore-shared) or carries pages to load over it", async () => {
    const withCap = join(dir, "state-ignore");
    await writeFile(withCap, qemuStream({ capabilities: ["x-ignore-shared"], rounds: [[]], tail: u8(0x1f) }));
    const without = join(dir, "state-delta");
    await writeFile(without, full);
    assert.equal(await leavesSharedRamOut(withCap), true);
    assert.equal(await leavesSharedRamOut(without), false);
    const junk = join(dir, "junk");
    await writeFile(junk, "not a stream");
    await assert.rejects(leavesSharedRamOut(junk), /not a QEMU migration stream/);
  });

  it("refuses a record it cannot size, and a stream cut inside a record", () => {
    const odd = qemuStream({ rounds: [[Buffer.concat([be64(0x40), str("ram0"), page(1)])]], tail: u8(0x1f) });
    const f = new StreamFilter({ out() {}, keep: () => false });
    assert.throws(() => f.push(odd), /flags 0x40, which this filter cannot size/);
    const cut = new StreamFilter({ out() {}, keep: () => true });
    cut.push(full.subarray(0, full.length - device.length - 100));
    assert.throws(() => cut.end(), /ended inside a record/);
  });
});
