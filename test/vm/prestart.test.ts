// Prestarted VMMs with real VMs: after a spawn restores a base snapshot, a QEMU is started ahead
// for the next one, its state loaded and its guest held (no CPU, nothing visible); the next
// spawn lets it run as a sandbox of its own (its id, hostname, machine id, normal priority); one
// whose QEMU died is never handed out, and the spawn restores as usual.
import assert from "node:assert/strict";
import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { after, before, describe, it } from "node:test";
import type { Forge, Sandbox } from "../../src/index.js";
import { Qmp } from "../../src/providers/qemu/qmp.js";
import { assertNoVmLeft, openForge, waitFor } from "../helpers.js";

const out = async (sb: Sandbox, cmd: string) => (await sb.exec(cmd)).stdout.trim();
/** Fields of /proc/PID/stat after the command name (index 0 is field 3). */
const stat = async (pid: number) => (await readFile(`/proc/${pid}/stat`, "utf8")).split(") ")[1].split(" ");
const cpuTicks = async (pid: number) => {
  const f = await stat(pid);
  return Number(f[11]) + Number(f[12]);
};

let forge: Forge;
before(async () => {
  forge = await openForge({ prestart: 1 });
});
after(async () => {
  await forge.close();
  await assertNoVmLeft(forge);
});

const ready = () => (forge.pools.status().prestarted as { ready: number }).ready;

/** The VM directories no sandbox owns: the prestarted VMMs'. */
async function heldDirs(): Promise<string[]> {
  const live = new Set(forge.sandboxes.list().map((r) => r.id));
  return (await readdir(forge.paths.vmsDir)).filter((d) => d.startsWith("sb-") && !live.has(d));
}

describe("prestarted VMMs", () => {
  let first: Sandbox;
  let held: string;

  it("a spawn that restored a base snapshot leaves a VMM started for the next: state loaded, guest held, invisible", async () => {
    first = await forge.sandboxes.spawn();
    assert.equal(forge.sandboxes.get(first.id).origin, "snapshot");
    await waitFor(() => ready() === 1, 60_000, "a prestarted VMM");
    assert.deepEqual(
      forge.sandboxes.list().map((r) => r.id),
      [first.id],
    );
    const dirs = await heldDirs();
    assert.equal(dirs.length, 1);
    held = dirs[0];
    const qmp = await Qmp.connect(join(forge.paths.vmsDir, held, "qmp.sock"));
    try {
      // "paused": the snapshot's state is in, and the guest has not run an instruction since.
      assert.equal((await qmp.execute<{ status: string }>("query-status")).status, "paused");
    } finally {
      qmp.close();
    }
    const pid = Number((await readFile(join(forge.paths.vmsDir, held, "qemu.pid"), "utf8")).trim());
    const before = await cpuTicks(pid);
    await sleep(1000);
    assert.ok((await cpuTicks(pid)) - before <= 5, "a held VMM uses (almost) no CPU");
    assert.equal(Number((await stat(pid))[16]), 10, "it waits at low priority");
    // doctor says so.
    const qemu = (await forge.providers.list()).find((p) => p.name === "qemu")!;
    assert.match(qemu.details.prestarted_vmms, /^1 per base snapshot .*: 1 ready for 1 base$/);
  });

  it("the next spawn lets it run as a sandbox of its own: its id, hostname and machine id, normal priority", async () => {
    const sb = await forge.sandboxes.spawn();
    try {
      assert.equal(forge.sandboxes.get(sb.id).origin, "prestarted");
      assert.equal(sb.id, held);
      assert.equal(forge.sandboxes.get(sb.id).state, "running");
      assert.equal(await out(sb, "hostname"), sb.id);
      assert.notEqual(await out(sb, "cat /etc/machine-id"), await out(first, "cat /etc/machine-id"));
      assert.equal(Number((await stat(sb.vm.info.pid))[16]), 0);
      // Its disk is its own overlay over the base: what the first sandbox wrote is not there.
      await out(first, "echo mine > /root/first.txt");
      assert.notEqual((await sb.exec("cat /root/first.txt")).exitCode, 0);
      assert.equal(await out(sb, "echo ok > /root/x && cat /root/x && date +%Y"), `ok\n${new Date().getUTCFullYear()}`);
      // And the spawn asked for another.
      await waitFor(() => ready() === 1, 60_000, "the next prestarted VMM");
      assert.notEqual((await heldDirs())[0], sb.id);
    } finally {
      await sb.destroy();
    }
  });

  it("a hostname asked for is the one the guest gets", async () => {
    await waitFor(() => ready() === 1, 60_000, "a prestarted VMM");
    const sb = await forge.sandboxes.spawn({ hostname: "box-one" });
    try {
      assert.equal(forge.sandboxes.get(sb.id).origin, "prestarted");
      assert.equal(await out(sb, "hostname"), "box-one");
    } finally {
      await sb.destroy();
    }
  });

  it("one whose QEMU died is not handed out: the spawn restores as usual", async () => {
    await waitFor(() => ready() === 1, 60_000, "a prestarted VMM");
    const [dir] = await heldDirs();
    const pid = Number((await readFile(join(forge.paths.vmsDir, dir, "qemu.pid"), "utf8")).trim());
    process.kill(pid, "SIGKILL");
    await waitFor(() => ready() === 0, 10_000, "the dead VMM to count as gone");
    const sb = await forge.sandboxes.spawn();
    try {
      assert.equal(forge.sandboxes.get(sb.id).origin, "snapshot");
      assert.notEqual(sb.id, dir);
      assert.equal(await out(sb, "echo alive"), "alive");
      await waitFor(async () => !(await readdir(forge.paths.vmsDir)).includes(dir), 10_000, "the dead VMM's directory to go");
    } finally {
      await sb.destroy();
      await first.destroy();
    }
  });
});
