// Guest clocks within a second of the host's. Every boot, restore, resume, fork and re-attach
// sets the guest's clock as the agent says hello (providers: configure's time_ms); while a guest
// runs, this sends the host's time again every CLOCK_EVERY_MS, and the agent steps its clock when
// it is off by more than its slack (agent/src/system.c). Under TCG guests boot with their TSC
// declared reliable (providers/qemu/args.ts), so they keep time well between two of these; a
// guest restored from a snapshot made before that, or one a user's program set, is put right
// here. Under KVM the guest's kvm-clock is kept in step with the host's by the hypervisor, and
// these messages only confirm it.
import type { ForgeOptions } from "../options.js";
import type { Sandbox } from "../guest/sandbox.js";
import { ignore } from "../../util/ignore.js";

/** How often a running guest is sent the host's time. */
export const CLOCK_EVERY_MS = 30_000;

const lastSet = new WeakMap<Sandbox, number>();

/** Sends the host's time to every running guest whose clock was last set more than CLOCK_EVERY_MS ago (the reaper's tick). */
export function keepClocks(core: { readonly opts: Pick<ForgeOptions, "clockEveryMs">; readonly table: { readonly live: ReadonlyMap<string, Sandbox> } }, now = Date.now()): void {
  const every = core.opts.clockEveryMs ?? CLOCK_EVERY_MS;
  if (every <= 0) return;
  for (const sb of core.table.live.values()) {
    const last = lastSet.get(sb);
    if (last !== undefined && now - last < every) continue;
    lastSet.set(sb, now);
    // Just taken on: its start set the clock.
    if (last === undefined || sb.vm.info.accel === "none") continue;
    void sb.setClock().catch(ignore("a guest busy or going away gets the time at the next round"));
  }
}
