// Idle memory reclaim: a running sandbox nothing has used for `memory.reclaim_after` is asked,
// once per idle spell, to drop its clean page cache and compact its free memory; the balloon's
// free page reporting then hands the freed blocks to the host, which discards them. The next
// command reads what it needs from the disk again. Agents without the `reclaim` feature (an old
// initramfs) are skipped.
import type { EventBus } from "../events.js";
import type { SandboxTable } from "./table.js";
import type { Sandbox } from "../guest/sandbox.js";
import { ignore } from "../../util/ignore.js";

/** Sandboxes asked since their last activity, with when; a later activity makes them eligible again. */
const reclaimed = new WeakMap<Sandbox, number>();

/** Asks every sandbox idle for at least `afterMs` (and not asked since it was last used) to give its idle memory back. */
export function reclaimIdle(core: { readonly table: Pick<SandboxTable, "live" | "pausing" | "destroying">; readonly events: Pick<EventBus, "emit"> }, afterMs: number): void {
  const now = Date.now();
  for (const [id, sb] of core.table.live) {
    if (sb.idleMs(now) < afterMs || (reclaimed.get(sb) ?? 0) >= sb.lastActive) continue;
    if (core.table.pausing.has(id) || core.table.destroying.has(id) || !sb.vm.guest.supports("reclaim")) continue;
    reclaimed.set(sb, now);
    // Not work of the sandbox's: it does not count as activity, and an idle pause may follow.
    void sb.vm.guest
      .request<"reclaim">({ op: "reclaim" }, { timeoutMs: 30_000 })
      .then((r) => core.events.emit("sandbox.reclaimed", id, { free_kib: r.free_kib }))
      .catch(ignore("reclaim is a hint; the next idle check tries again"));
  }
}
