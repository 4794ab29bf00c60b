// Expiry, idleness and history: every second, idle sandboxes with an idle stop are stopped,
// sandboxes past their TTL are destroyed; rows, console logs,
// egress logs, events and audit entries older than the history retention are removed.
import { rm } from "node:fs/promises";
import type { Core } from "./core.js";
import { destroy, keptLogPath } from "./lifecycle.js";
import { mainLogPath } from "./main-process.js";
import { pause } from "./pause.js";
import { stop } from "./stop-start.js";

/**
 * Ends every live sandbox whose expiry has passed: destroyed, or paused when its lifecycle says
 * so (destroyed after all when it cannot be paused, saying why); returns how many.
 */
export async function prune(core: Core): Promise<number> {
  // A pause takes longer than a tick: one in progress is left to finish.
  const expired = core.sandboxes.expired(new Date().toISOString()).filter((r) => !core.pausing.has(r.id));
  await Promise.all(expired.map((r) => (r.lifecycle?.on_expiry === "pause" ? pauseAtExpiry(core, r.id) : destroy(core, r.id, "expired"))));
  return expired.length;
}

async function pauseAtExpiry(core: Core, id: string): Promise<void> {
  const sb = core.live.get(id);
  if (!sb) return destroy(core, id, "expired");
  try {
    await pause(core, sb, "paused", "timeout");
  } catch {
    // Cannot be saved now (the disk is full, its VM went away): it expires as any other.
    await destroy(core, id, "expired");
  }
}

/** Sandboxes being stopped for idleness (a stop takes longer than a tick). */
const idling = new Set<string>();

/** Stops every running sandbox with an idle stop that has gone unused that long. */
export function stopIdle(core: Core): void {
  const now = Date.now();
  for (const [id, sb] of core.live) {
    const idle = core.sandboxes.get(id)?.idle_stop_ms;
    if (!idle || now - sb.lastActive < idle || idling.has(id) || core.destroying.has(id)) continue;
    idling.add(id);
    core.events.emit("sandbox.idle", id, { idle_ms: now - sb.lastActive });
    void stop(core, id)
      .catch(() => {})
      .finally(() => idling.delete(id));
  }
}

/** One round of the reaper; failures wait for the next round. */
export async function reap(core: Core): Promise<void> {
  try {
    stopIdle(core);
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
