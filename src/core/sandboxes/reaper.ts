// Expiry, idleness and history: every second, idle sandboxes with an idle policy are paused or
// stopped, idle memory is reclaimed (reclaim.ts), and sandboxes past their TTL are destroyed;
// rows, console logs, egress logs, events and audit entries older than the history retention are removed.
import { rm } from "node:fs/promises";
import type { Core } from "../core.js";
import { destroy, keptLogPath, type Ending } from "./lifecycle.js";
import { mainLogPath } from "./main-process.js";
import { pause } from "./pause.js";
import { reclaimIdle } from "./reclaim.js";
import { stop } from "./stop-start.js";
import { keepClocks } from "./clock.js";

const EXPIRED: Ending = { reason: "ttl", by: "server" };

/**
 * Ends every live sandbox whose expiry has passed: destroyed, or paused when its lifecycle says
 * so (destroyed after all when it cannot be paused, saying why); returns how many.
 */
export async function prune(core: Core): Promise<number> {
  // A pause takes longer than a tick: one in progress is left to finish.
  const expired = core.sandboxes.expired(new Date().toISOString()).filter((r) => !core.table.pausing.has(r.id));
  await Promise.all(expired.map((r) => (r.lifecycle?.on_expiry === "pause" ? pauseAtExpiry(core, r.id) : destroy(core, r.id, EXPIRED))));
  return expired.length;
}

async function pauseAtExpiry(core: Core, id: string): Promise<void> {
  const sb = core.table.live.get(id);
  if (!sb) return destroy(core, id, EXPIRED);
  try {
    await pause(core, sb, "paused", "timeout", core.sandboxes.get(id)?.lifecycle?.pause_memory !== false);
  } catch {
    // Cannot be saved now (the disk is full, its VM went away): it expires as any other.
    await destroy(core, id, EXPIRED);
  }
}

/** Sandboxes being paused or stopped for idleness (that takes longer than a tick). */
const idling = new Set<string>();

/**
 * Pauses (or stops) every running sandbox whose idle policy's interval has passed with nothing
 * in flight (Sandbox.busy). A pause that cannot be made (a full disk) leaves it running, says
 * why in a `sandbox.pause_failed` event, and is tried again after another idle interval.
 */
export function settleIdle(core: Core): void {
  const now = Date.now();
  for (const [id, sb] of core.table.live) {
    const row = core.sandboxes.get(id);
    if (!row?.idle_ms || !row.idle_action || sb.idleMs(now) < row.idle_ms) continue;
    if (idling.has(id) || core.table.destroying.has(id) || core.table.pausing.has(id) || core.table.waking.has(id) || core.disk.full) continue;
    idling.add(id);
    core.events.emit("sandbox.idle", id, { idle_ms: sb.idleMs(now), action: row.idle_action });
    const work = row.idle_action === "pause" ? pause(core, sb, "paused", "idle") : stop(core, id);
    void work
      .catch((e: Error) => {
        sb.touch(); // the next try waits a whole interval
        core.events.emit("sandbox.pause_failed", id, { reason: "idle", action: row.idle_action, error: e.message.split("\n")[0] });
      })
      .finally(() => idling.delete(id));
  }
}

/**
 * How long a sandbox is unused before its idle memory is reclaimed, unless the config says
 * otherwise. Long, because the drop costs the next command that reads the same files: 2.9× here
 * under TCG for one that re-reads /usr/bin (docs/benchmarks.md), against ~9% less PSS.
 */
export const DEFAULT_RECLAIM_AFTER_MS = 10 * 60_000;

/** One round of the reaper; failures wait for the next round. */
export async function reap(core: Core): Promise<void> {
  try {
    settleIdle(core);
    keepClocks(core);
    const reclaimAfter = core.opts.memory?.reclaimAfterMs ?? DEFAULT_RECLAIM_AFTER_MS;
    if (reclaimAfter > 0) reclaimIdle(core, reclaimAfter);
    await prune(core);
    const cutoff = new Date(Date.now() - (core.opts.historyRetentionMs ?? 7 * 86_400_000)).toISOString();
    for (const id of core.sandboxes.pruneHistory(cutoff)) {
      await rm(keptLogPath(core, id), { force: true });
      await rm(mainLogPath(core, id), { force: true });
      await core.egress.removeLog(id);
    }
    core.eventStore.trim(cutoff);
    core.audit.trim(cutoff);
  } catch {
    // the next tick tries again
  }
}
