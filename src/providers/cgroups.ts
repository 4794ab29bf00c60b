// Host-side limits on each sandbox's processes: a cgroup per sandbox under `forgevm/` with a
// memory limit, a CPU quota and a task limit. For a confined QEMU these are the guest's RAM plus
// the VMM's overhead and its vCPUs plus one core (the jail helper moves QEMU in before it execs);
// for a local sandbox its memory and vCPUs (its first process moves itself in before it starts
// anything). cgroup v2 where the host has it, else the v1 memory, cpu and pids hierarchies.
import { existsSync, statfsSync } from "node:fs";
import { mkdir, readdir, readFile, rmdir, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { ignore } from "../util/ignore.js";

const ROOT = "/sys/fs/cgroup";
const CGROUP2_MAGIC = 0x63677270;
const GROUP = "forgevm";

export type CgroupVersion = "v2" | "v1";

export interface VmCgroupLimits {
  memoryBytes: number;
  /** CPU time per wall-clock second, in cores. */
  cpus: number;
  pidsMax: number;
}

/** The cgroup version this host offers for VM limits, or null (not root, or no usable controllers). */
export function cgroupVersion(): CgroupVersion | null {
  if (process.getuid?.() !== 0) return null;
  try {
    if (statfsSync(ROOT).type === CGROUP2_MAGIC) return "v2";
  } catch {
    return null;
  }
  return ["memory", "cpu", "pids"].every((c) => existsSync(join(ROOT, c, "cgroup.procs"))) ? "v1" : null;
}

/** The directories of a VM's cgroup (one per v1 controller, one for v2). */
export function vmCgroupDirs(version: CgroupVersion, id: string): string[] {
  return version === "v2" ? [join(ROOT, GROUP, id)] : ["memory", "cpu", "pids"].map((c) => join(ROOT, c, GROUP, id));
}

/** Makes a VM's cgroup with its limits; returns the `cgroup.procs` files QEMU must join. */
export async function createVmCgroup(version: CgroupVersion, id: string, l: VmCgroupLimits): Promise<string[]> {
  const period = 100_000;
  const quota = Math.round(l.cpus * period);
  if (version === "v2") {
    const base = join(ROOT, GROUP);
    await mkdir(base, { recursive: true });
    // Controllers must be enabled on every level above a cgroup that uses them.
    await writeFile(join(ROOT, "cgroup.subtree_control"), "+memory +cpu +pids").catch(ignore("controllers already enabled, or not delegable here"));
    await writeFile(join(base, "cgroup.subtree_control"), "+memory +cpu +pids");
    const dir = join(base, id);
    await mkdir(dir, { recursive: true });
    await writeFile(join(dir, "memory.max"), String(l.memoryBytes));
    await writeFile(join(dir, "memory.swap.max"), "0").catch(ignore("no swap accounting: nothing to cap"));
    await writeFile(join(dir, "cpu.max"), `${quota} ${period}`);
    await writeFile(join(dir, "pids.max"), String(l.pidsMax));
    return [join(dir, "cgroup.procs")];
  }
  const [mem, cpu, pids] = vmCgroupDirs(version, id);
  for (const d of [mem, cpu, pids]) await mkdir(d, { recursive: true });
  await writeFile(join(mem, "memory.limit_in_bytes"), String(l.memoryBytes));
  await writeFile(join(cpu, "cpu.cfs_period_us"), String(period));
  await writeFile(join(cpu, "cpu.cfs_quota_us"), String(quota));
  await writeFile(join(pids, "pids.max"), String(l.pidsMax));
  return [mem, cpu, pids].map((d) => join(d, "cgroup.procs"));
}

/** Removes a VM's cgroup once its QEMU is gone (a cgroup with a live task cannot be removed). */
export async function removeVmCgroup(version: CgroupVersion, id: string): Promise<void> {
  for (const d of vmCgroupDirs(version, id)) await rmdir(d).catch(ignore("already gone"));
}

/** Kills whatever still runs in a sandbox's cgroup, then removes it (its processes take a moment to go). */
export async function emptyAndRemoveCgroup(version: CgroupVersion, id: string): Promise<void> {
  const dirs = vmCgroupDirs(version, id);
  for (let attempt = 0; attempt < 50; attempt++) {
    for (const d of dirs) {
      for (const pid of (await readFile(join(d, "cgroup.procs"), "utf8").catch(() => "")).split("\n").filter(Boolean)) {
        try {
          process.kill(Number(pid), "SIGKILL");
        } catch {
          // gone already
        }
      }
    }
    await removeVmCgroup(version, id);
    if (!dirs.some((d) => existsSync(d))) return;
    await new Promise((r) => setTimeout(r, 20));
  }
}

/**
 * How old an empty VM cgroup must be before a sweep removes it. Another server on this host (a
 * second data directory, a cluster node) makes a VM's cgroup moments before its jail helper moves
 * QEMU in: swept in between, the helper finds no cgroup and the spawn fails. A cgroup's directory
 * is stamped when it is made, and a leftover of a VM gone unwatched is older than any setup.
 */
export const SWEEP_MIN_AGE_MS = 60_000;

/** Removes every empty VM cgroup (of VMs gone while no server watched them) older than SWEEP_MIN_AGE_MS. */
export async function sweepVmCgroups(version: CgroupVersion, now = Date.now()): Promise<void> {
  const bases = version === "v2" ? [join(ROOT, GROUP)] : ["memory", "cpu", "pids"].map((c) => join(ROOT, c, GROUP));
  for (const base of bases) {
    for (const name of await readdir(base).catch(() => [] as string[])) {
      if (!/^[a-z0-9-]{1,63}$/.test(name)) continue;
      const made = (await stat(join(base, name)).catch(() => null))?.mtimeMs ?? now;
      if (now - made < SWEEP_MIN_AGE_MS) continue;
      await rmdir(join(base, name)).catch(ignore("busy: a VM still runs in it"));
    }
  }
}
