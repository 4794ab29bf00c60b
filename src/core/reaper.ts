// Expiry and history: every second, sandboxes past their TTL are destroyed; rows, console logs,
// egress logs, events and audit entries older than the history retention are removed.
import { rm } from "node:fs/promises";
import type { Core } from "./core.js";
import { destroy, keptLogPath } from "./lifecycle.js";

/** Destroys every live sandbox whose expiry has passed; returns how many. */
export async function prune(core: Core): Promise<number> {
  const expired = core.sandboxes.expired(new Date().toISOString());
  await Promise.all(expired.map((r) => destroy(core, r.id, "expired")));
  return expired.length;
}

/** One round of the reaper; failures wait for the next round. */
export async function reap(core: Core): Promise<void> {
  try {
    await prune(core);
    const cutoff = new Date(Date.now() - (core.opts.historyRetentionMs ?? 7 * 86_400_000)).toISOString();
    for (const id of core.sandboxes.pruneHistory(cutoff)) {
      await rm(keptLogPath(core, id), { force: true });
      await core.egress.removeLog(id);
    }
    core.eventStore.trim(cutoff);
    core.audit.trim(cutoff);
  } catch {
    // the next tick tries again
  }
}
