// The confined VMM, checked from the host side: each QEMU runs as a uid of its own, in a mount
// namespace where the server's files and other VMs' files do not exist, and cannot read another
// VM's overlay even where it could name it. Controls: the same checks on its own files succeed.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { existsSync, readFileSync, readlinkSync, statSync } from "node:fs";
import { createServer } from "node:net";
import { join } from "node:path";
import { promisify } from "node:util";
import { after, before, describe, it } from "node:test";
import type { Sandbox } from "../../src/index.js";
import { UID_BASE } from "../../src/providers/qemu/jail.js";
import { cgroupVersion, createVmCgroup, removeVmCgroup, SWEEP_MIN_AGE_MS, sweepVmCgroups, vmCgroupDirs } from "../../src/providers/cgroups.js";
import { testForge } from "../helpers.js";

const execFileP = promisify(execFile);
const root = process.getuid?.() === 0;

/** Runs a command as the VMM `pid` sees the world: its uid and gid, inside its mount namespace. */
async function asVmm(pid: number, uid: number, cmd: string, namespaces: string[] = []): Promise<{ code: number; out: string }> {
  try {
    const { stdout, stderr } = await execFileP("nsenter", ["--target", String(pid), "--mount", ...namespaces, `--setuid=${uid}`, `--setgid=${uid}`, "--", "/bin/sh", "-c", cmd]);
    return { code: 0, out: stdout + stderr };
  } catch (e) {
    const err = e as { code?: number; stdout?: string; stderr?: string };
    return { code: typeof err.code === "number" ? err.code : 1, out: `${err.stdout ?? ""}${err.stderr ?? ""}` };
  }
}

describe("confined VMM", { skip: root ? false : "the jail needs a root server" }, () => {
  let a: Sandbox;
  let b: Sandbox;
  const vmm = (sb: Sandbox) => ({ pid: sb.vm.info.pid, dir: sb.vm.info.dir, uid: statSync(`/proc/${sb.vm.info.pid}`).uid });

  before(async () => {
    const forge = await testForge();
    [a, b] = await Promise.all([forge.sandboxes.spawn(), forge.sandboxes.spawn()]);
  });
  after(async () => {
    await Promise.all([a?.destroy(), b?.destroy()]);
  });

  it("runs each QEMU as an unprivileged uid of its own, with no_new_privs, seccomp and rlimits", () => {
    const va = vmm(a),
      vb = vmm(b);
    assert.ok(va.uid >= UID_BASE && vb.uid >= UID_BASE, `uids ${va.uid}, ${vb.uid}`);
    assert.notEqual(va.uid, vb.uid);
    const status = readFileSync(`/proc/${va.pid}/status`, "utf8");
    assert.match(status, new RegExp(`^Uid:\\s+${va.uid}\\s+${va.uid}\\s+${va.uid}\\s+${va.uid}$`, "m"));
    assert.match(status, /^Groups:\s*$/m);
    assert.match(status, /^NoNewPrivs:\s+1$/m);
    assert.match(status, /^Seccomp:\s+2$/m);
    assert.match(status, /^CapEff:\s+0+$/m);
    const limits = readFileSync(`/proc/${va.pid}/limits`, "utf8");
    assert.match(limits, /^Max core file size\s+0\s+0/m);
    assert.match(limits, /^Max open files\s+4096\s+4096/m);
    assert.doesNotMatch(limits, /^Max address space\s+unlimited/m);
    // nothing of the server's environment (an API key could be there)
    assert.deepEqual(
      readFileSync(`/proc/${va.pid}/environ`, "utf8")
        .split("\0")
        .filter(Boolean)
        .map((kv) => kv.split("=")[0])
        .filter((k) => k !== "PATH" && k !== "LD_PRELOAD" && k !== "FORGEVM_RO_FILE"),
      [],
    );
    assert.notEqual(readlinkSync(`/proc/${va.pid}/ns/mnt`), readlinkSync("/proc/self/ns/mnt"));
  });

  it("cannot read another VM's overlay: not there in its namespace, and not readable by its uid", async () => {
    const va = vmm(a),
      vb = vmm(b);
    // control: its own overlay is there and readable (the qcow2 magic "QFI\xfb")
    const own = await asVmm(va.pid, va.uid, `head -c 3 ${join(va.dir, "disk.qcow2")}`);
    assert.equal(own.code, 0, own.out);
    assert.equal(own.out, "QFI");
    // the other VM's directory does not exist in its mount namespace
    const other = await asVmm(va.pid, va.uid, `head -c 3 ${join(vb.dir, "disk.qcow2")}`);
    assert.notEqual(other.code, 0);
    assert.match(other.out, /No such file or directory/);
    assert.equal((await asVmm(va.pid, va.uid, `ls ${join(vb.dir, "..")}`)).out.trim(), a.vm.info.id);
    // Even where the path exists (in b's namespace), a's uid is refused by b's directory's
    // permissions; control: b's uid reads it there.
    const dac = await asVmm(vb.pid, va.uid, `head -c 3 ${join(vb.dir, "disk.qcow2")}`);
    assert.notEqual(dac.code, 0);
    assert.match(dac.out, /Permission denied/);
    assert.equal((await asVmm(vb.pid, vb.uid, `head -c 3 ${join(vb.dir, "disk.qcow2")}`)).out, "QFI");
    const st = statSync(vb.dir);
    assert.equal(st.uid, vb.uid);
    assert.equal(st.mode & 0o077, 0, "a VM directory is private to its uid");
  });

  it("has no network: its own namespace with a loopback that is down, so no host service is reachable", async () => {
    const va = vmm(a);
    const listener = createServer((c) => {
      c.on("error", () => {}); // the probe may close before reading all
      c.end("host service\n");
    });
    await new Promise<void>((r) => listener.listen(0, "127.0.0.1", r));
    const port = (listener.address() as { port: number }).port;
    try {
      const probe = `exec 3<>/dev/tcp/127.0.0.1/${port} && head -c 12 <&3`;
      // control: from the host's namespace the listener answers
      const { stdout } = await execFileP("bash", ["-c", probe]);
      assert.equal(stdout, "host service");
      assert.notEqual(readlinkSync(`/proc/${va.pid}/ns/net`), readlinkSync("/proc/self/ns/net"));
      const inside = await asVmm(va.pid, va.uid, `cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '; bash -c '${probe}' 2>&1`, ["--net"]);
      assert.equal(inside.out.split("\n")[0], "lo");
      assert.doesNotMatch(inside.out, /host service/);
      assert.match(inside.out, /Network is unreachable|Connection refused|Cannot assign/);
    } finally {
      listener.close();
    }
  });

  it("runs in a host cgroup of its own with memory, CPU and task limits, removed with the VM", { skip: cgroupVersion() ? false : "no usable cgroups on this host" }, async () => {
    const version = cgroupVersion()!;
    const forge = await testForge();
    const sb = await forge.sandboxes.spawn({ memoryMb: 384, vcpus: 1 });
    const id = sb.vm.info.id;
    const dirs = vmCgroupDirs(version, id);
    const own = readFileSync(`/proc/${sb.vm.info.pid}/cgroup`, "utf8");
    assert.match(own, new RegExp(`/forgevm/${id}$`, "m"));
    const read = (d: string, f: string) => readFileSync(join(d, f), "utf8").trim();
    if (version === "v2") {
      assert.equal(read(dirs[0], "memory.max"), String((384 + 512) * 1048576));
      assert.equal(read(dirs[0], "cpu.max"), "200000 100000");
      assert.equal(read(dirs[0], "pids.max"), "256");
    } else {
      assert.equal(read(dirs[0], "memory.limit_in_bytes"), String((384 + 512) * 1048576));
      assert.equal(read(dirs[1], "cpu.cfs_quota_us"), "200000");
      assert.equal(read(dirs[2], "pids.max"), "256");
      // control: the guest's memory use shows up in the VM's cgroup
      await sb.exec("python3 -c 'x=bytearray(200*1024*1024)'");
      assert.ok(Number(read(dirs[0], "memory.max_usage_in_bytes")) > 200 * 1048576);
    }
    await sb.destroy();
    for (const d of dirs) assert.equal(existsSync(d), false, `${d} is removed`);
  });

  it("a server's sweep of leftover cgroups leaves a young empty one (another server's VM being set up) and removes it once old", {
    skip: cgroupVersion() ? false : "no usable cgroups on this host",
  }, async () => {
    const version = cgroupVersion()!;
    const id = `sweep-test-${process.pid}`;
    const dirs = await createVmCgroup(version, id, { memoryBytes: 256 * 1048576, cpus: 1, pidsMax: 64 });
    try {
      await sweepVmCgroups(version);
      for (const d of vmCgroupDirs(version, id)) assert.ok(existsSync(d), `${d} was just made: a sweep leaves it`);
      assert.equal(dirs.length, vmCgroupDirs(version, id).length);
      await sweepVmCgroups(version, Date.now() + SWEEP_MIN_AGE_MS + 1000);
      for (const d of vmCgroupDirs(version, id)) assert.equal(existsSync(d), false, `${d} is old and empty: a sweep removes it`);
    } finally {
      await removeVmCgroup(version, id);
    }
  });

  it("sees none of the server's state: database, snapshots, config, other processes", async () => {
    const forge = await testForge();
    const va = vmm(a);
    const data = forge.paths.dataDir;
    // control: the host sees the database
    assert.ok(statSync(join(data, "forgevm.db")).isFile());
    const seen = await asVmm(va.pid, va.uid, `ls -a ${data}; ls ${join(data, "forgevm.db")} 2>&1; ls /proc | grep -c '^[0-9]'`);
    assert.doesNotMatch(seen.out, /^forgevm\.db$/m);
    assert.match(seen.out, /forgevm\.db'?: No such file or directory/);
    assert.doesNotMatch(seen.out, /^blobs$|^state$|^logs$|^egress$/m);
    // only its own processes in /proc (the shell and its children, the QEMU)
    assert.ok(Number(seen.out.trim().split("\n").at(-1)) < 10, seen.out);
    // what it does see is read-only, except its own directory
    const ro = await asVmm(va.pid, va.uid, `touch ${forge.paths.kernel} 2>&1; touch ${join(va.dir, "probe")} && echo own-ok`);
    assert.match(ro.out, /Read-only file system|Permission denied/);
    assert.match(ro.out, /own-ok/);
  });
});
