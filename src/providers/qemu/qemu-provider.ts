// The QEMU microvm provider: launches one QEMU process per VM with the shared kernel and
// initramfs, the image as a read-only backing file under a per-VM qcow2 overlay, the agent's
// virtio-serial channel, the serial console and a QMP socket, all in the VM's own directory.
import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { accessSync, closeSync, constants as fsConstants, openSync, readFileSync, rmSync } from "node:fs";
import { chmod, chown, copyFile, link, mkdir, readFile, readdir, rename, rm, stat, writeFile } from "node:fs/promises";
import { setPriority } from "node:os";
import type { Writable } from "node:stream";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { AgentChannel } from "../../agent-client/index.js";
import type { Paths } from "../../config/paths.js";
import { processAlive, run } from "../../util/process.js";
import { BootError, DEFAULT_GUEST_LIMITS, type Accel, type CaptureResult, type GuestLimits, type Provider, type ProviderHealth, type Vm, type VmInfo, type VmSpec } from "../provider.js";
import { resolveAccel, type AccelMode, type AccelVerdict } from "./accel.js";
import { hostTscKhz, qemuArgs, type VmFiles } from "./args.js";
import { ConsoleLog } from "./console-log.js";
import { MIGRATION_PARAMETERS, eventGapMs, receiveStream, waitMigration } from "./migration.js";
import { Qmp } from "./qmp.js";
import { connectQemuSocket } from "./unix-socket.js";
import { firewallIntact, firewallProblem, installFirewall, type FirewallSpec } from "./firewall.js";
import { cgroupVersion, createVmCgroup, removeVmCgroup, sweepVmCgroups, type CgroupVersion } from "./cgroups.js";
import { JAIL_PRELOAD, allocateUid, backingChain, jailArgs, jailConfig, kvmGroup, qcowVirtualSize, type JailConfig } from "./jail.js";

export interface QemuProviderOptions {
  paths: Paths;
  /** Limits on what sandboxes run inside each guest (default DEFAULT_GUEST_LIMITS). */
  guestLimits?: GuestLimits;
  /** Confine each QEMU (own uid, own mount namespace, rlimits): default when running as root. */
  jail?: boolean;
  /** What the host firewall keeps VMMs with a network device from reaching. */
  firewall?: FirewallSpec;
  accel?: AccelMode;
  qemuBinary?: string;
  /** Default hello deadline; TCG boots are slower, so the default depends on the accel. */
  bootTimeoutMs?: number;
  /**
   * Kill this provider's VMs when the Node process exits (default true). A server that
   * re-attaches to its VMs after a restart turns this off.
   */
  killOnExit?: boolean;
}

const MAX_SOCKET_PATH = 107; // sun_path holds 108 bytes including the NUL
const ID_RE = /^[a-z0-9][a-z0-9-]{0,62}$/;

export class QemuProvider implements Provider {
  readonly name = "qemu";
  private verdict: Promise<AccelVerdict> | null = null;
  private readonly live = new Set<QemuVm>();
  /** VMs between QEMU start and hello: not in `live` yet, but theirs to clean up at exit. */
  private readonly launching = new Map<number, string>();
  private readonly qemu: string;
  private readonly jail: JailConfig | null;
  /** Host cgroups for confined VMs (null: not available, or not jailed). */
  private readonly cgroups: CgroupVersion | null;
  /** uids of the confined VMMs this provider runs. */
  private readonly uids = new Set<number>();
  private readonly tscKhz = hostTscKhz(readFileSync("/proc/cpuinfo", "utf8"));

  constructor(private readonly opts: QemuProviderOptions) {
    this.qemu = findProgram(opts.qemuBinary ?? "qemu-system-x86_64");
    this.jail = opts.jail === false ? null : jailConfig(opts.paths.dataDir);
    this.cgroups = this.jail ? cgroupVersion() : null;
    if (opts.killOnExit !== false) process.once("exit", () => this.killAllSync());
  }

  private firewall: Promise<void> | null = null;
  private firewallReady = false;
  private nicCheck: Promise<string | null> | null = null;

  /** Why sandboxes with a network device (network "full") cannot run here, or null (checked once). */
  nicProblem(): Promise<string | null> {
    this.nicCheck ??= firewallProblem(this.jail !== null);
    return this.nicCheck;
  }

  /**
   * Installs the host firewall before the first VMM with a network device, and checks before
   * every later one that it is still in place (reinstalling it if someone flushed it).
   */
  private async ensureFirewall(): Promise<void> {
    if (this.firewallReady && !(await firewallIntact())) {
      this.firewallReady = false;
      this.firewall = null;
    }
    this.firewall ??= (async () => {
      const problem = await this.nicProblem();
      if (problem) throw new Error(`network "full" is not available: ${problem}`);
      await installFirewall(this.opts.firewall ?? { blockedV4: [] });
      this.firewallReady = true;
    })();
    this.firewall.catch(() => (this.firewall = null));
    return this.firewall;
  }

  /** The jail helper's command line that starts a VMM confined to this VM's own files. */
  private async jailPrefix(spec: VmSpec, files: VmFiles, dir: string, uid: number, accel: Accel, env: Record<string, string>): Promise<string[]> {
    const jail = this.jail!;
    const ro = [this.opts.paths.kernel, this.opts.paths.initramfs];
    if (files.disk) ro.push(...(await backingChain(files.disk)).slice(1));
    const rw = [dir];
    if (files.memory?.share) rw.push(files.memory.file);
    else if (files.memory) ro.push(files.memory.file, JAIL_PRELOAD);
    const kvm = accel === "kvm" ? kvmGroup() : null;
    const MiB = 1048576;
    // the largest file it writes: its overlay (bounded by the disk's virtual size) or its RAM file
    const diskBytes = files.disk ? await qcowVirtualSize(files.disk) : 0;
    const cgroups = this.cgroups
      ? await createVmCgroup(this.cgroups, spec.id, { memoryBytes: (spec.memoryMb + VMM_MEMORY_OVERHEAD_MIB) * MiB, cpus: spec.vcpus + 1, pidsMax: VMM_PIDS_MAX })
      : [];
    const args = jailArgs(jail, {
      cgroups,
      hostNet: !!spec.nic,
      uid,
      groups: kvm !== null ? [kvm] : [],
      rw,
      ro,
      rlimits: {
        as: (spec.memoryMb + VMM_ADDRESS_SPACE_OVERHEAD_MIB) * MiB,
        nofile: 4096,
        core: 0,
        fsize: Math.round(Math.max(diskBytes, spec.memoryMb * MiB) * 1.25) + 256 * MiB,
      },
      nice: spec.nice,
      env,
    });
    return [jail.helper, ...args, "--"];
  }

  private limitFields(): { pids_max: number; memory_reserve_mb: number } {
    const l = this.opts.guestLimits ?? DEFAULT_GUEST_LIMITS;
    return { pids_max: l.pidsMax, memory_reserve_mb: l.memoryReserveMb };
  }

  // Last resort at process exit: only synchronous calls work here.
  private killAllSync(): void {
    const all = new Map(this.launching);
    for (const vm of this.live) all.set(vm.info.pid, vm.info.dir);
    for (const [pid, dir] of all) {
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        // already gone
      }
      rmSync(dir, { recursive: true, force: true });
    }
  }

  /** The accelerator in use (probing KVM on first call when accel is auto). */
  accel(): Promise<AccelVerdict> {
    this.verdict ??= this.qemuVersion().then((qemuVersion) =>
      resolveAccel(this.opts.accel ?? "auto", {
        stateDir: this.opts.paths.stateDir,
        kernel: this.opts.paths.kernel,
        qemuVersion,
        probe: () => this.probeKvm(),
      }),
    );
    this.verdict.catch(() => (this.verdict = null));
    return this.verdict;
  }

  async health(): Promise<ProviderHealth> {
    const problems: string[] = [];
    const details: Record<string, string> = {};
    let accel: Accel | null = null;
    try {
      details.qemu = await this.qemuVersion();
    } catch (e) {
      problems.push(`QEMU is not usable: ${(e as Error).message}`);
    }
    for (const [what, p] of [["kernel", this.opts.paths.kernel], ["initramfs", this.opts.paths.initramfs]] as const) {
      try {
        await stat(p);
        details[what] = p;
      } catch {
        problems.push(`${what} missing at ${p} (run ./setup.sh)`);
      }
    }
    if (!problems.length) {
      try {
        const v = await this.accel();
        accel = v.accel;
        details.accel_reason = v.reason;
      } catch (e) {
        problems.push((e as Error).message);
      }
    }
    // The confinement in force: operators should see when QEMU runs unconfined.
    details.vmm_jail = this.jail ? "on (own uid, mount, network and IPC namespaces, rlimits)" : process.getuid?.() === 0 ? "off (providers.qemu.jail: false)" : "off (the server is not root)";
    details.vmm_cgroups = this.cgroups ?? "none (rlimits only)";
    details.network_full = (await this.nicProblem()) ?? "available";
    return { name: this.name, healthy: problems.length === 0, accel, problems, details };
  }

  async spawn(spec: VmSpec): Promise<Vm> {
    validateSpec(spec);
    const { accel } = await this.accel();
    return this.launch(spec, accel);
  }

  /** Destroys every VM this provider started and still tracks. */
  async destroyAll(): Promise<void> {
    await Promise.all([...this.live].map((vm) => vm.destroy()));
  }

  /**
   * Takes over a VM that a previous ForgeVM process started and left running: checks that the
   * pid is still that VM's QEMU, reconnects to its console and agent sockets, skips whatever
   * half-frame the old connection left, and waits for the agent's fresh HELLO.
   */
  async attach(a: { id: string; pid: number; dir: string; memoryMb: number; vcpus: number; helloTimeoutMs?: number }): Promise<Vm> {
    const cmdline = await readFile(`/proc/${a.pid}/cmdline`, "utf8").catch(() => "");
    if (!isQemuCommand(cmdline) || !cmdline.includes(join(a.dir, "agent.sock"))) {
      throw new Error(`process ${a.pid} is not the QEMU of VM ${a.id}`);
    }
    const { accel } = await this.accel();
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
    if (owner !== 0) this.uids.add(owner);
    const consoleLog = new ConsoleLog(join(a.dir, "console.log"));
    const cleanup = async () => {
      consoleLog.close();
      this.uids.delete(owner);
      try {
        process.kill(a.pid, "SIGKILL");
      } catch {
        // already gone
      }
      // Not our child: poll until it is gone (or a zombie) before its files go.
      while (processAlive(a.pid)) await sleep(10);
      await rm(a.dir, { recursive: true, force: true });
      if (this.cgroups) await removeVmCgroup(this.cgroups, a.id);
    };
    const started = performance.now();
    try {
      consoleLog.attach(await connectQemuSocket(join(a.dir, "console.sock")));
      const channel = new AgentChannel(await connectQemuSocket(join(a.dir, "agent.sock")), { resync: true });
      const deadline = a.helloTimeoutMs ?? 10_000;
      let timer: NodeJS.Timeout | undefined;
      const failure = await Promise.race([
        channel.hello.then(() => null, (e: Error) => `the agent channel closed (${e.message})`),
        new Promise<string>((r) => (timer = setTimeout(() => r(`no HELLO within ${deadline} ms`), deadline))),
      ]);
      clearTimeout(timer);
      if (failure) {
        channel.close();
        throw new Error(`cannot re-attach to VM ${a.id}: ${failure}`);
      }
      const hello = await channel.hello;
      await channel.request<"configure">({ op: "configure", time_ms: Date.now(), ...this.limitFields() });
      await writeFile(join(a.dir, "manager.pid"), `${process.pid}\n`);
      const info: VmInfo = { id: a.id, pid: a.pid, dir: a.dir, accel, memoryMb: a.memoryMb, vcpus: a.vcpus, agentVersion: hello.agent, bootMs: Math.round(performance.now() - started), restored: false };
      const vm = new QemuVm(info, channel, consoleLog, exited, cleanup, () => this.live.delete(vm));
      this.live.add(vm);
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
  async sweepOrphans(keep: Set<string>, isLiveServer: (pid: number) => Promise<boolean>): Promise<string[]> {
    const removed: string[] = [];
    for (const id of await readdir(this.opts.paths.vmsDir).catch(() => [] as string[])) {
      if (keep.has(id)) continue;
      const dir = join(this.opts.paths.vmsDir, id);
      const manager = Number((await readFile(join(dir, "manager.pid"), "utf8").catch(() => "")).trim());
      if (manager === process.pid && [...this.live].some((vm) => vm.info.dir === dir)) continue;
      if (manager && manager !== process.pid && (await isLiveServer(manager))) continue;
      if ([...this.launching.values()].includes(dir)) continue;
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
    if (this.cgroups) await sweepVmCgroups(this.cgroups);
    return removed;
  }

  private async qemuVersion(): Promise<string> {
    const { stdout } = await run(this.qemu, ["--version"]);
    return stdout.split("\n")[0].trim();
  }

  private async probeKvm(): Promise<boolean> {
    try {
      const vm = await this.launch(
        { id: `probe-${randomBytes(4).toString("hex")}`, memoryMb: 128, vcpus: 1, bootTimeoutMs: 8000 },
        "kvm",
      );
      const ok = (await vm.channel.request<"ping">({ op: "ping" }, { timeoutMs: 3000 })).ok;
      await vm.destroy();
      return ok;
    } catch {
      return false;
    }
  }

  private async launch(spec: VmSpec, accel: Accel): Promise<QemuVm> {
    const dir = join(this.opts.paths.vmsDir, spec.id);
    const files: VmFiles = {
      kernel: this.opts.paths.kernel,
      initramfs: this.opts.paths.initramfs,
      agentSocket: join(dir, "agent.sock"),
      consoleSocket: join(dir, "console.sock"),
      qmpSocket: join(dir, "qmp.sock"),
      pidFile: join(dir, "qemu.pid"),
    };
    if (files.consoleSocket.length > MAX_SOCKET_PATH) {
      throw new Error(`VM directory path is too long for unix sockets (${files.consoleSocket.length} > ${MAX_SOCKET_PATH}): use a shorter data directory (FORGEVM_DATA_DIR)`);
    }
    await mkdir(this.opts.paths.vmsDir, { recursive: true });
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
    const uid = this.jail ? allocateUid(this.uids) : null;
    if (uid !== null) {
      this.uids.add(uid);
      await chown(dir, uid, uid);
    }
    const cleanup = async () => {
      consoleLog?.close();
      if (child && child.exitCode === null && child.signalCode === null) {
        child.kill("SIGKILL");
        await exited;
      }
      await rm(dir, { recursive: true, force: true });
      if (this.cgroups) await removeVmCgroup(this.cgroups, spec.id);
      if (uid !== null) this.uids.delete(uid);
    };
    try {
      const restore = spec.restore;
      if (restore?.files.disk) {
        // The overlay keeps the snapshot's size: the guest's filesystem was grown to it at boot.
        files.disk = join(dir, "disk.qcow2");
        const size = restore.files.diskBytes ?? (await stat(restore.files.disk)).size;
        await run("qemu-img", ["create", "-q", "-f", "qcow2", ...(restore.diskInUse ? ["-u"] : []), "-b", restore.files.disk, "-F", "qcow2", files.disk, String(size)]);
      } else if (spec.rootfs && !restore) {
        files.disk = join(dir, "disk.qcow2");
        const imageBytes = (await stat(spec.rootfs)).size;
        const diskBytes = Math.max(imageBytes, (spec.diskMb ?? 0) * 1024 * 1024);
        await run("qemu-img", ["create", "-q", "-f", "qcow2", "-b", spec.rootfs, "-F", "raw", files.disk, String(diskBytes)]);
      }
      if (restore) {
        files.incoming = { ignoreShared: !!restore.files.memory };
        if (restore.files.memory) files.memory = { file: restore.files.memory, share: false };
      } else if (spec.memoryFile) {
        files.memory = { file: spec.memoryFile, share: true };
        // QEMU (as the VM's uid) sizes and fills it; it becomes read-only once frozen.
        await writeFile(spec.memoryFile, "", { mode: 0o600 });
        if (uid !== null) await chown(spec.memoryFile, uid, uid);
      }
      if (files.disk && uid !== null) await chown(files.disk, uid, uid);
      if (spec.nic) await this.ensureFirewall();
      // Which server process started it: a VM directory whose server is gone is an orphan.
      await writeFile(join(dir, "manager.pid"), `${process.pid}\n`);
      consoleLog = new ConsoleLog(join(dir, "console.log"));
      if (restore) {
        const before = restore.files.console ? await readFile(restore.files.console, "utf8").catch(() => "") : "";
        consoleLog.note(`${before.slice(-64 * 1024)}\n[forgevm] restored from a snapshot at ${new Date().toISOString()}\n`);
      }
      const errFd = openSync(join(dir, "qemu.log"), "w", 0o600);
      // A restore reads its migration stream from fd 3: the snapshot file, or a pipe fed live.
      const stateFd = restore && !restore.feed ? openSync(restore.files.state, "r") : null;
      const fd3 = restore ? (stateFd ?? "pipe") : "ignore";
      const argv = qemuArgs(spec, files, accel, this.tscKhz);
      // QEMU gets no environment of the server's (which may hold the API key).
      const env: NodeJS.ProcessEnv = { PATH: process.env.PATH ?? "/usr/bin:/bin" };
      const sharedRam = files.memory && !files.memory.share ? files.memory.file : null;
      // A snapshot RAM file many VMs map: opened read-only (see jail/rofile.c), mapped copy-on-write.
      const vmmEnv: Record<string, string> = sharedRam ? { LD_PRELOAD: JAIL_PRELOAD, FORGEVM_RO_FILE: sharedRam } : {};
      let cmd = [this.qemu, ...argv];
      if (uid !== null) {
        cmd = [...(await this.jailPrefix(spec, files, dir, uid, accel, vmmEnv)), ...cmd];
      } else {
        Object.assign(env, vmmEnv);
        if (spec.nice) cmd = ["nice", "-n", String(spec.nice), ...cmd];
      }
      // Detached: the VM belongs to this server's state, not to its process group, so a
      // Ctrl-C in a terminal does not kill VMs behind the server's back.
      child = spawn(cmd[0], cmd.slice(1), { detached: true, stdio: ["ignore", "ignore", errFd, fd3], env });
      closeSync(errFd);
      if (stateFd !== null) closeSync(stateFd);
      const proc = child;
      if (spec.nice && proc.pid) await setAutogroupNice(proc.pid, spec.nice);
      if (restore?.feed) {
        const pipe = proc.stdio[3] as Writable;
        pipe.on("error", () => {}); // QEMU failing to load is reported through its exit
        restore.feed(pipe);
      }
      if (proc.pid) this.launching.set(proc.pid, dir);
      exited = new Promise<void>((r) => proc.once("exit", () => r()));
      child.once("error", () => {}); // reported through the exit and the log below

      const qemuLog = () => readFile(join(dir, "qemu.log"), "utf8").catch(() => "");
      await waitForSockets([files.consoleSocket, files.agentSocket], proc, 10_000).catch(async (e) => {
        throw new BootError(`QEMU did not start: ${e.message}\n${(await qemuLog()).trim()}`, "");
      });
      consoleLog.attach(await connectQemuSocket(files.consoleSocket));
      // A restored guest still thinks its old host is connected: introduce ourselves, then let
      // it run (QEMU holds it paused until `cont`, and defers that until the state is loaded).
      const channel = new AgentChannel(await connectQemuSocket(files.agentSocket), { introduce: !!restore });
      if (restore) {
        await startIncoming(files, !!restore.feed, exited).catch(async (e: Error) => {
          channel.close();
          await Promise.race([exited, sleep(500)]);
          throw new BootError(`VM ${spec.id} could not be restored: ${e.message}\nQEMU: ${(await qemuLog()).trim()}`, consoleLog?.getTail() ?? "");
        });
      }
      const deadline = spec.bootTimeoutMs ?? this.opts.bootTimeoutMs ?? (accel === "kvm" ? 15_000 : 60_000);
      let timer: NodeJS.Timeout | undefined;
      let failure = await Promise.race([
        channel.hello.then(() => null, (e: Error) => `the agent channel closed before hello (${e.message})`),
        exited.then(() => "QEMU exited before the agent said hello"),
        new Promise<string>((r) => (timer = setTimeout(() => r(`the agent did not say hello within ${deadline} ms`), deadline))),
      ]);
      clearTimeout(timer);
      if (failure) {
        channel.close();
        // The channel usually closes a moment before QEMU is reaped: say which really happened.
        const stopped = await Promise.race([exited.then(() => true), sleep(500).then(() => false)]);
        if (stopped) failure = `QEMU exited (${proc.exitCode ?? proc.signalCode}) before the agent said hello`;
        const tail = consoleLog.getTail();
        const log = (await qemuLog()).trim();
        throw new BootError(
          `VM ${spec.id} failed to boot (${accel}): ${failure}${log ? `\nQEMU: ${log}` : ""}\n--- console tail ---\n${tail}`,
          tail,
        );
      }
      const hello = await channel.hello;
      // New identity from the host: wall clock, entropy and machine id (never shared between
      // VMs: a restored guest carries its snapshot's, so it gets its hostname here too).
      await channel.request<"configure">({
        op: "configure",
        time_ms: Date.now(),
        seed_hex: randomBytes(64).toString("hex"),
        machine_id: randomBytes(16).toString("hex"),
        ...(restore && spec.hostname ? { hostname: spec.hostname } : {}),
        ...this.limitFields(),
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
      };
      const vm = new QemuVm(info, channel, consoleLog, exited, cleanup, () => this.live.delete(vm), spec.memoryFile);
      this.live.add(vm);
      return vm;
    } catch (e) {
      await cleanup();
      throw e;
    } finally {
      if (child?.pid) this.launching.delete(child.pid);
    }
  }
}

class QemuVm implements Vm {
  private destroying: Promise<void> | null = null;

  constructor(
    readonly info: VmInfo,
    readonly channel: AgentChannel,
    private readonly console: ConsoleLog,
    readonly exited: Promise<void>,
    private readonly cleanup: () => Promise<void>,
    private readonly forget: () => void,
    /** Shared RAM file, for VMs spawned to be frozen into a snapshot. */
    private readonly memoryFile?: string,
  ) {}

  consoleTail(bytes = 4096): string {
    return this.console.getTail(bytes);
  }

  private get qmpSocket(): string {
    return join(this.info.dir, "qmp.sock");
  }

  // One snapshot at a time per VM: QEMU runs one migration at a time.
  private busy: Promise<unknown> = Promise.resolve();
  private serial<T>(fn: () => Promise<T>): Promise<T> {
    const p = this.busy.then(fn, fn);
    this.busy = p.catch(() => {});
    return p;
  }

  async prepareSnapshot(dir: string): Promise<{ disk: string; diskBytes: number } | null> {
    const qmp = await Qmp.connect(this.qmpSocket);
    try {
      return await this.prepareSnapshotWith(qmp, dir);
    } finally {
      qmp.close();
    }
  }

  snapshot(dir: string, opts: { tees?: Writable[]; disk?: string } = {}): Promise<CaptureResult> {
    return this.serial(async () => {
      const qmp = await Qmp.connect(this.qmpSocket);
      const state = join(dir, "state");
      // In the VM's own directory: the only place a confined QEMU can reach.
      const sink = await receiveStream(join(this.info.dir, "migrate.sock"), state, opts.tees);
      await copyFile(join(this.info.dir, "console.log"), join(dir, "console.log")).catch(() => {});
      let stopped = false;
      try {
        const prepared = opts.disk ? null : await this.prepareSnapshotWith(qmp, dir);
        const disk = opts.disk ?? prepared?.disk;
        const diskBytes = prepared?.diskBytes ?? (disk ? (await activeDisk(qmp))?.bytes : undefined);
        await qmp.execute("migrate-set-parameters", MIGRATION_PARAMETERS);
        await qmp.execute("migrate-set-capabilities", { capabilities: [{ capability: "x-ignore-shared", state: false }] });
        // The guest is stopped for the whole copy. Live pre-copy would pause it only for the last
        // round, but on QEMU 7.2 under TCG it lost guest writes: half the snapshots taken soon
        // after a restore from a mapped snapshot crashed their guests (0 of 18 when stopped).
        const stopEvent = qmp.waitEvent((e) => e.event === "STOP", 10_000);
        await qmp.execute("stop");
        stopped = true;
        // From here on the guest writes to a new overlay; the old one, consistent with the RAM
        // being sent, belongs to the snapshot (and its children).
        if (disk) await switchDisk(qmp, this.info.dir);
        await qmp.execute("migrate", { uri: sink.uri });
        await waitMigration(qmp, ["completed"], 120_000);
        const bytes = await sink.done;
        // The frozen disk belongs to the snapshot now: not even this VM's QEMU may change it.
        if (disk) await sealFile(disk);
        const resumed = qmp.waitEvent((e) => e.event === "RESUME", 10_000);
        await qmp.execute("cont");
        stopped = false;
        const pauseMs = eventGapMs(await stopEvent, await resumed);
        return { files: { state, disk, diskBytes }, pauseMs, bytes };
      } catch (e) {
        await qmp.execute("migrate_cancel").catch(() => {});
        if (stopped) await qmp.execute("cont").catch(() => {});
        throw e;
      } finally {
        sink.close();
        qmp.close();
      }
    });
  }

  // A hard link: the snapshot keeps the disk (frozen at the switch) after this VM is gone.
  private async prepareSnapshotWith(qmp: Qmp, dir: string): Promise<{ disk: string; diskBytes: number } | null> {
    const active = await activeDisk(qmp);
    if (!active) return null;
    const disk = join(dir, "disk.qcow2");
    await link(active.file, disk);
    return { disk, diskBytes: active.bytes };
  }

  freeze(dir: string): Promise<CaptureResult> {
    return this.serial(async () => {
      if (!this.memoryFile) throw new Error(`VM ${this.info.id} was not spawned with a memory file and cannot be frozen`);
      const qmp = await Qmp.connect(this.qmpSocket);
      const state = join(dir, "state");
      const sink = await receiveStream(join(this.info.dir, "migrate.sock"), state);
      await copyFile(join(this.info.dir, "console.log"), join(dir, "console.log")).catch(() => {});
      try {
        const active = await activeDisk(qmp);
        const stopEvent = qmp.waitEvent((e) => e.event === "STOP", 10_000);
        await qmp.execute("stop");
        await qmp.execute("migrate-set-parameters", MIGRATION_PARAMETERS);
        await qmp.execute("migrate-set-capabilities", { capabilities: [{ capability: "x-ignore-shared", state: true }] });
        await qmp.execute("migrate", { uri: sink.uri });
        await waitMigration(qmp, ["completed"], 60_000);
        const bytes = await sink.done;
        let disk: string | undefined;
        if (active) {
          disk = join(dir, "disk.qcow2");
          await rename(active.file, disk);
          await sealFile(disk);
        }
        await sealFile(this.memoryFile);
        await stopEvent;
        // The guest never runs again, so there is no pause to report.
        return { files: { state, memory: this.memoryFile, disk, diskBytes: active?.bytes }, pauseMs: 0, bytes };
      } finally {
        sink.close();
        qmp.close();
        await this.destroy();
      }
    });
  }

  async setNice(nice: number): Promise<void> {
    await setAutogroupNice(this.info.pid, nice);
    for (const tid of await readdir(`/proc/${this.info.pid}/task`).catch(() => [] as string[])) {
      try {
        setPriority(Number(tid), nice);
      } catch {
        // thread gone meanwhile
      }
    }
  }

  destroy(): Promise<void> {
    this.destroying ??= (async () => {
      this.channel.close();
      await this.cleanup();
      this.forget();
    })();
    return this.destroying;
  }
}

/**
 * QEMU runs in its own session, and with autogroup scheduling (the Linux default) a session's
 * threads compete with others as one group whose weight is the group's nice, not the threads'.
 */
async function setAutogroupNice(pid: number, nice: number): Promise<void> {
  await writeFile(`/proc/${pid}/autogroup`, String(nice)).catch(() => {});
}

/**
 * Starts loading a restore's state and lets the guest run once it is loaded. `cont` takes the
 * disk's locks at once, so while the parent still writes the backing file (a fork fed live) it
 * waits for the load to finish; otherwise QEMU defers the start itself.
 */
async function startIncoming(files: VmFiles, waitLoad: boolean, exited: Promise<void>): Promise<void> {
  const qmp = await Qmp.connect(files.qmpSocket);
  try {
    if (files.incoming?.ignoreShared) {
      await qmp.execute("migrate-set-capabilities", { capabilities: [{ capability: "x-ignore-shared", state: true }] });
      await qmp.execute("migrate-incoming", { uri: "fd:3" });
    }
    let gone = false;
    void exited.then(() => (gone = true));
    for (let delay = 2; waitLoad; delay = Math.min(delay * 2, 20)) {
      const { status } = await qmp.execute<{ status: string }>("query-status");
      if (status !== "inmigrate") break;
      if (gone) throw new Error("QEMU exited while loading the snapshot");
      await sleep(delay);
    }
    await qmp.execute("cont");
  } finally {
    qmp.close();
  }
}

/** The file behind the VM's root disk as QEMU sees it now, and its virtual size. */
async function activeDisk(qmp: Qmp): Promise<{ file: string; bytes: number } | null> {
  const blocks = await qmp.execute<Array<{ device: string; inserted?: { file: string; image: { "virtual-size": number } } }>>("query-block");
  const root = blocks.find((b) => b.device === "root")?.inserted;
  return root ? { file: root.file, bytes: root.image["virtual-size"] } : null;
}

/** Moves the VM onto a new overlay on top of its current disk, which is frozen from then on. */
async function switchDisk(qmp: Qmp, vmDir: string): Promise<void> {
  const names = await readdir(vmDir);
  let n = 1;
  while (names.includes(`disk.${n}.qcow2`)) n++;
  await qmp.execute("blockdev-snapshot-sync", { device: "root", "snapshot-file": join(vmDir, `disk.${n}.qcow2`), format: "qcow2" });
}

function validateSpec(spec: VmSpec): void {
  if (!ID_RE.test(spec.id)) throw new RangeError(`id "${spec.id}" must be 1-63 lowercase letters, digits or dashes`);
  if (!Number.isInteger(spec.memoryMb) || spec.memoryMb < 64 || spec.memoryMb > 65536) {
    throw new RangeError(`memoryMb must be an integer between 64 and 65536, got ${spec.memoryMb}`);
  }
  if (!Number.isInteger(spec.vcpus) || spec.vcpus < 1 || spec.vcpus > 64) {
    throw new RangeError(`vcpus must be an integer between 1 and 64, got ${spec.vcpus}`);
  }
  if (spec.hostname !== undefined && !/^[A-Za-z0-9][A-Za-z0-9-]{0,62}$/.test(spec.hostname)) {
    throw new RangeError(`hostname "${spec.hostname}" must be 1-63 letters, digits or dashes`);
  }
}

async function waitForSockets(paths: string[], proc: ChildProcess, timeoutMs: number): Promise<void> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    if (proc.exitCode !== null || proc.signalCode !== null) throw new Error(`QEMU exited with ${proc.exitCode ?? proc.signalCode}`);
    const ok = await Promise.all(paths.map((p) => stat(p).then(() => true, () => false)));
    if (ok.every(Boolean)) return;
    if (Date.now() > end) throw new Error(`its sockets did not appear within ${timeoutMs} ms`);
    await sleep(5);
  }
}

/** The guest's side of QEMU's user-mode network (its defaults). */
const USER_NET = { addr: "10.0.2.15", netmask: "255.255.255.0", gateway: "10.0.2.2", dns: "10.0.2.3" };

/** Host memory a VMM may use beyond guest RAM (its own heap, TCG code buffer, I/O page cache); seen ~0.1–0.3 GiB. */
const VMM_MEMORY_OVERHEAD_MIB = 512;
/** Threads a VMM may have (seen: 10 for one vCPU). */
const VMM_PIDS_MAX = 256;

/** Extra address space a VMM needs beyond guest RAM (code buffer, threads, libraries); peak seen ~0.9 GiB. */
const VMM_ADDRESS_SPACE_OVERHEAD_MIB = 2048;

/** Whether a /proc cmdline is a QEMU's (started by name or by path). */
export function isQemuCommand(cmdline: string): boolean {
  return /^(\S*\/)?qemu-system-/.test(cmdline);
}

/** Makes a snapshot file root's and read-only for everyone. */
async function sealFile(file: string): Promise<void> {
  await chown(file, 0, 0).catch(() => {}); // not root: the file is the server's own already
  await chmod(file, 0o444);
}

/** The absolute path of a program, looked up in $PATH (the jail helper execs it directly). */
function findProgram(name: string): string {
  if (name.includes("/")) return name;
  for (const dir of (process.env.PATH ?? "/usr/bin:/bin").split(":")) {
    const p = join(dir || ".", name);
    try {
      accessSync(p, fsConstants.X_OK);
      return p;
    } catch {
      // not here
    }
  }
  return name; // spawn reports it missing
}
