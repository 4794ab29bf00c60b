// Expiry, idleness and history: every second, idle sandboxes with an idle stop are stopped,
// sandboxes past their TTL are destroyed; rows, console logs,
// egress logs, events and audit entries older than the history retention are removed.
import { rm } from "node:fs/promises";
import type { Core } from "./core.js";
import { destroy, keptLogPath } from "./lifecycle.js";
import { mainLogPath } from "./main-process.js";
import { stop } from "./stop-start.js";

/** Destroys every live sandbox whose expiry has passed; returns how many. */
export async function prune(core: Core): Promise<number> {
  const expired = core.sandboxes.expired(new Date().toISOString());
  await Promise.all(expired.map((r) => destroy(core, r.id, "expired")));
  return expired.length;
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
