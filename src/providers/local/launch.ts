// Starting one local sandbox: its directory, an overlay over the image's tree mounted in a mount
// namespace of its own (so it goes when the sandbox does), bubblewrap's namespaces inside that,
// and the agent on an inherited socket. Whatever fails on the way is undone.
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdir, rm } from "node:fs/promises";
import { join } from "node:path";
import type { Socket } from "node:net";
import { AgentChannel } from "../../agent-client/index.js";
import { type CgroupVersion, createVmCgroup, emptyAndRemoveCgroup } from "../cgroups.js";
import { ConsoleLog } from "../console-log.js";
import { awaitHello, configure, HelloError } from "../handshake.js";
import { BootError, type VmInfo, type VmSpec } from "../provider.js";
import { LocalVm } from "./local-vm.js";
import type { RootfsTrees } from "./rootfs-tree.js";

/** Where the agent is bound inside the sandbox. */
const AGENT_PATH = "/run/forgevm-agent";
const MiB = 1024 * 1024;
const PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/**
 * What a process in the sandbox may do as root: Docker's default set. Without CAP_SYS_ADMIN,
 * CAP_SYS_TIME and the rest, it cannot mount, set the host's clock or load modules; it shares
 * the host's kernel all the same, so this is no security boundary.
 */
const CAPS = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID", "SETPCAP", "NET_BIND_SERVICE", "SYS_CHROOT", "AUDIT_WRITE", "SETFCAP", "NET_RAW", "MKNOD"];

export interface LocalRuntime {
  /** The provider's directory: sandboxes/ and trees/. */
  dir: string;
  agentBinary: string;
  trees: RootfsTrees;
  live: Set<LocalVm>;
  bootTimeoutMs: number;
  /** The cgroups that limit each sandbox's memory, CPU and tasks; null where the host has none usable. */
  cgroups: CgroupVersion | null;
}

// The first process joins the sandbox's cgroups (so that all it starts is limited), mounts the
// overlay in its private mount namespace, and becomes bubblewrap.
const MOUNT_THEN_EXEC = 'for f in $CGROUP_PROCS; do echo $$ > "$f" || exit 1; done; mount -t overlay forgevm -o "lowerdir=$1,upperdir=$2,workdir=$3" "$4" && shift 4 && exec "$@"';
/** Tasks one local sandbox may have at once. */
const PIDS_MAX = 4096;

/** Starts one sandbox and returns it once its agent has said hello and been configured. */
export async function launchLocal(rt: LocalRuntime, spec: VmSpec): Promise<LocalVm> {
  if (spec.restore || spec.memoryFile || spec.baseDisk) throw new Error("the local provider cannot restore snapshots");
  if (spec.volumes?.length) throw new Error("the local provider cannot attach volumes");
  const dir = join(rt.dir, "sandboxes", spec.id);
  const upper = join(dir, "upper");
  const work = join(dir, "work");
  const root = join(dir, "root");
  // Overlay options are separated by commas and colons: paths holding them cannot be named.
  if (/[,:]/.test(rt.dir)) throw new Error(`the local provider's directory ${rt.dir} must not contain "," or ":"`);
  const lower = spec.rootfs
    ? await rt.trees.of(spec.rootfs).catch((e: Error) => {
        throw new BootError(`local sandbox ${spec.id} did not start: its image cannot be read (${e.message.split("\n")[0]})`, "");
      })
    : join(rt.dir, "empty");
  await mkdir(lower, { recursive: true });
  for (const d of [upper, work, root]) await mkdir(d, { recursive: true });
  const console = new ConsoleLog(join(dir, "console.log"));
  const hostname = spec.hostname ?? spec.id;
  // biome-ignore format: an option and its arguments read best on one line
  const bwrap = [
    "bwrap",
    "--bind", root, "/",
    "--proc", "/proc",
    "--dev", "/dev",
    "--tmpfs", "/run",
    "--ro-bind", rt.agentBinary, AGENT_PATH,
    "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
    ...(spec.nic ? ["--ro-bind-try", "/etc/resolv.conf", "/etc/resolv.conf"] : ["--unshare-net"]),
    "--hostname", hostname,
    "--die-with-parent",
    "--cap-drop", "ALL",
    ...CAPS.flatMap((c) => ["--cap-add", `CAP_${c}`]),
    "--clearenv", "--setenv", "PATH", PATH, "--setenv", "HOME", "/root",
    AGENT_PATH, "--fd", "3",
  ];
  const procsFiles = rt.cgroups ? await createVmCgroup(rt.cgroups, spec.id, { memoryBytes: spec.memoryMb * MiB, cpus: spec.vcpus, pidsMax: PIDS_MAX }) : [];
  const proc = spawn("unshare", ["--mount", "--propagation", "private", "--", "sh", "-c", MOUNT_THEN_EXEC, "sh", lower, upper, work, root, ...bwrap], {
    stdio: ["ignore", "ignore", "pipe", "pipe"],
    env: { PATH, CGROUP_PROCS: procsFiles.join(" ") },
  });
  const exited = new Promise<void>((resolve) => proc.once("exit", () => resolve()));
  proc.on("error", () => {}); // a missing program shows as an exit before hello
  console.attach(proc.stderr!);
  const channel = new AgentChannel(proc.stdio[3] as Socket);
  const undo = async () => {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill("SIGKILL");
    await exited;
    console.close();
    if (rt.cgroups) await emptyAndRemoveCgroup(rt.cgroups, spec.id);
    await rm(dir, { recursive: true, force: true });
  };
  try {
    const t0 = Date.now();
    const hello = await awaitHello(channel, { deadlineMs: spec.bootTimeoutMs ?? rt.bootTimeoutMs, exited });
    // The hostname came from bubblewrap; the clock, entropy and limits are the host's own.
    await configure(channel, { machine_id: randomBytes(16).toString("hex") });
    const info: VmInfo = {
      id: spec.id,
      pid: proc.pid!,
      dir,
      accel: "none",
      memoryMb: spec.memoryMb,
      vcpus: spec.vcpus,
      agentVersion: hello.agent,
      bootMs: Date.now() - t0,
      restored: false,
    };
    const vm = new LocalVm(info, channel, console, exited, proc, rt.cgroups, () => rt.live.delete(vm));
    rt.live.add(vm);
    return vm;
  } catch (e) {
    const tail = console.getTail();
    await undo();
    if (e instanceof HelloError) throw new BootError(`local sandbox ${spec.id} did not start: ${e.message}`, tail);
    throw e;
  }
}
