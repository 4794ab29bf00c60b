// Starting one QEMU: its directory and disk overlay, the confined command line, the process
// (a session of its own, so a later server can take it over), a restore's incoming state, the agent's hello
// and configure. Whatever fails on the way is undone. A prestarted VMM stops halfway, before the
// guest's first instruction, and goes on when a spawn takes it.
import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { closeSync, openSync } from "node:fs";
import { chown, mkdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { Writable } from "node:stream";
import { setTimeout as sleep } from "node:timers/promises";
import { AgentChannel } from "../../agent-client/index.js";
import { BootError, type Accel, type PrestartedVm, type VmInfo, type VmSpec } from "../provider.js";
import { qemuArgs, type VmFiles } from "./args.js";
import { removeVmCgroup } from "../cgroups.js";
import { ConsoleLog } from "../console-log.js";
import { awaitHello, configure, HelloError } from "../handshake.js";
import { JAIL_PRELOAD, allocateUid } from "./jail.js";
import { jailPrefix } from "./jail-command.js";
import { loadState, letRun } from "./migration.js";
import { streamLeavesRamOut } from "./ram-delta.js";
import { Qmp } from "./qmp.js";
import { createOverlay } from "./overlay-file.js";
import { QemuVm, setAutogroupNice, setVmmNice } from "./qemu-vm.js";
import { MAPPED_RAM, giveRam, prepareRam } from "./ram-file.js";
import { limitFields, type QemuRuntime } from "./runtime.js";
import { connectQemuSocket, waitForSockets } from "./unix-socket.js";
import { BLANK_INCOMING, type BlankDisk, type Vmm, type VmmProcess } from "./vmm.js";
import { ignore } from "../../util/ignore.js";

const MAX_SOCKET_PATH = 107; // sun_path holds 108 bytes including the NUL

/** The guest's side of QEMU's user-mode network (its defaults). */
const USER_NET = { addr: "10.0.2.15", netmask: "255.255.255.0", gateway: "10.0.2.2", dns: "10.0.2.3" };

/** Boots (or restores) one VM and returns it once its agent has said hello and been configured. */
export async function launch(rt: QemuRuntime, spec: VmSpec, accel: Accel): Promise<QemuVm> {
  const t0 = performance.now();
  const blank = await rt.blanks?.take(spec);
  const vmm = blank ?? (await startVmm(rt, spec, accel));
  try {
    // A blank VMM's boot time counts from the restore that took it.
    return await runGuest(rt, vmm, spec, accel, blank ? t0 : vmm.started);
  } catch (e) {
    await vmm.cleanup();
    throw e;
  } finally {
    rt.launching.delete(vmm.proc.pid!);
  }
}

/**
 * Starts a VMM for a restore of `spec.restore` ahead of demand: its files and devices made and
 * the snapshot's state loaded, the guest held before its first instruction (no guest RAM is
 * touched yet: the snapshot's is mapped, copy-on-write). `start` then only lets it run. Under
 * KVM the VM and its vCPUs are created at QEMU's start too, so that is saved as well; under TCG
 * what `start` still pays is mostly the guest's code translated afresh in this new process.
 */
export async function prestart(rt: QemuRuntime, spec: VmSpec, accel: Accel): Promise<PrestartedVm> {
  if (!spec.restore || spec.restore.feed || spec.restore.guest || spec.restore.adoptMemory) throw new Error("only a restore from snapshot files can be prestarted");
  const vmm = await startVmm(rt, spec, accel);
  let taken = false;
  let alive = true;
  void vmm.exited.then(() => (alive = false));
  const release = () => rt.launching.delete(vmm.proc.pid!);
  return {
    id: spec.id,
    get alive() {
      return alive && !taken;
    },
    async start(opts = {}) {
      if (taken) throw new Error(`prestarted VM ${spec.id} was already taken`);
      taken = true;
      // It waited at the spec's niceness; it runs at the one asked now (default 0).
      const run = { ...spec, nice: undefined, ...opts };
      try {
        if ((run.nice ?? 0) !== (spec.nice ?? 0)) await setVmmNice(vmm.proc.pid!, run.nice ?? 0);
        return await runGuest(rt, vmm, run, accel, performance.now());
      } catch (e) {
        await vmm.cleanup();
        throw e;
      } finally {
        release();
      }
    },
    async discard() {
      if (taken) return;
      taken = true;
      await vmm.cleanup();
      release();
    },
  };
}

/** Everything up to the guest's first instruction: directory, disk, RAM file, the confined QEMU, its sockets, a restore's state. */
async function startVmm(rt: QemuRuntime, spec: VmSpec, accel: Accel): Promise<Vmm> {
  const p = await startProcess(rt, spec, accel);
  try {
    return await loadRestore(p, spec);
  } catch (e) {
    await p.cleanup();
    rt.launching.delete(p.proc.pid!);
    throw e;
  }
}

/**
 * Directory, disk, RAM file, the confined QEMU and its sockets. With `blank`, a VMM for a restore
 * not yet asked for (blank-vmms.ts): an empty overlay of that size for its disk, that RAM file
 * mapped, and an empty file of its own on fd 3 for the state it will load.
 */
export async function startProcess(rt: QemuRuntime, spec: VmSpec, accel: Accel, blank?: BlankDisk): Promise<VmmProcess> {
  const dir = join(rt.paths.vmsDir, spec.id);
  const files: VmFiles = {
    kernel: rt.paths.kernel,
    initramfs: rt.paths.initramfs,
    agentSocket: join(dir, "agent.sock"),
    consoleSocket: join(dir, "console.sock"),
    qmpSocket: join(dir, "qmp.sock"),
    pidFile: join(dir, "qemu.pid"),
  };
  if (files.consoleSocket.length > MAX_SOCKET_PATH) {
    throw new Error(`VM directory path is too long for unix sockets (${files.consoleSocket.length} > ${MAX_SOCKET_PATH}): use a shorter data directory (FORGEVM_DATA_DIR)`);
  }
  await mkdir(rt.paths.vmsDir, { recursive: true });
  try {
    await mkdir(dir, { mode: 0o700 });
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "EEXIST") throw new Error(`a VM with id ${spec.id} already exists`);
    throw e;
  }
  const started = performance.now();
  let child: ChildProcess | null = null;
  let consoleLog: ConsoleLog | null = null;
  let exited: Promise<void> = Promise.resolve();
  const uid = rt.jail ? allocateUid(rt.uids) : null;
  if (uid !== null) {
    rt.uids.add(uid);
    await chown(dir, uid, uid);
  }
  let cleaned: Promise<void> | null = null;
  const cleanup = () => (cleaned ??= removeAll());
  const removeAll = async () => {
    consoleLog?.close();
    if (child && child.exitCode === null && child.signalCode === null) {
      child.kill("SIGKILL");
      await exited;
    }
    await rm(dir, { recursive: true, force: true });
    if (rt.cgroups) await removeVmCgroup(rt.cgroups, spec.id);
    if (uid !== null) {
      for (const v of spec.volumes ?? [])
        if (!v.readOnly) await chown(v.file, process.getuid?.() ?? 0, process.getgid?.() ?? 0).catch(ignore("not root: the file is the server's own already"));
      rt.uids.delete(uid);
    }
  };
  try {
    const restore = spec.restore;
    if (blank) {
      files.disk = join(dir, "disk.qcow2");
      files.namedDisk = true;
      await createOverlay(files.disk, { bytes: blank.diskBytes });
    } else if (restore?.files.disk) {
      // The overlay keeps the snapshot's size: the guest's filesystem was grown to it at boot.
      files.disk = join(dir, "disk.qcow2");
      const size = restore.files.diskBytes ?? (await stat(restore.files.disk)).size;
      await createOverlay(files.disk, { bytes: size, backing: restore.files.disk, unsafe: restore.diskInUse });
    } else if (spec.baseDisk && !restore) {
      files.disk = join(dir, "disk.qcow2");
      await createOverlay(files.disk, { bytes: spec.baseDisk.bytes, backing: spec.baseDisk.file });
    } else if (spec.rootfs && !restore) {
      files.disk = join(dir, "disk.qcow2");
      const imageBytes = (await stat(spec.rootfs)).size;
      const diskBytes = Math.max(imageBytes, (spec.diskMb ?? 0) * 1024 * 1024);
      await createOverlay(files.disk, { bytes: diskBytes, backing: spec.rootfs, backingFormat: "raw" });
    }
    // A RAM file the VM maps shared: a base snapshot's in the making, or a forkable VM's own.
    const ownRam = spec.memoryFile ?? (spec.forkable ? join(dir, "memory") : undefined);
    // A stream saved from a file's RAM leaves that RAM out, unless it is a pause's delta (ram-delta.ts).
    if (restore) files.incoming = { ignoreShared: !!restore.files.memory && (!!restore.feed || (await streamLeavesRamOut(spec.id, restore.files.state))) };
    if (blank) files.incoming = { ignoreShared: false, deferred: true };
    const mapFrom = blank?.ramFile ?? (restore?.files.memory && !spec.forkable ? restore.files.memory : undefined);
    if (mapFrom) {
      // Mapped privately: copy-on-write, so every VM restored from it shares its untouched pages.
      // Linked into the VM's own directory, so it is there for as long as the VM is, to be linked
      // into this VM's pauses (which store only the pages that differ from it).
      const mapped = join(dir, MAPPED_RAM);
      await giveRam(mapFrom, mapped);
      files.memory = { file: mapped, share: false };
    } else if (ownRam) {
      // QEMU (as the VM's uid) sizes and fills an empty one; a base's becomes read-only once frozen.
      const from = restore?.files.memory ? { file: restore.files.memory, take: !!restore.adoptMemory } : undefined;
      await prepareRam(ownRam, uid, from);
      files.memory = { file: ownRam, share: true };
    }
    if (files.disk && uid !== null) await chown(files.disk, uid, uid);
    // A confined VMM writes a volume as its own uid; the file goes back to the server when it is done.
    if (uid !== null) for (const v of spec.volumes ?? []) if (!v.readOnly) await chown(v.file, uid, uid);
    if (spec.nic) await rt.ensureFirewall();
    // Which server process started it: a VM directory whose server is gone is an orphan.
    await writeFile(join(dir, "manager.pid"), `${process.pid}\n`);
    consoleLog = new ConsoleLog(join(dir, "console.log"));
    if (restore) {
      const before = restore.files.console ? await readFile(restore.files.console, "utf8").catch(() => "") : "";
      consoleLog.note(`${before.slice(-64 * 1024)}\n[forgevm] restored from a snapshot at ${new Date().toISOString()}\n`);
    }
    const errFd = openSync(join(dir, "qemu.log"), "w", 0o600);
    // A restore reads its migration stream from fd 3: the snapshot file, or a pipe fed live.
    // A blank VMM's is a file of its own, empty until a restore copies its stream in (blank-vmms.ts).
    const stateFd = blank ? openSync(join(dir, BLANK_INCOMING), "w+", 0o600) : restore && !restore.feed ? openSync(restore.files.state, "r") : null;
    const fd3 = restore || blank ? (stateFd ?? "pipe") : "ignore";
    const argv = qemuArgs(spec, files, accel, rt.tscKhz, rt.tcgCpu);
    // QEMU gets no environment of the server's (which may hold the API key).
    const env: NodeJS.ProcessEnv = { PATH: process.env.PATH ?? "/usr/bin:/bin" };
    const sharedRam = files.memory && !files.memory.share ? files.memory.file : null;
    // A snapshot RAM file many VMs map: opened read-only (see jail/rofile.c), mapped copy-on-write.
    const vmmEnv: Record<string, string> = sharedRam ? { LD_PRELOAD: JAIL_PRELOAD, FORGEVM_RO_FILE: sharedRam } : {};
    let cmd = [rt.qemu, ...argv];
    if (uid !== null) {
      cmd = [...(await jailPrefix(rt, spec, files, dir, uid, accel, vmmEnv)), ...cmd];
    } else {
      Object.assign(env, vmmEnv);
      if (spec.nice) cmd = ["nice", "-n", String(spec.nice), ...cmd];
    }
    // A session of its own: the VM belongs to this server's state, not to its process group, so a
    // Ctrl-C in a terminal does not kill VMs behind the server's back. `setsid` makes it after the
    // exec rather than node's `detached` before it: the server waits for its child's exec, and a
    // child that is already a new session is a new scheduling group at nice 0 among a burst's
    // hundred VMMs, where the server stood still 70–250 ms a start; in the server's own group it is
    // scheduled at the server's weight (same pid: the child is no group leader, so setsid does not fork).
    child = spawn("setsid", cmd, { stdio: ["ignore", "ignore", errFd, fd3], env });
    closeSync(errFd);
    if (stateFd !== null) closeSync(stateFd);
    const proc = child;
    if (restore?.feed) {
      const pipe = proc.stdio[3] as Writable;
      pipe.on("error", () => {}); // QEMU failing to load is reported through its exit
      restore.feed(pipe);
    }
    if (proc.pid) rt.launching.set(proc.pid, dir);
    exited = new Promise<void>((r) => proc.once("exit", () => r()));
    child.once("error", () => {}); // reported through the exit and the log below

    const qemuLog = () => readFile(join(dir, "qemu.log"), "utf8").catch(() => "");
    await waitForSockets([files.consoleSocket, files.agentSocket], proc, 10_000).catch(async (e) => {
      throw new BootError(`QEMU did not start: ${e.message}\n${(await qemuLog()).trim()}`, "");
    });
    // Only now: QEMU made its sockets, so it is in its own session, whose group this renices (not the server's).
    if (spec.nice && proc.pid) await setAutogroupNice(proc.pid, spec.nice);
    consoleLog.attach(await connectQemuSocket(files.consoleSocket));
    const agentSocket = await connectQemuSocket(files.agentSocket);
    const mappedRam = files.memory && !files.memory.share ? files.memory.file : undefined;
    return { dir, files, proc, exited, consoleLog, agentSocket, ownRam, mappedRam, started, qemuLog, cleanup };
  } catch (e) {
    await cleanup();
    if (child?.pid) rt.launching.delete(child.pid);
    throw e;
  }
}

/**
 * Takes the agent's channel and loads a restore's state; the guest does not run yet. A restored
 * guest still thinks its old host is connected: the channel introduces itself, and the guest runs
 * once `cont` is sent (QEMU holds it paused until then, and defers that until the state is
 * loaded). `load` as loadState takes it (a blank VMM's: started over QMP, on its connection).
 */
export async function loadRestore(p: VmmProcess, spec: VmSpec, load: { deferred?: boolean; qmp?: Qmp } = {}): Promise<Vmm> {
  const { agentSocket, ...vmm } = p;
  const restore = spec.restore;
  // Only our agent's channel can be held across a save and carried over to the restored guest.
  const carried = restore?.guest;
  if (carried && !(carried instanceof AgentChannel)) throw new Error(`VM ${spec.id}: only an agent channel can be carried over to a restored VM`);
  if (carried) carried.continueOn(agentSocket);
  const channel = carried ?? new AgentChannel(agentSocket, { introduce: !!restore, keepProcesses: !!restore?.keepProcesses });
  if (restore) {
    await loadState(p.files, p.exited, !!p.files.incoming?.ignoreShared, load).catch(async (e: Error) => {
      channel.close();
      await Promise.race([p.exited, sleep(500)]);
      throw new BootError(`VM ${spec.id} could not be restored: ${e.message}\nQEMU: ${(await p.qemuLog()).trim()}`, p.consoleLog.getTail());
    });
  }
  return { ...vmm, channel };
}

/** Lets the guest run: a restore's `cont`, the agent's hello, and `configure` with its new identity. */
async function runGuest(rt: QemuRuntime, vmm: Vmm, spec: VmSpec, accel: Accel, started = vmm.started): Promise<QemuVm> {
  const { files, proc, exited, consoleLog, channel, qemuLog, dir } = vmm;
  const restore = spec.restore;
  {
    if (restore) {
      await letRun(files).catch(async (e: Error) => {
        channel.close();
        throw new BootError(`VM ${spec.id} could not be restored: ${e.message}\nQEMU: ${(await qemuLog()).trim()}`, consoleLog.getTail());
      });
    }
    // A restored guest answers within a second or two even under emulation: it waits less long.
    const deadlineMs = spec.bootTimeoutMs ?? rt.bootTimeoutMs ?? (accel === "kvm" ? 15_000 : restore ? 30_000 : 60_000);
    const hello = await awaitHello(channel, { deadlineMs, exited }).catch(async (e: Error) => {
      if (!(e instanceof HelloError)) throw e;
      // The channel usually closes a moment before QEMU is reaped: say which really happened.
      const stopped = await Promise.race([exited.then(() => true), sleep(500).then(() => false)]);
      const log = (await qemuLog()).trim();
      // QEMU's own last words go on the first line (the one callers show) and into the console log.
      const said = log ? `: ${log.split("\n").at(-1)}` : "";
      const failure = stopped ? `QEMU exited (${proc.exitCode ?? proc.signalCode}) before the agent said hello${said}` : `${e.message}${await vmStatus(files.qmpSocket)}`;
      const tail = `${consoleLog!.getTail()}${log ? `\n[qemu] ${log.replaceAll("\n", "\n[qemu] ")}\n` : ""}`;
      throw new BootError(`VM ${spec.id} failed to boot (${accel}): ${failure}${log ? `\nQEMU: ${log}` : ""}\n--- console tail ---\n${tail}`, tail);
    });
    // New identity from the host: wall clock, entropy and machine id (never shared between
    // VMs: a restored guest carries its snapshot's, so it gets its hostname here too).
    await configure(channel, {
      time_ms: Date.now(),
      seed_hex: randomBytes(64).toString("hex"),
      // The same sandbox going on keeps its machine id; every other VM gets its own.
      ...(restore?.sameMachine ? {} : { machine_id: randomBytes(16).toString("hex") }),
      ...(restore && spec.hostname ? { hostname: spec.hostname } : {}),
      ...limitFields(rt),
      ...(spec.nic ? { net: USER_NET } : {}),
    });
    const info: VmInfo = {
      id: spec.id,
      pid: proc.pid!,
      dir,
      accel,
      memoryMb: spec.memoryMb,
      vcpus: spec.vcpus,
      agentVersion: hello.agent,
      bootMs: Math.round(performance.now() - started),
      restored: !!restore,
      ...(spec.forkable ? { forkable: true } : {}),
    };
    // Forgotten (destroyed, or let go of for the next server): this process no longer waits for its VMM.
    const forget = () => {
      rt.live.delete(vm);
      proc.unref();
      (proc.stdio[3] as Writable | null)?.destroy();
    };
    const vm = new QemuVm(info, channel, consoleLog, exited, vmm.cleanup, forget, vmm.ownRam, vmm.mappedRam);
    rt.live.add(vm);
    // A restored guest's disk is its snapshot's chain and one layer more (a pause resumed adds one each time).
    if (restore && files.disk) void vm.collapseLayers().catch(ignore("the chain stays as it is until the next snapshot"));
    return vm;
  }
}

/** What QEMU says of a VM whose agent is silent (" (QEMU: status running)"), or nothing when it cannot say. */
async function vmStatus(qmpSocket: string): Promise<string> {
  const qmp = await Qmp.connect(qmpSocket, 2000).catch(() => null);
  if (!qmp) return "";
  try {
    const { status } = await qmp.execute<{ status: string }>("query-status");
    return ` (QEMU: status ${status})`;
  } catch {
    return "";
  } finally {
    qmp.close();
  }
}
