// A qcow2 overlay made from a remembered shape (providers/qemu/overlay-file.ts) is byte for byte
// the file qemu-img writes for the same shape (empty, over a qcow2 or raw backing, unchecked),
// qemu-img accepts it, and a shape that needs its backing checked still fails without one.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, it } from "node:test";
import { type OverlayShape, createOverlay } from "../../src/providers/qemu/overlay-file.js";

let dir: string;
before(async () => {
  dir = await mkdtemp(join(tmpdir(), "forgevm-overlay-"));
  execFileSync("qemu-img", ["create", "-q", "-f", "qcow2", join(dir, "base.qcow2"), "64M"]);
  execFileSync("truncate", ["-s", "32M", join(dir, "base.raw")]);
});
after(() => rm(dir, { recursive: true, force: true }));

it("writes, from the second time on, the bytes qemu-img writes for that shape", async () => {
  const shapes: OverlayShape[] = [
    { bytes: 2 ** 30 },
    { bytes: 2 * 2 ** 30, backing: join(dir, "base.qcow2") },
    { bytes: 256 * 2 ** 20, backing: join(dir, "base.raw"), backingFormat: "raw" },
    { bytes: 2 * 2 ** 30, backing: join(dir, "base.qcow2"), unsafe: true },
  ];
  let n = 0;
  for (const s of shapes) {
    const first = join(dir, `o${n++}.qcow2`);
    const copy = join(dir, `o${n++}.qcow2`);
    await createOverlay(first, s);
    await createOverlay(copy, s);
    const own = join(dir, `o${n++}.qcow2`);
    const backing = s.backing ? [...(s.unsafe ? ["-u"] : []), "-b", s.backing, "-F", s.backingFormat ?? "qcow2"] : [];
    execFileSync("qemu-img", ["create", "-q", "-f", "qcow2", ...backing, own, String(s.bytes)]);
    assert.deepEqual(await readFile(copy), await readFile(own), JSON.stringify(s));
    const info = JSON.parse(execFileSync("qemu-img", ["info", "-U", "--output=json", copy], { encoding: "utf8" }));
    assert.equal(info["virtual-size"], s.bytes);
    assert.equal(info["backing-filename"], s.backing);
    execFileSync("qemu-img", ["check", "-q", copy]);
  }
});

it("a checked backing that is not there is an error, from a remembered shape too", async () => {
  const backing = join(dir, "soon-gone.qcow2");
  execFileSync("qemu-img", ["create", "-q", "-f", "qcow2", backing, "64M"]);
  const s: OverlayShape = { bytes: 2 ** 30, backing };
  await createOverlay(join(dir, "x.qcow2"), s);
  await rm(backing);
  await assert.rejects(createOverlay(join(dir, "y.qcow2"), s), /ENOENT/);
  await createOverlay(join(dir, "z.qcow2"), { ...s, unsafe: true });
});
