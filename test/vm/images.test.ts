// Images from OCI layouts the tests write themselves: flattened, packed, booted, and checked
// from inside a real VM; and every way an import must fail without leaving anything behind.
import assert from "node:assert/strict";
import { lookup } from "node:dns/promises";
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, readFile, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { DigestMismatchError } from "../../src/images/blobs.js";
import { LayerError } from "../../src/images/flatten.js";
import { ImageNotFoundError, resolveImage } from "../../src/images/store.js";
import type { Forge } from "../../src/index.js";
import { fileURLToPath } from "node:url";
import { run } from "../../src/util/process.js";
import { childEnv, imageLeftovers, openForge, removeAtExit, runCli, serveForge, testDataDir, testForge } from "../helpers.js";
import { writeImage, writeIndex, writeMultiArch } from "../oci-writer.js";

let forge: Forge;
let work: string;
let busybox: Buffer;

before(async () => {
  forge = await testForge();
  work = await mkdtemp(join(tmpdir(), "fvm-img-"));
  busybox = await readFile("/bin/busybox");
});
after(async () => {
  await rm(work, { recursive: true, force: true });
  for (const name of ["local/test-full:v1", "local/test-multi"]) await forge.images.remove(name);
  await forge.images.pruneBlobs();
  // What is left is what the images still here name (the default image's, when the suite's seed learned them).
  const kept = new Set<string>();
  for (const i of await forge.images.list()) {
    const meta = await resolveImage(forge.paths, i.name);
    for (const d of [meta.digest, meta.configDigest, ...(meta.layers ?? [])]) if (d) kept.add(d.slice("sha256:".length));
  }
  const left = await readdir(join(forge.paths.blobsDir, "sha256")).catch(() => [] as string[]);
  assert.deepEqual(
    left.filter((b) => !kept.has(b)),
    [],
  );
});

/** A base layer: static busybox with its shell, users and a few files to check later. */
function baseLayer(marker: string) {
  return {
    compression: "gzip" as const,
    entries: [
      { path: "bin/", type: "dir" as const },
      { path: "bin/busybox", data: busybox, mode: 0o755 },
      { path: "bin/sh", type: "symlink" as const, linkname: "busybox" },
      { path: "bin/bb2", type: "hardlink" as const, linkname: "bin/busybox" },
      { path: "etc/", type: "dir" as const },
      { path: "etc/passwd", data: "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000:app:/home/app:/bin/sh\n" },
      { path: "etc/group", data: "root:x:0:\napp:x:1000:\n" },
      { path: "etc/old.txt", data: "old" },
      { path: "etc/marker", data: marker },
      { path: "opt/d/a", data: "a" },
      { path: "opt/d/b", data: "b" },
      { path: "usr/bin/su-tool", data: "x", mode: 0o4755 },
      { path: "home/app/", type: "dir" as const, uid: 1000, gid: 1000 },
    ],
  };
}

async function layoutDir(name: string): Promise<string> {
  const d = join(work, name);
  return d;
}

describe("importing OCI layouts", () => {
  it("imports gzip and zstd layers with whiteouts, a hardlink, setuid, USER and WORKDIR, and boots it", async () => {
    const layout = await layoutDir("full");
    const desc = await writeImage(layout, {
      layers: [
        baseLayer("amd64"),
        {
          compression: "zstd",
          entries: [
            { path: "etc/.wh.old.txt", data: "" },
            { path: "opt/d/.wh..wh..opq", data: "" },
            { path: "opt/d/c", data: "c" },
            { path: "work/", type: "dir" },
            { path: "work/hello.txt", data: "hello from the image\n" },
          ],
        },
        { compression: "none", entries: [{ path: "etc/third", data: "plain layer" }] },
      ],
      config: { Env: ["PATH=/bin:/usr/bin", "GREETING=from-image"], WorkingDir: "/work", User: "app" },
    });
    await writeIndex(layout, [{ tag: "v1", descriptor: desc }]);
    const img = await forge.images.import(layout, { name: "local/test-full:v1", ref: "v1" });
    assert.equal(img.name, "registry-1.docker.io/local/test-full:v1");
    assert.equal(img.digest, desc.digest);
    assert.deepEqual(img.config?.Env, ["PATH=/bin:/usr/bin", "GREETING=from-image"]);
    const sb = await forge.sandboxes.spawn({ image: "local/test-full:v1", memoryMb: 256 });
    try {
      const r = await sb.exec([
        "sh",
        "-c",
        "pwd; echo $GREETING; cat hello.txt; ls /opt/d; test -e /etc/old.txt || echo old-gone; cat /etc/third; echo; stat -c %a /usr/bin/su-tool; [ $(stat -c %i /bin/busybox) = $(stat -c %i /bin/bb2) ] && echo same-inode; stat -c %u /home/app",
      ]);
      assert.equal(r.stderr, "");
      assert.equal(r.stdout, "/work\nfrom-image\nhello from the image\nc\nold-gone\nplain layer\n4755\nsame-inode\n1000\n");
      assert.equal((await sb.exec(["sh", "-c", "id -u"], { user: "app" })).stdout, "1000\n");
      await assert.rejects(forge.images.remove("local/test-full:v1"), /in use by/);
    } finally {
      await sb.destroy();
    }
    // Asked for, execs run as the image's USER; an exec can still say otherwise.
    const asImage = await forge.sandboxes.spawn({ image: "local/test-full:v1", memoryMb: 256, user: "image" });
    try {
      assert.equal((await asImage.exec(["sh", "-c", "id -u"])).stdout, "1000\n");
      assert.equal((await asImage.exec(["sh", "-c", "id -u"], { user: "root" })).stdout, "0\n");
    } finally {
      await asImage.destroy();
    }
  });

  it("picks linux/amd64 from a multi-arch index", async () => {
    const layout = await layoutDir("multi");
    const arm = await writeImage(layout, { layers: [baseLayer("arm64")], architecture: "arm64" });
    const amd = await writeImage(layout, { layers: [baseLayer("amd64")] });
    await writeIndex(layout, [{ tag: "latest", descriptor: await writeMultiArch(layout, [arm, amd]) }]);
    const img = await forge.images.import(layout, { name: "local/test-multi" });
    assert.equal(img.digest, amd.digest);
    const sb = await forge.sandboxes.spawn({ image: "local/test-multi", memoryMb: 256 });
    try {
      assert.equal((await sb.exec(["sh", "-c", "cat /etc/marker"])).stdout, "amd64");
    } finally {
      await sb.destroy();
    }
  });

  it("refuses a tampered blob and leaves nothing behind", async () => {
    const layout = await layoutDir("tampered");
    const desc = await writeImage(layout, { layers: [baseLayer("x"), { entries: [{ path: "f", data: "original" }] }] });
    await writeIndex(layout, [{ tag: "t", descriptor: desc }]);
    const manifest = JSON.parse(await readFile(join(layout, "blobs", "sha256", desc.digest.slice(7)), "utf8"));
    const victim = join(layout, "blobs", "sha256", manifest.layers[1].digest.slice(7));
    const bytes = await readFile(victim);
    bytes[bytes.length - 5] ^= 0xff;
    await writeFile(victim, bytes);
    await assert.rejects(forge.images.import(layout, { name: "local/test-tampered", ref: "t" }), DigestMismatchError);
    await assert.rejects(resolveImage(forge.paths, "local/test-tampered:t"), ImageNotFoundError);
    assert.deepEqual(await imageLeftovers(forge), []);
    assert.equal(existsSync(join(forge.paths.blobsDir, "sha256", manifest.layers[1].digest.slice(7))), false);
  });

  it("refuses a layer that climbs out of the root, and a platform it cannot run", async () => {
    const layout = await layoutDir("evil");
    const desc = await writeImage(layout, { layers: [{ entries: [{ path: "../../escape", data: "x" }] }] });
    await writeIndex(layout, [{ tag: "t", descriptor: desc }]);
    await assert.rejects(forge.images.import(layout, { name: "local/test-evil", ref: "t" }), LayerError);
    assert.deepEqual(await imageLeftovers(forge), []);
    const armOnly = await layoutDir("arm");
    const arm = await writeImage(armOnly, { layers: [baseLayer("arm")], architecture: "arm64" });
    await writeIndex(armOnly, [{ tag: "t", descriptor: await writeMultiArch(armOnly, [arm]) }]);
    await assert.rejects(
      forge.images.import(armOnly, { name: "local/test-arm", ref: "t" }),
      (e: any) => e.code === "BAD_REQUEST" && /no linux\/amd64 variant \(it offers linux\/arm64\)/.test(e.message),
    );
    await assert.rejects(forge.images.import(join(work, "nope"), { name: "x" }), /does not exist/);
    const notLayout = await layoutDir("not-a-layout");
    await mkdir(notLayout, { recursive: true });
    await assert.rejects(forge.images.import(notLayout, { name: "x" }), /not an OCI image layout/);
  });
});

describe("image commands", () => {
  it("forgevm import, images --json and rmi go through the server that owns the data directory", async () => {
    const layout = await layoutDir("cli");
    const desc = await writeImage(layout, { layers: [baseLayer("cli")] });
    await writeIndex(layout, [{ tag: "v1", descriptor: desc }]);
    const cli = fileURLToPath(new URL("../../src/cli/main.js", import.meta.url));
    const forgevm = (...args: string[]) => run(process.execPath, [cli, "--data-dir", forge.paths.dataDir, ...args], { env: childEnv() });
    // Opening the data directory here would be refused: this process owns it, serving nothing yet.
    await assert.rejects(forgevm("images"), /in use by process \d+.*which is not a server/);
    const server = await serveForge(forge);
    try {
      const imp = await forgevm("import", layout, "local/cli-test", "--tag", "v2");
      assert.match(imp.stdout, /^local\/cli-test:v2\n {2}digest sha256:/m);
      const list = JSON.parse((await forgevm("images", "--json")).stdout);
      assert.ok(list.some((i: any) => i.name === "local/cli-test:v2" && i.digest === desc.digest));
      const rmi = await forgevm("rmi", "local/cli-test:v2");
      assert.match(rmi.stdout, /removed local\/cli-test:v2/);
      await assert.rejects(forgevm("rmi", "local/cli-test:v2"), /not in/);
      const doctor = JSON.parse((await forgevm("doctor", "--json")).stdout);
      assert.equal(doctor.healthy, true);
      // A resolver without *.localhost is a note (E2B's getHost names), not a problem.
      const resolves = await lookup("8000-x.localhost").then(
        () => true,
        () => false,
      );
      assert.equal(
        doctor.notes.some((n: string) => /\.localhost do not resolve/.test(n)),
        !resolves,
      );
    } finally {
      await server.close();
    }
  });
});

describe("commands on a data directory no server owns", () => {
  it("go through a server of the command's own, which ends with the command and leaves nothing behind", async () => {
    const dataDir = await testDataDir();
    removeAtExit(dataDir);
    const forgevm = (...args: string[]) => runCli(["--data-dir", dataDir, ...args], childEnv());
    const list = await forgevm("images", "--json");
    assert.equal(list.status, 0, list.stderr);
    assert.ok((JSON.parse(list.stdout) as { name: string }[]).some((i) => i.name === "forgevm/debian:bookworm"));
    // A throwaway sandbox's command, its exit code passed on, with the spawn fields the API has.
    const ran = await forgevm("run", "-l", "team=images", "-m", "256", "--", "sh", "-c", "echo $((6*7)); exit 3");
    assert.deepEqual([ran.status, ran.stdout], [3, "42\n"], ran.stderr);
    const vol = await forgevm("volume", "create", "cli-own", "--size", "64m");
    assert.equal(vol.status, 0, vol.stderr);
    assert.match((await forgevm("volume", "ls")).stdout, /^cli-own\s+64 MiB/m);
    assert.equal((await forgevm("volume", "rm", "cli-own")).status, 0);
    const missing = await forgevm("rmi", "nosuch/image:1");
    assert.equal(missing.status, 1);
    assert.match(missing.stderr, /^forgevm: image "nosuch\/image:1" is not in .*\(NOT_FOUND\)$/m);
    // Each command's server and sandboxes ended with it: no VM, no owner, the sandbox's history kept.
    assert.deepEqual(await readdir(join(dataDir, "vms")).catch(() => []), []);
    assert.equal(existsSync(join(dataDir, "owner.json")), false);
    const forge = await openForge({ dataDir, reapIntervalMs: 0 });
    try {
      const gone = forge.sandboxes.list(undefined, ["destroyed"]);
      assert.equal(gone.length, 1);
      assert.deepEqual([gone[0].memory_mb, gone[0].metadata?.team], [256, "images"]);
    } finally {
      await forge.close();
    }
  });
});

describe("importing archives", () => {
  it("imports a docker save tarball under its own tag, and an OCI archive", async () => {
    const { tarOf } = await import("../tar-writer.js");
    const { createHash } = await import("node:crypto");
    const hex = (b: Buffer) => createHash("sha256").update(b).digest("hex");
    const l1 = tarOf(baseLayer("docker-save").entries);
    const l2 = tarOf([{ path: "srv/app.txt", data: "saved\n" }]);
    const config = Buffer.from(JSON.stringify({ architecture: "amd64", os: "linux", config: { Env: ["PATH=/bin"], WorkingDir: "/srv" } }));
    const saved = join(work, "saved.tar");
    await writeFile(
      saved,
      tarOf([
        { path: `${hex(l1)}/layer.tar`, data: l1 },
        { path: `${hex(l2)}/layer.tar`, data: l2 },
        { path: `${hex(config)}.json`, data: config },
        {
          path: "manifest.json",
          data: JSON.stringify([{ Config: `${hex(config)}.json`, RepoTags: ["local/saved:v2"], Layers: [`${hex(l1)}/layer.tar`, `${hex(l2)}/layer.tar`] }]),
        },
        { path: "repositories", data: "{}" },
      ]),
    );
    const img = await forge.images.import(saved);
    assert.equal(img.name, "registry-1.docker.io/local/saved:v2");
    const sb = await forge.sandboxes.spawn({ image: "local/saved:v2", memoryMb: 256 });
    try {
      assert.equal((await sb.exec(["sh", "-c", "pwd; cat app.txt /etc/marker"])).stdout, "/srv\nsaved\ndocker-save");
    } finally {
      await sb.destroy();
    }
    await forge.images.remove("local/saved:v2");

    const layout = await layoutDir("for-archive");
    const desc = await writeImage(layout, { layers: [baseLayer("oci-archive")] });
    await writeIndex(layout, [{ tag: "v3", descriptor: desc }]);
    const files = (await run("find", [layout, "-type", "f"])).stdout.trim().split("\n");
    const archive = join(work, "oci.tar");
    await writeFile(archive, tarOf(await Promise.all(files.map(async (f) => ({ path: f.slice(layout.length + 1), data: await readFile(f) })))));
    await assert.rejects(forge.images.import(archive), /carries no name of its own; give it one \(--name\)/);
    const oci = await forge.images.import(archive, { name: "local/oci-archive", ref: "v3" });
    assert.equal(oci.digest, desc.digest);
    await forge.images.remove("local/oci-archive");
  });

  it("imports a docker-archive written by skopeo (layers behind links), and --tag names the result", async () => {
    const layout = await layoutDir("skopeo-archive");
    const desc = await writeImage(layout, { layers: [baseLayer("skopeo"), { entries: [{ path: "etc/second", data: "two\n" }] }] });
    await writeIndex(layout, [{ tag: "t", descriptor: desc }]);
    const archive = join(work, "skopeo.tar");
    await run("skopeo", ["copy", "--quiet", `oci:${layout}:t`, `docker-archive:${archive}:local/skopeo:v1`]);
    const img = await forge.images.import(archive);
    assert.equal(img.name, "registry-1.docker.io/local/skopeo:v1");
    const renamed = await forge.images.import(archive, { name: "local/renamed", tag: "v9" });
    assert.equal(renamed.name, "registry-1.docker.io/local/renamed:v9");
    const sb = await forge.sandboxes.spawn({ image: "local/renamed:v9", memoryMb: 256 });
    try {
      assert.equal((await sb.exec(["sh", "-c", "cat /etc/marker /etc/second"])).stdout, "skopeotwo\n");
    } finally {
      await sb.destroy();
    }
    await forge.images.remove("local/skopeo:v1");
    await forge.images.remove("local/renamed:v9");
  });

  it("refuses archives with links or without image metadata", async () => {
    const { tarOf } = await import("../tar-writer.js");
    const linky = join(work, "linky.tar");
    await writeFile(linky, tarOf([{ path: "manifest.json", type: "symlink", linkname: "/etc/passwd" }]));
    await assert.rejects(forge.images.import(linky, { name: "x" }), /is a link/);
    const empty = join(work, "empty.tar");
    await writeFile(empty, tarOf([{ path: "hello.txt", data: "hi" }]));
    await assert.rejects(forge.images.import(empty, { name: "x" }), /neither a docker save tarball/);
    await assert.rejects(forge.images.import(join(work, "missing.tar"), { name: "x" }), /does not exist/);
    assert.deepEqual(await imageLeftovers(forge), []);
  });
});
