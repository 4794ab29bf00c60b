// Checks of a spawn against this host and its providers, which every interface shares, so that what
// one path accepts another does not refuse later (the checks of values alone are schemas/checks.ts).
import { totalmem } from "node:os";
import type { Provider } from "../../providers/provider.js";
import { badRequest } from "../../http/errors.js";
import { MEMORY_MB } from "../../schemas/bounds.js";

/** More vCPUs than the host has cores never boots in time under emulation: refused at once. */
export function checkVcpus(provider: Provider, vcpus: number, field: string): void {
  const max = provider.maxVcpus();
  if (vcpus > max) throw badRequest(`${field}: ${vcpus} vCPUs asked for, but this host gives a VM at most ${max} (its CPU count)`);
}

/** More memory than the host has fails only after QEMU has tried for a while: refused at once, with the figures. */
export function checkMemory(provider: Provider, memoryMb: number, field: string): void {
  // Every interface's schema has the same bounds; this holds them for callers without one (the library, units converted from GiB).
  if (!Number.isInteger(memoryMb) || memoryMb < MEMORY_MB.minimum || memoryMb > MEMORY_MB.maximum) {
    throw badRequest(`${field}: memory must be a whole number of MiB from ${MEMORY_MB.minimum} to ${MEMORY_MB.maximum}, got ${memoryMb}`);
  }
  const max = provider.maxMemoryMb();
  if (memoryMb > max)
    throw badRequest(`${field}: ${memoryMb} MiB asked for, but one VM on this host can have at most ${max} MiB (it has ${Math.floor(totalmem() / 1048576)} MiB of RAM)`);
}

/** Network "full" needs the host firewall (a root server with iptables): a 400 that says why not. */
export async function checkFullNetwork(provider: Provider): Promise<void> {
  const problem = await provider.nicProblem();
  if (problem) throw badRequest(`network: "full" is not available on this server: ${problem}`);
}
