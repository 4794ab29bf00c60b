// Resource walls with real VMs: a guest that fills its disk hits its own quota, not the host's.
import assert from "node:assert/strict";
import { lstat, readdir, stat } from "node:fs/promises";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { assertNoVmLeft, testForge, waitFor } from "../helpers.js";

after(async () => {
  await assertNoVmLeft(await testForge());
});

describe("disk quota", () => {
  it("a guest filling its disk gets ENOSPC; the overlay stays within the quota and the host keeps its space", async () => {
    const forge = await testForge();
    const DISK_MB = 600;
    const sb = await forge.sandboxes.spawn({ diskMb: DISK_MB });
    const dir = sb.vm.info.dir;
    // What the sandbox's files (its overlay, RAM file, sockets, logs) take on the host's disk: the
    // filesystem's free space would count the writes of whatever else runs beside the test.
    const hostBytes = async (d: string): Promise<number> => {
      let sum = 0;
      for (const e of await readdir(d, { withFileTypes: true })) {
        const p = join(d, e.name);
        sum += e.isDirectory() ? await hostBytes(p) : (await lstat(p)).blocks * 512;
      }
      return sum;
    };
    const before = await hostBytes(dir);
    try {
      const r = await sb.exec("dd if=/dev/zero of=/root/fill bs=1M 2>&1; echo dd=$?; sync; df -m / | tail -1", { timeoutMs: 120_000 });
      assert.match(r.stdout, /No space left on device/);
      assert.match(r.stdout, /^dd=1$/m);
      const avail = Number(r.stdout.trim().split("\n").at(-1)!.split(/\s+/)[3]);
      assert.ok(avail <= 1, `the guest's disk is full (${avail} MiB available)`);
      // The overlay holds only what the guest wrote, bounded by the quota.
      let overlay = 0;
      for (const f of await readdir(dir)) if (f.endsWith(".qcow2")) overlay += (await stat(join(dir, f))).blocks * 512;
      assert.ok(overlay <= DISK_MB * 1024 * 1024 * 1.05, `overlay uses ${overlay} bytes for a ${DISK_MB} MiB disk`);
      const grew = (await hostBytes(dir)) - before;
      assert.ok(grew <= DISK_MB * 1024 * 1024 * 1.05, `the host lost no more than the quota (${grew} bytes)`);
      // The sandbox still works once space is freed.
      assert.equal((await sb.exec("rm /root/fill; echo ok")).stdout, "ok\n");
    } finally {
      await sb.destroy();
    }
  });
});

describe("process and memory limits in the guest", () => {
  it("puts every exec in a cgroup with a pids limit and memory kept back for the agent", async () => {
    const forge = await testForge();
    const sb = await forge.sandboxes.spawn();
    try {
      const r = await sb.exec("cat /proc/self/cgroup /sys/fs/cgroup/sandbox/pids.max /sys/fs/cgroup/sandbox/memory.max /proc/meminfo; echo $$");
      const [cg, pids, memMax] = r.stdout.split("\n");
      // Its own cgroup below the sandbox's, named for its first process.
      assert.equal(cg, `0::/sandbox/x${r.stdout.trim().split("\n").at(-1)}`);
      assert.equal(pids, "1024");
      const total = Number(/^MemTotal:\s+(\d+) kB/m.exec(r.stdout)![1]) * 1024;
      assert.equal(total - Number(memMax), 48 * 1024 * 1024);
      // background processes stay in it too, whatever session they move to
      const bg = await sb.exec("setsid sleep 30 & sleep 0.2; cat /proc/$!/cgroup; echo $$");
      assert.equal(bg.stdout.split("\n")[0], `0::/sandbox/x${bg.stdout.trim().split("\n").at(-1)}`);
    } finally {
      await sb.destroy();
    }
  });

  it("a fork bomb hits the pids limit; the server, another sandbox and its own agent stay responsive", async () => {
    const forge = await testForge();
    const [bomber, other] = await Promise.all([forge.sandboxes.spawn(), forge.sandboxes.spawn()]);
    try {
      const bomb = bomber.execStream("bash -c ':(){ :|:& };:'; sleep 60", { timeoutMs: 60_000 });
      let stderr = "";
      bomb.stderr.on("data", (d: Buffer) => (stderr += d));
      const stderrEnded = new Promise<void>((r) => bomb.stderr.once("end", () => r()));
      bomb.stdout.resume();
      // Until the limit has refused forks (how soon depends on the emulated CPU's speed) and bash has said so,
      // and a few rounds more: the refusal is counted before the refused shell writes its message.
      const refused = /fork: (retry: )?Resource temporarily unavailable/;
      let peak = 0;
      let roundsAfter = 0;
      const until = Date.now() + 40_000;
      // The agent's guard ends the bomb's group at the first refused fork; the refused shell may or
      // may not have written its message by then (a race the guest's scheduler decides), so either
      // the message or the guard's own line on the console says the limit held.
      const guarded = () => bomber.vm.consoleTail().includes("reached the sandbox's task limit");
      let ended = false;
      while ((peak === 0 || roundsAfter < 3 || !(refused.test(stderr) || ended)) && Date.now() < until) {
        await new Promise((r) => setTimeout(r, 700));
        if (peak > 0) roundsAfter++;
        // the other sandbox answers commands, and the bomber's agent answers file operations
        const t = performance.now();
        assert.equal((await other.exec("echo ok", { timeoutMs: 10_000 })).stdout, "ok\n");
        assert.ok(performance.now() - t < 5000, "the other sandbox answered within 5 s");
        const events = (await bomber.readFile("/sys/fs/cgroup/sandbox/pids.events", 4096)).toString();
        peak = Math.max(peak, Number(/^max (\d+)/m.exec(events)?.[1] ?? 0));
        const current = Number((await bomber.readFile("/sys/fs/cgroup/sandbox/pids.current", 64)).toString());
        assert.ok(current <= 1024, `pids.current ${current} stays within the limit`);
        ended = guarded();
      }
      assert.ok(peak > 0, "the bomb was refused forks (pids.events max > 0)");
      // The agent's guard may have ended the bomb's group already (the exec with it).
      await bomb.signal(9).catch(() => {});
      const r = await bomb.result;
      assert.equal(r.exit_code, 137, `the bomb ended with ${JSON.stringify(r)}`);
      // The exit can arrive before the last of the output: read to its end first.
      await Promise.race([stderrEnded, new Promise((res) => setTimeout(res, 10_000))]);
      assert.ok(refused.test(stderr) || guarded(), `bash said its fork was refused, or the guard ended its group: stderr ${stderr.slice(-500)}`);
      // Killing the bomb's process group ended it; the sandbox works again.
      assert.equal((await bomber.exec("echo alive", { timeoutMs: 30_000 })).stdout, "alive\n");
    } finally {
      await Promise.all([bomber.destroy(), other.destroy()]);
    }
  });

  it("a fork bomb whose processes call setsid() is ended by its exec's cgroup, commands run again, and a restart brings none of it back", async () => {
    const forge = await testForge();
    const sb = await forge.sandboxes.spawn();
    try {
      // Every process in a session and group of its own, so no process group holds the bomb; the exec returns at once.
      await sb.writeFile("/tmp/bomb.py", "import os, time\nwhile True:\n    try:\n        os.fork()\n        os.setsid()\n    except OSError:\n        time.sleep(0.05)\n");
      await sb.exec("python3 /tmp/bomb.py >/dev/null 2>&1 & exit 0", { timeoutMs: 60_000 });
      const refusals = async () => Number(/^max (\d+)/m.exec((await sb.readFile("/sys/fs/cgroup/sandbox/pids.events", 4096)).toString())?.[1] ?? 0);
      await waitFor(async () => (await refusals()) > 0, 60_000, "the bomb to reach the task limit");
      const forks = async () => (await sb.exec("echo $(echo forked)", { timeoutMs: 10_000 }).catch(() => null))?.stdout === "forked\n";
      await waitFor(forks, 60_000, "a command that forks to run again");
      const current = Number((await sb.readFile("/sys/fs/cgroup/sandbox/pids.current", 64)).toString());
      assert.ok(current < 64, `the bomb is gone (${current} tasks left in the sandbox)`);
      assert.ok(sb.vm.consoleTail().includes("reached the sandbox's task limit"), "the console says what the agent ended");
      // A stop ends every process, not the main one alone: what starts again is the sandbox's own.
      await sb.exec("nohup setsid sleep 700 >/dev/null 2>&1 &");
      await forge.sandboxes.stop(sb.id, 1000);
      const back = await forge.sandboxes.start(sb.id);
      assert.equal((await back.exec("pgrep -x sleep >/dev/null && echo some || echo none")).stdout, "none\n");
    } finally {
      await forge.sandboxes.destroy(sb.id);
    }
  });

  it("a fork bomb that outlives its exec is ended by the agent, and commands that fork run again", async () => {
    const forge = await testForge();
    const sb = await forge.sandboxes.spawn();
    try {
      // bash returns at once; the bomb goes on in the background, holding every task the limit allows.
      await sb.exec("bash -c ':(){ :|:& };:' >/dev/null 2>&1", { timeoutMs: 30_000 });
      // Until the bomb fills the limit a command forks as usual: first the kernel's word that it did.
      const refusals = async () => Number(/^max (\d+)/m.exec((await sb.readFile("/sys/fs/cgroup/sandbox/pids.events", 4096)).toString())?.[1] ?? 0);
      await waitFor(async () => (await refusals()) > 0, 60_000, "the bomb to reach the task limit");
      const forks = async () => (await sb.exec("echo $(echo forked)", { timeoutMs: 10_000 }).catch(() => null))?.stdout === "forked\n";
      await waitFor(forks, 60_000, "a command that forks to run again");
      const current = Number((await sb.readFile("/sys/fs/cgroup/sandbox/pids.current", 64)).toString());
      assert.ok(current < 64, `the bomb is gone (${current} tasks left in the sandbox)`);
      assert.ok(sb.vm.consoleTail().includes("reached the sandbox's task limit"), "the console says what the agent ended");
    } finally {
      await sb.destroy();
    }
  });
});

describe("output caps", () => {
  it("a buffered exec keeps at most maxOutputBytes of each stream and says it truncated", async () => {
    const forge = await testForge();
    const sb = await forge.sandboxes.spawn();
    try {
      const r = await sb.exec("head -c 3000000 /dev/zero | tr '\\0' a; head -c 5000 /dev/zero | tr '\\0' b >&2", { maxOutputBytes: 1000 });
      assert.equal(r.exitCode, 0);
      assert.equal(r.truncated, true);
      assert.equal(r.stdout, "a".repeat(1000));
      assert.equal(r.stderr, "b".repeat(1000));
      // control: output under the cap is whole
      const small = await sb.exec("printf 12345", { maxOutputBytes: 1000 });
      assert.equal(small.truncated, false);
      assert.equal(small.stdout, "12345");
    } finally {
      await sb.destroy();
    }
  });
});
