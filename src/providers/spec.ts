// Checks of a VmSpec every provider makes before it starts anything.
import { totalmem } from "node:os";
import type { Vm, VmSpec } from "./provider.js";
import { MEMORY_MB, VCPUS } from "../schemas/bounds.js";

/** Memory the host keeps for itself (the server, QEMU's own, the page cache) when one VM asks for the most. */
const HOST_RESERVE_MB = 512;

/** Most memory one VM on this host may have: its RAM, less what the host needs to go on. */
export function hostMemoryCapMb(): number {
  return Math.max(MEMORY_MB.minimum, Math.floor(totalmem() / 1048576) - HOST_RESERVE_MB);
}

const ID_RE = /^[a-z0-9][a-z0-9-]{0,62}$/;

/** Refuses a spec no sandbox can be made from, with a RangeError naming the field. */
export function validateSpec(spec: VmSpec): void {
  if (!ID_RE.test(spec.id)) throw new RangeError(`id "${spec.id}" must be 1-63 lowercase letters, digits or dashes`);
  if (!Number.isInteger(spec.memoryMb) || spec.memoryMb < MEMORY_MB.minimum || spec.memoryMb > MEMORY_MB.maximum) {
    throw new RangeError(`memoryMb must be an integer between ${MEMORY_MB.minimum} and ${MEMORY_MB.maximum}, got ${spec.memoryMb}`);
  }
  if (!Number.isInteger(spec.vcpus) || spec.vcpus < VCPUS.minimum || spec.vcpus > VCPUS.maximum) {
    throw new RangeError(`vcpus must be an integer between ${VCPUS.minimum} and ${VCPUS.maximum}, got ${spec.vcpus}`);
  }
  if (spec.hostname !== undefined && !/^[A-Za-z0-9][A-Za-z0-9-]{0,62}$/.test(spec.hostname)) {
    throw new RangeError(`hostname "${spec.hostname}" must be 1-63 letters, digits or dashes`);
  }
}

/** A probe by a real sandbox: starts one without a disk (`spawn`), pings its agent, destroys it. */
export async function probeBySpawn(spawn: (spec: VmSpec) => Promise<Vm>, memoryMb: number): Promise<boolean> {
  const vm = await spawn({ id: `probe-${process.pid}-${Date.now().toString(36)}`, memoryMb, vcpus: 1 }).catch(() => null);
  if (!vm) return false;
  try {
    await vm.guest.request<"ping">({ op: "ping" });
    return true;
  } catch {
    return false;
  } finally {
    await vm.destroy();
  }
}
