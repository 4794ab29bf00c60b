// Layer flattening on a real filesystem: what each entry type becomes, whiteouts, and every
// way a layer might try to write outside the image root.
import assert from "node:assert/strict";
import { lstat, mkdtemp, readFile, readlink, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, it } from "node:test";
import { applyLayer, LayerError } from "../../src/images/flatten.js";
import { parseReference } from "../../src/images/reference.js";
import { TarError } from "../../src/util/tar-read.js";
import { run } from "../../src/util/process.js";
import { tarOf } from "../tar-writer.js";

let root: string;
let outside: string;
beforeEach(async () => {
  outside = await mkdtemp(join(tmpdir(), "fvm-flat-"));
  root = join(outside, "root");
  await run("mkdir", [root]);
});
afterEach(async () => {
  await rm(outside, { recursive: true, force: true });
});

const apply = (entries: Parameters<typeof tarOf>[0]) => applyLayer(root, [tarOf(entries)]);

describe("applying layers", () => {
  it("creates every entry type with modes, owners, links, devices and xattrs", async () => {
    const cap = Buffer.from("0100000200200000000000000000000000000000", "hex"); // cap_net_bind_service+ep, v2
    await apply([
      { path: "usr/", type: "dir" },
      { path: "usr/lib/", type: "dir" },
      { path: "lib", type: "symlink", linkname: "usr/lib" },
      { path: "bin/", type: "dir" },
      { path: "bin/a", data: "#!/bin/sh\necho a\n", mode: 0o755 },
      { path: "bin/b", type: "hardlink", linkname: "bin/a" },
      { path: "bin/su", data: "setuid", mode: 0o4755 },
      { path: "bin/ping", data: "cap", mode: 0o755, xattrs: { "security.capability": cap } },
      { path: "home/u/", type: "dir", uid: 1000, gid: 1000, mode: 0o700 },
      { path: "home/u/f", data: "mine", uid: 1000, gid: 1000 },
      { path: "dev/", type: "dir" },
      { path: "dev/null2", type: "char", devmajor: 1, devminor: 3, mode: 0o666 },
      { path: "run/fifo", type: "fifo", mode: 0o600 },
      { path: `deep/${"x".repeat(120)}/file`, data: "long name" },
    ]);
    assert.equal(await readFile(join(root, "bin/a"), "utf8"), "#!/bin/sh\necho a\n");
    assert.equal((await stat(join(root, "bin/a"))).ino, (await stat(join(root, "bin/b"))).ino, "hardlink shares the inode");
    assert.equal((await stat(join(root, "bin/su"))).mode & 0o7777, 0o4755);
    assert.equal(await readlink(join(root, "lib")), "usr/lib");
    const home = await stat(join(root, "home/u"));
    assert.deepEqual([home.uid, home.gid, home.mode & 0o777], [1000, 1000, 0o700]);
    assert.equal((await stat(join(root, "home/u/f"))).uid, 1000);
    const dev = await stat(join(root, "dev/null2"));
    assert.ok(dev.isCharacterDevice());
    assert.equal(dev.rdev, (1 << 8) | 3);
    assert.ok((await lstat(join(root, "run/fifo"))).isFIFO());
    const { stdout } = await run("getfattr", ["-n", "security.capability", "-e", "hex", join(root, "bin/ping")]);
    assert.match(stdout, /security.capability=0x0100000200200000/);
    assert.equal(await readFile(join(root, "deep", "x".repeat(120), "file"), "utf8"), "long name");
  });

  it("applies whiteouts and opaque directories over lower layers, and writes through in-root symlinks", async () => {
    await apply([
      { path: "usr/lib/", type: "dir" },
      { path: "lib", type: "symlink", linkname: "/usr/lib" },
      { path: "etc/", type: "dir" },
      { path: "etc/old", data: "old" },
      { path: "etc/keep", data: "keep" },
      { path: "opt/d/", type: "dir" },
      { path: "opt/d/a", data: "a" },
      { path: "opt/d/b", data: "b" },
    ]);
    await apply([
      { path: "etc/.wh.old", data: "" },
      { path: "opt/d/c", data: "c" },
      { path: "opt/d/.wh..wh..opq", data: "" },
      { path: "lib/x.so", data: "so" },
    ]);
    await assert.rejects(lstat(join(root, "etc/old")), { code: "ENOENT" });
    assert.equal(await readFile(join(root, "etc/keep"), "utf8"), "keep");
    assert.deepEqual((await run("ls", [join(root, "opt/d")])).stdout.split("\n").filter(Boolean), ["c"]);
    assert.equal(await readFile(join(root, "usr/lib/x.so"), "utf8"), "so", "lib/x.so landed through lib -> /usr/lib inside the root");
  });

  it("never writes outside the root, whatever the names and links say", async () => {
    await assert.rejects(apply([{ path: "../evil", data: "x" }]), LayerError);
    await assert.rejects(apply([{ path: "a/../../evil", data: "x" }]), LayerError);
    await assert.rejects(apply([{ path: "passwd", type: "hardlink", linkname: "../../etc/passwd" }]), LayerError);
    // Symlinks that point out of the root are followed as the guest would: into the root.
    await apply([
      { path: "esc", type: "symlink", linkname: "/" },
      { path: "up", type: "symlink", linkname: "../../../.." },
      { path: "host", type: "symlink", linkname: outside },
    ]);
    await apply([
      { path: "esc/planted", data: "1" },
      { path: "up/planted2", data: "2" },
      { path: "host/planted3", data: "3" },
    ]);
    assert.equal(await readFile(join(root, "planted"), "utf8"), "1");
    assert.equal(await readFile(join(root, "planted2"), "utf8"), "2");
    assert.equal(await readFile(join(root, outside, "planted3"), "utf8"), "3");
    await assert.rejects(stat(join(outside, "planted3")), { code: "ENOENT" });
    await assert.rejects(stat(join(outside, "planted2")), { code: "ENOENT" });
    await assert.rejects(stat("/planted"), { code: "ENOENT" });
  });

  it("refuses corrupt archives", async () => {
    const good = tarOf([{ path: "f", data: "hello" }]);
    const bad = Buffer.from(good);
    bad[10] ^= 0xff; // breaks the header checksum
    await assert.rejects(applyLayer(root, [bad]), TarError);
    await assert.rejects(applyLayer(root, [good.subarray(0, 600)]), TarError);
  });
});

describe("image references", () => {
  it("applies Docker Hub defaults and keeps registries, tags and digests", () => {
    const d = `sha256:${"a".repeat(64)}`;
    assert.equal(parseReference("alpine").canonical, "registry-1.docker.io/library/alpine:latest");
    assert.equal(parseReference("python:3.12").canonical, "registry-1.docker.io/library/python:3.12");
    assert.equal(parseReference("docker.io/org/app:v1").canonical, "registry-1.docker.io/org/app:v1");
    assert.equal(parseReference(`ghcr.io/org/app@${d}`).canonical, `ghcr.io/org/app@${d}`);
    const local = parseReference("127.0.0.1:5000/test/img:tag");
    assert.deepEqual([local.registry, local.repository, local.tag], ["127.0.0.1:5000", "test/img", "tag"]);
    assert.equal(parseReference("localhost/x").registry, "localhost");
    for (const bad of ["", "UPPER/case", "a@sha256:short", "a:b:c:", "a//b"]) assert.throws(() => parseReference(bad), /./, bad);
  });
});
