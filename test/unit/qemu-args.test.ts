import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { hostTscKhz, kernelCmdline, qemuArgs } from "../../src/providers/qemu/args.js";

const files = { kernel: "/k", initramfs: "/i", agentSocket: "/a.sock", consoleSocket: "/c.sock", qmpSocket: "/q.sock" };

describe("qemu command line", () => {
  it("passes the host TSC rate and turns address-space randomization off under TCG only", () => {
    const spec = { id: "x", memoryMb: 256, vcpus: 2, rootfs: "/img", hostname: "h1" };
    const tcg = qemuArgs(spec, { ...files, disk: "/d.qcow2" }, "tcg", 2596138);
    assert.match(tcg[tcg.indexOf("-append") + 1], /tsc_early_khz=2596138 tsc=reliable norandmaps/);
    const unrated = qemuArgs(spec, files, "tcg");
    assert.match(unrated[unrated.indexOf("-append") + 1], /reboot=t norandmaps/, "without a TSC rate too");
    const kvm = qemuArgs(spec, files, "kvm", 2596138);
    assert.doesNotMatch(kvm[kvm.indexOf("-append") + 1], /tsc_early_khz|norandmaps/);
    assert.equal(kvm[kvm.indexOf("-cpu") + 1], "host");
    assert.equal(tcg[tcg.indexOf("-cpu") + 1], "max,-erms,-fsrm", "every feature TCG has but the fast-string hints");
    assert.equal(tcg[tcg.indexOf("-m") + 1], "256");
    assert.equal(tcg[tcg.indexOf("-smp") + 1], "2");
    assert.ok(tcg.includes("virtio-blk-device,drive=root"));
    assert.ok(!kvm.includes("virtio-blk-device,drive=root"), "no disk device without a disk");
  });

  it("confines QEMU with its seccomp filter, and lays out restores", () => {
    const spec = { id: "x", memoryMb: 256, vcpus: 1 };
    const boot = qemuArgs(spec, files, "tcg");
    assert.match(boot[boot.indexOf("-sandbox") + 1], /^on,.*spawn=deny/);
    assert.match(boot.join(" "), /memory-backend-ram,id=ram0,size=256M/);
    assert.ok(!boot.includes("-incoming"));
    const mapped = qemuArgs(spec, { ...files, memory: { file: "/s/memory", share: false }, incoming: { ignoreShared: true } }, "tcg");
    assert.match(mapped.join(" "), /memory-backend-file,id=ram0,size=256M,mem-path=\/s\/memory,share=off/);
    assert.equal(mapped[mapped.indexOf("-incoming") + 1], "defer");
    assert.ok(mapped.includes("-S"));
    const stream = qemuArgs(spec, { ...files, incoming: { ignoreShared: false } }, "tcg");
    assert.equal(stream[stream.indexOf("-incoming") + 1], "fd:3");
    const capture = qemuArgs(spec, { ...files, memory: { file: "/s/memory", share: true } }, "tcg");
    assert.match(capture.join(" "), /share=on/);
  });

  it("names the root disk and hostname for the agent", () => {
    assert.equal(kernelCmdline({ id: "x", memoryMb: 1, vcpus: 1, rootfs: "/r", hostname: "box" }), "console=ttyS0 quiet panic=-1 reboot=t fvm.root=vda fvm.hostname=box");
  });

  it("reads the host TSC rate from /proc/cpuinfo", () => {
    assert.equal(hostTscKhz("processor\t: 0\ncpu MHz\t\t: 2596.138\n"), 2596138);
    assert.equal(hostTscKhz("processor\t: 0\n"), undefined);
  });
});
