// VMs a previous server process left: taking one over (its QEMU runs detached and its sockets
// survive), and removing those no live server owns.
import { readdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { basename, join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { AgentChannel } from "../../agent-client/index.js";
import { processAlive } from "../../util/process.js";
import type { Accel, AttachSpec, VmInfo } from "../provider.js";
import { emptyAndRemoveCgroup, sweepVmCgroups } from "../cgroups.js";
import { ConsoleLog } from "../console-log.js";
import { awaitHello, configure } from "../handshake.js";
import { MAPPED_RAM } from "./ram-file.js";
import { QemuVm } from "./qemu-vm.js";
import { isQemuCommand, limitFields, type QemuRuntime } from "./runtime.js";
import { connectQemuSocket } from "./unix-socket.js";

/**
 * Takes over a VM that a previous ForgeVM process started and left running: checks that the
 * pid is still that VM's QEMU, reconnects to its console and agent sockets, skips whatever
 * half-frame the old connection left, and waits for the agent's fresh HELLO.
 */
export async function attach(rt: QemuRuntime, a: AttachSpec, accel: Accel): Promise<QemuVm> {
  const cmdline = await readFile(`/proc/${a.pid}/cmdline`, "utf8").catch(() => "");
  if (!isQemuCommand(cmdline) || !cmdline.includes(join(a.dir, "agent.sock"))) {
    throw new Error(`process ${a.pid} is not the QEMU of VM ${a.id}`);
  }
  const exited = new Promise<void>((resolve) => {
    const t = setInterval(() => {
      if (!processAlive(a.pid)) {
        clearInterval(t);
        resolve();
      }
    }, 250);
    t.unref();
  });
  const owner = (await stat(a.dir)).uid; // a confined VM's own uid, kept from reuse
  if (owner !== 0) rt.uids.add(owner);
  const consoleLog = new ConsoleLog(join(a.dir, "console.log"));
  const cleanup = async () => {
    consoleLog.close();
    rt.uids.delete(owner);
    try {
      process.kill(a.pid, "SIGKILL");
    } catch {
      // already gone
    }
    // Not our child: poll until it is gone (or a zombie) before its files go.
    while (processAlive(a.pid)) await sleep(10);
    await rm(a.dir, { recursive: true, force: true });
    // Its cgroup may still count it for a moment (it is not our child to reap): tried until it goes.
    // (named by its directory: a VM started ahead as a blank one keeps its own id there, blank-vmms.ts)
    if (rt.cgroups) await emptyAndRemoveCgroup(rt.cgroups, basename(a.dir));
  };
  const started = performance.now();
  try {
    consoleLog.attach(await connectQemuSocket(join(a.dir, "console.sock")));
    const channel = new AgentChannel(await connectQemuSocket(join(a.dir, "agent.sock")), { resync: true });
    const hello = await awaitHello(channel, { deadlineMs: a.helloTimeoutMs ?? 10_000, exited }).catch((e: Error) => {
      throw new Error(`cannot re-attach to VM ${a.id}: ${e.message}`);
    });
    await configure(channel, { time_ms: Date.now(), ...limitFields(rt) });
    await writeFile(join(a.dir, "manager.pid"), `${process.pid}\n`);
    const info: VmInfo = {
      id: a.id,
      pid: a.pid,
      dir: a.dir,
      accel,
      memoryMb: a.memoryMb,
      vcpus: a.vcpus,
      agentVersion: hello.agent,
      bootMs: Math.round(performance.now() - started),
      restored: false,
    };
    // A forkable VM's RAM file is in its directory, and it goes on being that VM's.
    const ram = join(a.dir, "memory");
    const forkable = await stat(ram).then(
      (s) => s.isFile(),
      () => false,
    );
    if (forkable) info.forkable = true;
    // A restored VM's snapshot RAM file, linked there too: its pauses go on storing deltas.
    const mapped = join(a.dir, MAPPED_RAM);
    const maps = await stat(mapped).then(
      (s) => s.isFile(),
      () => false,
    );
    const vm = new QemuVm(info, channel, consoleLog, exited, cleanup, () => rt.live.delete(vm), forkable ? ram : undefined, maps ? mapped : undefined);
    rt.live.add(vm);
    return vm;
  } catch (e) {
    consoleLog.close();
    throw e;
  }
}

/**
 * Removes VM directories that no live server owns and `keep` does not name: their QEMU (by
 * the pid it wrote, and only if its command line names that directory) and their files.
 * Warm-pool, pool-mode and base-snapshot VMs have no sandbox row; after a crash this is what
 * cleans them up. Returns the ids removed.
 */
export async function sweepOrphans(rt: QemuRuntime, keep: Set<string>, isLiveServer: (pid: number) => Promise<boolean>): Promise<string[]> {
  const removed: string[] = [];
  for (const id of await readdir(rt.paths.vmsDir).catch(() => [] as string[])) {
    if (keep.has(id)) continue;
    const dir = join(rt.paths.vmsDir, id);
    const manager = Number((await readFile(join(dir, "manager.pid"), "utf8").catch(() => "")).trim());
    // A live VM of this process (its directory may be named otherwise than its sandbox: blank-vmms.ts).
    if ([...rt.live].some((vm) => vm.info.dir === dir)) continue;
    if (manager && manager !== process.pid && (await isLiveServer(manager))) continue;
    if ([...rt.launching.values()].includes(dir)) continue;
    const pid = Number((await readFile(join(dir, "qemu.pid"), "utf8").catch(() => "")).trim());
    if (pid) {
      const cmd = await readFile(`/proc/${pid}/cmdline`, "utf8").catch(() => "");
      if (isQemuCommand(cmd) && cmd.includes(dir)) {
        try {
          process.kill(pid, "SIGKILL");
        } catch {
          // gone meanwhile
        }
        for (let i = 0; i < 200 && processAlive(pid); i++) await sleep(10);
      }
    }
    await rm(dir, { recursive: true, force: true });
    removed.push(id);
  }
  // cgroups of VMs that are gone (a live VM's cgroup is busy and stays)
  if (rt.cgroups) await sweepVmCgroups(rt.cgroups);
  return removed;
}
