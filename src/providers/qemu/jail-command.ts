// The jail helper's command line for one VMM: the files it may see (its own directory read-write;
// kernel, initramfs, disk backing chain and snapshot RAM read-only), its cgroup and its limits.
import { createVmCgroup } from "../cgroups.js";
import type { Accel, VmSpec } from "../provider.js";
import { TCG_TB_MIB, tcgTranslationMib, type VmFiles } from "./args.js";
import { JAIL_PRELOAD, backingChain, jailArgs, kvmGroup, qcowVirtualSize } from "./jail.js";
import type { QemuRuntime } from "./runtime.js";

/** Host memory a VMM may use beyond guest RAM (its own heap, TCG code buffer, I/O page cache); seen ~0.1–0.3 GiB. */
const VMM_MEMORY_OVERHEAD_MIB = 512;
/** Threads a VMM may have (seen: 10 for one vCPU). */
const VMM_PIDS_MAX = 256;
/** Extra address space a VMM needs beyond guest RAM (code buffer, threads, libraries); peak seen ~0.9 GiB. */
const VMM_ADDRESS_SPACE_OVERHEAD_MIB = 2048;

/** The jail helper's command line that starts a VMM confined to this VM's own files. */
export async function jailPrefix(rt: QemuRuntime, spec: VmSpec, files: VmFiles, dir: string, uid: number, accel: Accel, env: Record<string, string>): Promise<string[]> {
  const jail = rt.jail!;
  const ro = [rt.paths.kernel, rt.paths.initramfs];
  if (files.disk) ro.push(...(await backingChain(files.disk)).slice(1));
  const rw = [dir];
  for (const v of spec.volumes ?? []) (v.readOnly ? ro : rw).push(v.file);
  if (files.memory?.share) rw.push(files.memory.file);
  else if (files.memory) ro.push(files.memory.file, JAIL_PRELOAD);
  const kvm = accel === "kvm" ? kvmGroup() : null;
  const MiB = 1048576;
  // the largest file it writes: its overlay (bounded by the disk's virtual size) or its RAM file
  const diskBytes = files.disk ? await qcowVirtualSize(files.disk) : 0;
  // A translation cache larger than the usual one (args.ts) is room the VMM needs besides.
  const cache = accel === "tcg" ? tcgTranslationMib(spec.memoryMb) - TCG_TB_MIB : 0;
  const cgroups = rt.cgroups
    ? await createVmCgroup(rt.cgroups, spec.id, { memoryBytes: (spec.memoryMb + VMM_MEMORY_OVERHEAD_MIB + cache) * MiB, cpus: spec.vcpus + 1, pidsMax: VMM_PIDS_MAX })
    : [];
  const args = jailArgs(jail, {
    cgroups,
    hostNet: !!spec.nic,
    uid,
    groups: kvm !== null ? [kvm] : [],
    rw,
    ro,
    rlimits: {
      as: (spec.memoryMb + VMM_ADDRESS_SPACE_OVERHEAD_MIB + cache) * MiB,
      nofile: 4096,
      core: 0,
      fsize: Math.round(Math.max(diskBytes, spec.memoryMb * MiB, ...(spec.volumes ?? []).map((v) => v.bytes)) * 1.25) + 256 * MiB,
    },
    nice: spec.nice,
    env,
  });
  return [jail.helper, ...args, "--"];
}
