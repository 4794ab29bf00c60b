// The host's side of `cp`, without VMs: what a sandbox sends is unpacked into the target and
// nowhere else, set-id bits stay behind, and a tree packed here unpacks to the same tree.
import assert from "node:assert/strict";
import { chmod, lstat, mkdir, mkdtemp, readdir, readFile, readlink, rm, stat, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { after, describe, it } from "node:test";
import { packLocal, unpackLocal } from "../../src/cli/host-tree.js";
import { tarOf, type WriteEntry } from "../tar-writer.js";

const dirs: string[] = [];
const temp = async () => {
  const d = await mkdtemp(join(tmpdir(), "fvt-tree-"));
  dirs.push(d);
  return d;
};
after(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

const unpack = (entries: WriteEntry[], root: string) => unpackLocal([tarOf(entries)], root);

describe("unpacking what a sandbox sends", () => {
  it("keeps every entry inside the target", async () => {
    const outside = await temp();
    const root = await temp();
    for (const bad of [
      [{ path: "../escape", data: "x" }],
      [{ path: "/abs", data: "x" }],
      [{ path: "a/../../escape", data: "x" }],
      [
        { path: "link", type: "symlink", linkname: outside },
        { path: "link/file", data: "x" },
      ],
    ] as WriteEntry[][]) {
      await assert.rejects(unpack(bad, root), /cannot be unpacked/, JSON.stringify(bad));
    }
    assert.deepEqual(await readdir(outside), [], "nothing was written outside");
  });

  it("replaces a link at a file's place instead of writing through it", async () => {
    const outside = await temp();
    const root = await temp();
    await writeFile(join(outside, "victim"), "untouched");
    await symlink(join(outside, "victim"), join(root, "f"));
    await unpack([{ path: "f", data: "new" }], root);
    assert.equal(await readFile(join(outside, "victim"), "utf8"), "untouched");
    assert.equal((await lstat(join(root, "f"))).isFile(), true);
    assert.equal(await readFile(join(root, "f"), "utf8"), "new");
  });

  it("drops set-id bits and refuses devices", async () => {
    const root = await temp();
    await unpack([{ path: "suid", data: "#!/bin/sh\n", mode: 0o4755 }], root);
    assert.equal((await stat(join(root, "suid"))).mode & 0o7777, 0o755);
    await assert.rejects(unpack([{ path: "dev", type: "char", devmajor: 1, devminor: 3 }], root), /char/);
  });
});

describe("a tree packed here", () => {
  it("unpacks to the same tree: modes, links, long names, empty files", async () => {
    const src = await temp();
    const long = "n".repeat(120);
    await mkdir(join(src, "a", long), { recursive: true });
    await writeFile(join(src, "a", long, "deep.txt"), "deep");
    await writeFile(join(src, "run.sh"), "#!/bin/sh\necho hi\n", { mode: 0o755 });
    await writeFile(join(src, "secret"), "s", { mode: 0o600 });
    await writeFile(join(src, "empty"), "");
    await writeFile(join(src, "aligned"), Buffer.alloc(1024, 7)); // no padding after it: a stream must not stall there
    await symlink("run.sh", join(src, "rel-link"));
    await symlink("/nowhere/at/all", join(src, "dangling"));
    await mkdir(join(src, "ro"));
    await writeFile(join(src, "ro", "inside"), "ro");
    await chmod(join(src, "ro"), 0o555);
    const dest = await temp();
    const parts: Buffer[] = [];
    for await (const c of Readable.from(packLocal(src, "copy"))) parts.push(c);
    const r = await unpackLocal([Buffer.concat(parts)], dest);
    assert.equal(r.files, 6);
    assert.equal(r.links, 2);
    const out = join(dest, "copy");
    assert.equal(await readFile(join(out, "a", long, "deep.txt"), "utf8"), "deep");
    assert.equal((await stat(join(out, "run.sh"))).mode & 0o777, 0o755);
    assert.equal((await stat(join(out, "secret"))).mode & 0o777, 0o600);
    assert.equal((await stat(join(out, "empty"))).size, 0);
    assert.equal(await readlink(join(out, "rel-link")), "run.sh");
    assert.equal(await readlink(join(out, "dangling")), "/nowhere/at/all");
    assert.equal((await stat(join(out, "ro"))).mode & 0o777, 0o555);
    assert.equal(await readFile(join(out, "ro", "inside"), "utf8"), "ro");
  });
});
