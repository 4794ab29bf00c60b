// The balloon by hand: how much of its RAM a running sandbox may use, changed without a restart.
// Every QEMU VM has a virtio balloon (providers/qemu/args.ts); inflating it makes the guest hand
// pages back, which QEMU then returns to the host. It can only take back what the sandbox was
// given: growing past its memory_mb needs a restart with more.
import { badRequest, ForgevmError } from "../../http/errors.js";
import { MEMORY_MB } from "../../schemas/bounds.js";
import type { Sandbox } from "../guest/sandbox.js";

const MIB = 1024 * 1024;
/** What the guest keeps free beyond what it uses now, so that the sandbox goes on running. */
const HEADROOM_MB = 32;

export interface BalloonState {
  /** The memory the sandbox was given. */
  memory_mb: number;
  /** What the balloon leaves it now. */
  actual_mb: number;
  /** What the guest's kernel counts as its total and as available now (/proc/meminfo). */
  guest_total_mb: number;
  guest_available_mb: number;
}

/** The sandbox's balloon now. */
export async function balloonState(sb: Sandbox, memoryMb: number): Promise<BalloonState> {
  const vm = sb.vm;
  if (!vm.balloon) throw new ForgevmError("CONFLICT", `sandbox ${sb.id}'s provider has no balloon`);
  const [actual, info] = await Promise.all([vm.balloon(), meminfo(sb)]);
  return { memory_mb: memoryMb, actual_mb: Math.round(actual / MIB), guest_total_mb: info.total, guest_available_mb: info.available };
}

/**
 * Leaves the sandbox `sizeMb` of RAM: a 400 with the figures when that is more than it was given
 * or less than it needs for what it holds now.
 */
export async function setBalloon(sb: Sandbox, memoryMb: number, sizeMb: number): Promise<BalloonState> {
  if (!Number.isInteger(sizeMb) || sizeMb < MEMORY_MB.minimum) throw badRequest(`memory_mb: give a whole number of MiB, at least ${MEMORY_MB.minimum} (got ${sizeMb})`);
  if (sizeMb > memoryMb)
    throw badRequest(
      `memory_mb: ${sizeMb} MiB is more than sandbox ${sb.id} was given (${memoryMb} MiB); the balloon only takes memory back: restart it with more memory to grow past that`,
    );
  const now = await balloonState(sb, memoryMb);
  // What the kernel keeps for itself (RAM it does not count in MemTotal), what the guest uses, and room.
  const kernel = Math.max(0, now.actual_mb - now.guest_total_mb);
  const least = kernel + (now.guest_total_mb - now.guest_available_mb) + HEADROOM_MB;
  if (sizeMb < least)
    throw badRequest(
      `memory_mb: sandbox ${sb.id} cannot give back enough for ${sizeMb} MiB: it uses ${now.guest_total_mb - now.guest_available_mb} MiB of ${now.guest_total_mb} (its kernel ${kernel} more), so it needs at least ${least} MiB now`,
    );
  await sb.vm.balloon?.(sizeMb * MIB);
  return balloonState(sb, memoryMb);
}

/** MemTotal and MemAvailable of the guest, in MiB. */
async function meminfo(sb: Sandbox): Promise<{ total: number; available: number }> {
  const text = (await sb.readFile("/proc/meminfo", 64 * 1024)).toString();
  const kb = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(text)?.[1] ?? Number.NaN);
  const total = kb("MemTotal");
  const available = kb("MemAvailable");
  if (!Number.isFinite(total) || !Number.isFinite(available)) throw new ForgevmError("INTERNAL_ERROR", `sandbox ${sb.id}: its /proc/meminfo has no MemTotal or MemAvailable`);
  return { total: Math.round(total / 1024), available: Math.round(available / 1024) };
}
