// The provider contract: what core relies on from any VM backend (src/providers/provider.ts).
// A provider's test file calls providerContract with a factory; every provider must pass it.
// What a provider does not offer (features.snapshots, features.reattach) is skipped, saying so, and
// so is what only a VM has (its own CPU count and disk, a VMM to hold back) for one that is none.
import assert from "node:assert/strict";
import { mkdir, mkdtemp, readdir, rm, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { pathsFor, type Paths } from "../src/config/paths.js";
import { DEFAULT_IMAGE, resolveImage } from "../src/images/store.js";
import { BootError, type Provider, type Vm } from "../src/providers/provider.js";
import { alive, removeAtExit, testDataDir, waitFor } from "./helpers.js";

export interface ContractOptions {
  /** Makes a provider on a data directory; `killOnExit: false` for the one whose VMs another takes over. */
  make(paths: Paths, opts: { killOnExit?: boolean }): Provider;
  /** Where it keeps its VMs' directories (default paths.vmsDir). */
  vmsDir?(paths: Paths): string;
  /** Why it has no VMM on this host to hold back or boot a bad disk with (local, remote): those checks are skipped. */
  noVmm?: string;
  /** Why its VMs keep the names their backend gives them rather than the spec's hostname (Custom HTTP): that check is skipped. */
  foreignHostname?: string;
}

/** Runs the provider contract against the provider `make` builds. */
export function providerContract(name: string, o: ContractOptions): void {
  let paths: Paths;
  let provider: Provider;
  let rootfs: string;
  const made: Vm[] = [];
  let n = 0;
  const id = (what: string) => `contract-${what}-${n++}`;
  const vmsDir = () => o.vmsDir?.(paths) ?? paths.vmsDir;

  before(async () => {
    const dir = await testDataDir();
    removeAtExit(dir);
    paths = pathsFor(dir);
    provider = o.make(paths, {});
    rootfs = (await resolveImage(paths, DEFAULT_IMAGE)).rootfs;
  });

  after(async () => {
    await Promise.all(made.map((vm) => vm.destroy()));
    await provider?.destroyAll();
    assert.deepEqual(await readdir(vmsDir()).catch(() => []), [], "every VM of the contract is gone");
  });

  const spawn = async (spec: Parameters<Provider["spawn"]>[0]) => {
    const vm = await provider.spawn(spec);
    made.push(vm);
    return vm;
  };

  describe(`provider contract: ${name}`, () => {
    it("reports its health, its limits and what a snapshot depends on", async () => {
      const h = await provider.health();
      assert.equal(h.name, provider.name);
      assert.equal(h.healthy, true, h.problems.join("; "));
      assert.ok(provider.maxVcpus() >= 1);
      const key = await provider.machineKey();
      assert.equal(typeof key, "string");
      assert.equal(await provider.machineKey(), key, "the machine key is stable");
      const nic = await provider.nicProblem();
      assert.ok(nic === null || typeof nic === "string");
      assert.equal(await provider.probe(), true);
    });

    it("boots a VM whose agent answers, with the disk, memory and vCPUs asked for", async () => {
      const vm = await spawn({ id: id("boot"), rootfs, memoryMb: 256, vcpus: 1, diskMb: 1024, hostname: "contract" });
      assert.ok(vm.info.bootMs > 0);
      const r = await vm.guest.execBuffered({ cmd: "hostname; nproc; df -m / | tail -1 | awk '{print $2}'" });
      const [host, cpus, diskMb] = r.stdout.toString().trim().split("\n");
      if (!o.foreignHostname) assert.equal(host, "contract");
      if (provider.features.isolation === "vm") {
        assert.equal(cpus, "1");
        assert.ok(Number(diskMb) > 900, `the root filesystem has ${diskMb} MiB`);
      }
      await vm.guest.writeFile("/root/contract.txt", "bytes");
      assert.equal((await vm.guest.readFileBuffer("/root/contract.txt")).toString(), "bytes");
    });

    it("destroy stops the VM and leaves nothing behind; a second destroy is harmless", async () => {
      const vm = await spawn({ id: id("destroy"), memoryMb: 128, vcpus: 1 });
      const { pid, dir } = vm.info;
      await vm.destroy();
      if (pid > 0) assert.equal(alive(pid), false); // (a sandbox elsewhere has no process here)
      await assert.rejects(stat(dir), { code: "ENOENT" });
      await vm.destroy();
      await vm.exited;
    });

    it("says when the VM stops by itself (exited) and its channel closes", async () => {
      const vm = await spawn({ id: id("exit"), memoryMb: 128, vcpus: 1 });
      const closed = new Promise((r) => vm.guest.once("close", r));
      await vm.guest.request<"shutdown">({ op: "shutdown" });
      await vm.exited;
      await closed;
      await vm.destroy();
    });

    it("refuses a spec no VM can be made from, before launching anything", async () => {
      const [mem, cpu] = [id("mem"), id("cpu")];
      await assert.rejects(provider.spawn({ id: "Bad Id", memoryMb: 128, vcpus: 1 }), /id "Bad Id"/);
      await assert.rejects(provider.spawn({ id: mem, memoryMb: 1, vcpus: 1 }), /memoryMb must be/);
      await assert.rejects(provider.spawn({ id: cpu, memoryMb: 128, vcpus: 0 }), /vcpus must be/);
      const dirs = await readdir(vmsDir()).catch(() => [] as string[]);
      assert.ok(![mem, cpu, "Bad Id"].some((d) => dirs.includes(d)), "nothing was launched");
    });

    it("fails with a BootError carrying the console when the guest does not come up, and cleans up", async (t) => {
      if (o.noVmm) return t.skip(o.noVmm);
      const silent = id("silent");
      const err = await provider.spawn({ id: silent, memoryMb: 128, vcpus: 1, bootTimeoutMs: 1500, qemuArgs: ["-S"] }).then(
        () => null,
        (e) => e,
      );
      assert.ok(err instanceof BootError, String(err));
      assert.match(err.message, /did not say hello within 1500 ms/);
      await assert.rejects(stat(join(paths.vmsDir, silent)), { code: "ENOENT" });
      const tmp = await mkdtemp(join(paths.dataDir, "bad-"));
      const bad = join(tmp, "bad.ext4");
      await writeFile(bad, Buffer.alloc(8 * 1024 * 1024)); // zeros: no filesystem
      try {
        const e2 = await provider.spawn({ id: id("badroot"), rootfs: bad, memoryMb: 128, vcpus: 1 }).then(
          () => null,
          (e) => e,
        );
        assert.ok(e2 instanceof BootError, String(e2));
        assert.match(e2.consoleTail, /cannot mount root filesystem \/dev\/vda/);
      } finally {
        await rm(tmp, { recursive: true, force: true });
      }
    });

    it("snapshots a running VM and restores copies that carry its memory and disk", async (t) => {
      if (!provider.features.snapshots) return t.skip(`${name} does not take snapshots`);
      const vm = await spawn({ id: id("snap"), rootfs, memoryMb: 256, vcpus: 1 });
      await vm.guest.execBuffered({ cmd: "echo on-disk > /root/f; sync" });
      const dir = await mkdtemp(join(paths.dataDir, "snap-"));
      const cap = await vm.snapshot(dir);
      assert.ok(cap.bytes > 0);
      const copy = await spawn({ id: id("restored"), memoryMb: 256, vcpus: 1, hostname: "copy", restore: { files: cap.files } });
      assert.equal(copy.info.restored, true);
      assert.equal((await copy.guest.execBuffered({ cmd: "cat /root/f; hostname" })).stdout.toString(), "on-disk\ncopy\n");
      assert.equal((await vm.guest.execBuffered({ cmd: "cat /root/f" })).stdout.toString(), "on-disk\n", "the source runs on");
      await copy.destroy();
      await vm.destroy();
      await rm(dir, { recursive: true, force: true });
    });

    it("hands its VMs over to a later provider on the same data directory (re-attach)", async (t) => {
      if (!provider.features.reattach) return t.skip(`${name} VMs do not outlive their server`);
      const first = o.make(paths, { killOnExit: false });
      const vm = await first.spawn({ id: id("handover"), rootfs, memoryMb: 256, vcpus: 1 });
      vm.release(); // as if its server had died
      assert.ok(alive(vm.info.pid), "the VM runs on without its provider");
      const second = o.make(paths, {});
      const again = await second.attach({ id: vm.info.id, pid: vm.info.pid, dir: vm.info.dir, memoryMb: 256, vcpus: 1 });
      made.push(again);
      assert.equal((await again.guest.execBuffered({ cmd: "echo still here" })).stdout.toString(), "still here\n");
      await again.destroy();
      assert.equal(alive(vm.info.pid), false);
      await second.destroyAll();
    });

    it("sweeps the VM directories no live server owns", async () => {
      const orphan = join(vmsDir(), id("orphan"));
      await mkdir(orphan, { recursive: true });
      await writeFile(join(orphan, "manager.pid"), "999999999\n");
      const removed = await provider.sweepOrphans(new Set(made.filter((v) => alive(v.info.pid)).map((v) => v.info.id)), async () => false);
      assert.ok(removed.includes(orphan.split("/").pop()!), `removed ${removed.join(", ")}`);
      await waitFor(
        () =>
          stat(orphan).then(
            () => false,
            () => true,
          ),
        5000,
        "the orphan directory to go",
      );
    });
  });
}
