// One running local sandbox: its agent channel and log, its cost read from its processes, and
// its destruction (the process tree, then its directory). Snapshots, commits and re-attaching
// need a VM; core refuses them before they reach here (the provider's features say so).
import type { ChildProcess } from "node:child_process";
import { readdir, readFile, rm } from "node:fs/promises";
import type { AgentChannel } from "../../agent-client/index.js";
import { type CgroupVersion, emptyAndRemoveCgroup } from "../cgroups.js";
import type { ConsoleLog } from "../console-log.js";
import { processUsage } from "../process-usage.js";
import type { Vm, VmInfo, VmUsage } from "../provider.js";
import { Vmless } from "../vmless.js";

const NO_VM = "a local sandbox is not a VM: it has no snapshots or disk copies, and ends with its server";

export class LocalVm extends Vmless implements Vm {
  protected readonly noVmm = NO_VM;
  private destroying: Promise<void> | null = null;

  constructor(
    readonly info: VmInfo,
    readonly guest: AgentChannel,
    private readonly console: ConsoleLog,
    readonly exited: Promise<void>,
    private readonly proc: ChildProcess,
    private readonly cgroups: CgroupVersion | null,
    private readonly forget: () => void,
  ) {
    super();
    // The sandbox ends when its process tree does (the agent shut down, or someone killed it).
    void exited.then(() => {
      guest.close();
      this.console.close();
    });
  }

  consoleTail(bytes = 4096): string {
    return this.console.getTail(bytes);
  }

  destroy(): Promise<void> {
    this.destroying ??= (async () => {
      if (this.proc.exitCode === null && this.proc.signalCode === null) this.proc.kill("SIGKILL");
      await this.exited;
      this.guest.close();
      this.console.close();
      // A process that left bubblewrap's tree is still in the sandbox's cgroup: it goes too.
      if (this.cgroups) await emptyAndRemoveCgroup(this.cgroups, this.info.id);
      await rm(this.info.dir, { recursive: true, force: true });
      this.forget();
    })();
    return this.destroying;
  }

  /** The sum over every process of the sandbox (the namespace's processes descend from its first). */
  async usage(): Promise<VmUsage | null> {
    if (this.proc.exitCode !== null || this.proc.signalCode !== null) return null;
    const pids = await descendants(this.info.pid);
    const all = await Promise.all(pids.map((p) => processUsage(p)));
    const sum: VmUsage = { cpuMs: 0, rssBytes: 0, pssBytes: 0, diskReadBytes: 0, diskWriteBytes: 0 };
    for (const u of all) {
      if (!u) continue;
      for (const k of Object.keys(sum) as (keyof VmUsage)[]) sum[k] += u[k];
    }
    return sum;
  }
}

/** `root` and every process below it, from /proc's parent links. */
async function descendants(root: number): Promise<number[]> {
  const parent = new Map<number, number>();
  for (const name of await readdir("/proc").catch(() => [] as string[])) {
    if (!/^\d+$/.test(name)) continue;
    const stat = await readFile(`/proc/${name}/stat`, "utf8").catch(() => "");
    const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
    if (ppid) parent.set(Number(name), ppid);
  }
  const out = [root];
  for (let i = 0; i < out.length; i++) for (const [pid, pp] of parent) if (pp === out[i]) out.push(pid);
  return out;
}
