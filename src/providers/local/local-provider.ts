// The local provider: no VM. Each sandbox is bubblewrap's Linux namespaces (pid, mount, uts, ipc,
// network unless it has the full network) over an overlay of its image's tree, with the same
// agent as a VM's, on an inherited socket; so every operation core has works the same way. It is
// for development and CI machines where QEMU cannot run, and is not a security boundary: the
// sandbox shares the host's kernel. It cannot snapshot, fork, commit, attach volumes or outlive
// its server; core refuses those by name from `features`.
import { availableParallelism } from "node:os";
import { MEMORY_MB } from "../../schemas/bounds.js";
import { join } from "node:path";
import { cgroupVersion } from "../cgroups.js";
import { readdir, rm } from "node:fs/promises";
import type { Paths } from "../../config/paths.js";
import { run } from "../../util/process.js";
import type { AttachSpec, Provider, ProviderFeatures, ProviderHealth, Vm, VmSpec } from "../provider.js";
import { hostMemoryCapMb, probeBySpawn, validateSpec } from "../spec.js";
import { launchLocal, type LocalRuntime } from "./launch.js";
import { RootfsTrees } from "./rootfs-tree.js";

/** What every place that shows the local provider says about it. */
export const LOCAL_WARNING = "not a security boundary: sandboxes are Linux namespaces on the host's kernel (for development and CI)";

export interface LocalProviderOptions {
  paths: Paths;
  /** Hello deadline (default 10 s). */
  bootTimeoutMs?: number;
}

export class LocalProvider implements Provider {
  readonly name = "local";
  readonly features: ProviderFeatures = { snapshots: false, reattach: false, volumes: false, init: false, commit: false, isolation: "namespaces" };
  private readonly rt: LocalRuntime;
  private readonly imagesDir: string;

  constructor(opts: LocalProviderOptions) {
    const dir = join(opts.paths.dataDir, "local");
    this.imagesDir = opts.paths.imagesDir;
    this.rt = {
      dir,
      agentBinary: opts.paths.agentBinary,
      trees: new RootfsTrees(join(dir, "trees")),
      live: new Set(),
      bootTimeoutMs: opts.bootTimeoutMs ?? 10_000,
      cgroups: cgroupVersion(),
    };
    process.once("exit", () => {
      for (const vm of this.rt.live) process.kill(vm.info.pid, "SIGKILL");
    });
  }

  async health(): Promise<ProviderHealth> {
    const problems: string[] = [];
    const details: Record<string, string> = {
      isolation: "namespaces",
      warning: LOCAL_WARNING,
      limits: this.rt.cgroups ? `memory, CPU and tasks by cgroup ${this.rt.cgroups}` : "none: no usable cgroups (not root)",
    };
    const bwrap = await run("bwrap", ["--version"]).catch(() => null);
    if (bwrap) details.bubblewrap = bwrap.stdout.trim().replace(/^bubblewrap /, "");
    else problems.push("bubblewrap is not installed (apt-get install bubblewrap)");
    if (!(await run("debugfs", ["-V"]).catch(() => null))) problems.push("debugfs is not installed (apt-get install e2fsprogs)");
    if (process.getuid?.() !== 0) problems.push("the local provider needs root (it mounts an overlay for each sandbox)");
    if (!(await run("test", ["-x", this.rt.agentBinary]).catch(() => null))) problems.push(`the agent binary is missing at ${this.rt.agentBinary} (run ./setup.sh)`);
    return { name: this.name, healthy: problems.length === 0, accel: null, problems, details };
  }

  probe(): Promise<boolean> {
    return probeBySpawn((spec) => launchLocal(this.rt, spec), MEMORY_MB.minimum);
  }

  maxVcpus(): number {
    return availableParallelism();
  }

  maxMemoryMb(): number {
    return hostMemoryCapMb();
  }

  async spawn(spec: VmSpec): Promise<Vm> {
    validateSpec(spec);
    return launchLocal(this.rt, spec);
  }

  async machineKey(): Promise<string> {
    return "local";
  }

  async nicProblem(): Promise<string | null> {
    return null;
  }

  async attach(a: AttachSpec): Promise<Vm> {
    throw new Error(`local sandbox ${a.id} ended with its server`);
  }

  /**
   * Directories of sandboxes an earlier server left (their processes died with it); and, while no
   * sandbox runs here, the trees of image files that are gone (removed or replaced images).
   */
  async sweepOrphans(keep: Set<string>): Promise<string[]> {
    const live = new Set([...this.rt.live].map((v) => v.info.id));
    const gone: string[] = [];
    const dir = join(this.rt.dir, "sandboxes");
    for (const id of await readdir(dir).catch(() => [] as string[])) {
      if (keep.has(id) || live.has(id)) continue;
      await rm(join(dir, id), { recursive: true, force: true });
      gone.push(id);
    }
    if (!this.rt.live.size && !keep.size) {
      const images = await readdir(this.imagesDir).catch(() => [] as string[]);
      const keys = new Set((await Promise.all(images.map((i) => RootfsTrees.keyOf(join(this.imagesDir, i, "rootfs.ext4"))))).filter((k): k is string => !!k));
      await this.rt.trees.prune((k) => keys.has(k));
    }
    return gone;
  }

  async destroyAll(): Promise<void> {
    await Promise.all([...this.rt.live].map((vm) => vm.destroy()));
  }
}
