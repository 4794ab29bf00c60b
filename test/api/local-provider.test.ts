// The local provider (namespaces, no VM) against the provider contract, and what it alone
// promises: the sandbox sees its own processes, files and network only; a cgroup holds it to its
// memory and vCPUs; an unreadable image is a BootError; its processes end with the server that
// started them.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { createServer } from "node:net";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { pathsFor, type Paths } from "../../src/config/paths.js";
import { DEFAULT_IMAGE, resolveImage } from "../../src/images/store.js";
import { cgroupVersion, vmCgroupDirs } from "../../src/providers/cgroups.js";
import { LocalProvider } from "../../src/providers/local/local-provider.js";
import { BootError } from "../../src/providers/provider.js";
import { alive, removeAtExit, testDataDir, waitFor } from "../helpers.js";
import { providerContract } from "../provider-contract.js";

const sandboxesDir = (paths: Paths) => join(paths.dataDir, "local", "sandboxes");
providerContract("local", { make: (paths) => new LocalProvider({ paths }), vmsDir: sandboxesDir, noVmm: "a local sandbox has no VMM or disk" });

describe("local provider", () => {
  let paths: Paths;
  let provider: LocalProvider;
  let rootfs: string;
  let n = 0;
  const id = () => `local-${process.pid}-${n++}`;

  before(async () => {
    const dir = await testDataDir();
    removeAtExit(dir);
    paths = pathsFor(dir);
    provider = new LocalProvider({ paths });
    rootfs = (await resolveImage(paths, DEFAULT_IMAGE)).rootfs;
  });
  after(() => provider?.destroyAll());

  it("says it is no security boundary and what it cannot do", async () => {
    const h = await provider.health();
    assert.match(h.details.warning, /not a security boundary/);
    assert.deepEqual(provider.features, { snapshots: false, reattach: false, volumes: false, init: false, commit: false, isolation: "namespaces" });
  });

  it("sees its own processes, its own files and only loopback; writes stay in the sandbox", async () => {
    // A host port the sandbox must not reach.
    const host = createServer((s) => s.end("host")).listen(0, "127.0.0.1");
    await new Promise((r) => host.once("listening", r));
    const port = (host.address() as { port: number }).port;
    try {
      const vm = await provider.spawn({ id: id(), rootfs, memoryMb: 256, vcpus: 1 });
      const r = await vm.guest.execBuffered({
        cmd: `ps -e --no-headers | wc -l; ls /proc | grep -c '^[0-9]'; ip -o link | wc -l; python3 -c "import socket; socket.create_connection(('127.0.0.1', ${port}), 2)" 2>&1 | tail -1; echo changed > /etc/motd; cat /etc/motd`,
      });
      const [procs, , links, connect, motd] = r.stdout.toString().trim().split("\n");
      assert.ok(Number(procs) < 10, `the sandbox sees ${procs} processes`);
      assert.equal(links, "1", "only loopback");
      assert.match(connect, /ConnectionRefused|refused/i);
      assert.equal(motd, "changed");
      const again = await provider.spawn({ id: id(), rootfs, memoryMb: 256, vcpus: 1 });
      assert.notEqual((await again.guest.execBuffered({ cmd: "cat /etc/motd" })).stdout.toString(), "changed\n", "the image is not changed");
      await Promise.all([vm.destroy(), again.destroy()]);
    } finally {
      host.close();
    }
  });

  it("cannot set the host's clock, mount or load modules", async () => {
    const vm = await provider.spawn({ id: id(), rootfs, memoryMb: 256, vcpus: 1 });
    const r = await vm.guest.execBuffered({ cmd: "date -s '2001-01-01' >/dev/null 2>&1 && echo clock; mount -t tmpfs x /mnt 2>/dev/null && echo mounted; echo done" });
    assert.equal(r.stdout.toString(), "done\n");
    await vm.destroy();
  });

  it("keeps a sandbox within its memory, vCPUs and tasks by a cgroup, removed with it", { skip: cgroupVersion() ? false : "no usable cgroups here (not root)" }, async () => {
    const version = cgroupVersion()!;
    const vm = await provider.spawn({ id: id(), rootfs, memoryMb: 96, vcpus: 1 });
    const dirs = vmCgroupDirs(version, vm.info.id);
    try {
      const limit = version === "v2" ? "memory.max" : "memory.limit_in_bytes";
      assert.equal((await readFile(join(dirs[0], limit), "utf8")).trim(), String(96 * 1024 * 1024));
      const quota = version === "v2" ? (await readFile(join(dirs[0], "cpu.max"), "utf8")).trim() : (await readFile(join(dirs[1], "cpu.cfs_quota_us"), "utf8")).trim();
      assert.match(quota, /^100000\b/, "one vCPU: one core's time");
      // Every process of the sandbox is in it, the agent's children too.
      const procs = (await readFile(join(dirs[0], "cgroup.procs"), "utf8")).trim().split("\n");
      assert.ok(procs.includes(String(vm.info.pid)));
      const big = await vm.guest.execBuffered({ cmd: "python3 -c \"b = bytearray(300 * 1024 * 1024); print('allocated')\"" });
      assert.notEqual(big.exit_code, 0, "300 MiB in a 96 MiB sandbox");
      assert.doesNotMatch(big.stdout.toString(), /allocated/);
      assert.equal((await vm.guest.execBuffered({ cmd: "echo still here" })).stdout.toString(), "still here\n", "the OOM took the process, not the sandbox");
    } finally {
      await vm.destroy();
    }
    for (const d of dirs) assert.equal(existsSync(d), false, `${d} left behind`);
  });

  it("refuses an image it cannot read with a BootError, leaving nothing", async () => {
    const tmp = await mkdtemp(join(paths.dataDir, "bad-"));
    const bad = join(tmp, "bad.ext4");
    await writeFile(bad, Buffer.alloc(4 * 1024 * 1024));
    const err = await provider.spawn({ id: id(), rootfs: bad, memoryMb: 128, vcpus: 1 }).then(
      () => null,
      (e) => e,
    );
    assert.ok(err instanceof BootError, String(err));
    assert.match(err.message, /image cannot be read/);
    await rm(tmp, { recursive: true, force: true });
  });

  it("its sandboxes end with the server process that started them", async () => {
    const script = `
      import { LocalProvider } from ${JSON.stringify(new URL("../../src/providers/local/local-provider.js", import.meta.url).href)};
      import { pathsFor } from ${JSON.stringify(new URL("../../src/config/paths.js", import.meta.url).href)};
      const p = new LocalProvider({ paths: pathsFor(${JSON.stringify(paths.dataDir)}) });
      const vm = await p.spawn({ id: "orphan-${process.pid}", rootfs: ${JSON.stringify(rootfs)}, memoryMb: 128, vcpus: 1 });
      const r = await vm.guest.execBuffered({ cmd: "sleep 600 & echo $!" });
      console.log(JSON.stringify({ pid: vm.info.pid }));
      setInterval(() => {}, 1000);`;
    const child = spawn(process.execPath, ["--input-type=module", "-e", script], { stdio: ["ignore", "pipe", "inherit"] });
    let out = "";
    child.stdout.on("data", (d) => (out += d));
    await waitFor(() => out.includes("}"), 60_000, "the child's sandbox");
    const { pid } = JSON.parse(out);
    assert.ok(alive(pid));
    child.kill("SIGKILL");
    await waitFor(() => !alive(pid), 10_000, "the sandbox to end with its server");
    // What it left on disk goes at the next sweep.
    const gone = await provider.sweepOrphans(new Set());
    assert.ok(gone.includes(`orphan-${process.pid}`), gone.join(", "));
  });

  it("keeps one tree per image file, and drops the trees of images that are gone", async () => {
    const trees = join(paths.dataDir, "local", "trees");
    const stale = join(trees, "1-1-1");
    await mkdir(join(stale, "etc"), { recursive: true });
    const before = (await readdir(trees)).filter((t) => t !== "1-1-1");
    assert.equal(before.length, 1, "the default image's tree, made once");
    await provider.sweepOrphans(new Set());
    assert.deepEqual(await readdir(trees), before);
  });
});
