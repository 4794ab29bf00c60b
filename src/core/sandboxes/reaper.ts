// Expiry, idleness and history: every second, idle sandboxes with an idle policy are paused or
// stopped, idle memory is reclaimed (reclaim.ts), and sandboxes past their TTL are destroyed;
// rows, console logs, egress logs, events and audit entries older than the history retention are removed.
import { rm } from "node:fs/promises";
import type { Paths } from "../../config/paths.js";
import type { SandboxStore } from "../../store/sandboxes.js";
import type { EventStore } from "../../store/events.js";
import type { AuditStore } from "../../store/audit.js";
import type { EgressProxy } from "../../net/egress-proxy.js";
import type { EventBus } from "../events.js";
import type { ForgeOptions } from "../options.js";
import type { DiskSpace } from "../host/disk-space.js";
import type { SandboxTable } from "./table.js";
import type { Lifecycle } from "./lifecycle.js";
import type { Pauses } from "./pause.js";
import type { StopStart } from "./stop-start.js";
import { keptLogPath, type Ending } from "./lifecycle.js";
import { mainLogPath } from "./main-process.js";
import { reclaimIdle } from "./reclaim.js";
import { keepClocks } from "./clock.js";

const EXPIRED: Ending = { reason: "ttl", by: "server" };

/** What the reaper goes over and ends: the rows and run-time state of sandboxes, their ends, pauses and stops, and the history kept of them. */
export interface ReaperDeps {
  readonly paths: Paths;
  readonly opts: Pick<ForgeOptions, "memory" | "historyRetentionMs" | "clockEveryMs">;
  readonly sandboxes: SandboxStore;
  readonly table: SandboxTable;
  readonly events: EventBus;
  readonly eventStore: Pick<EventStore, "trim">;
  readonly audit: Pick<AuditStore, "trim">;
  readonly egress: Pick<EgressProxy, "removeLog">;
  readonly disk: Pick<DiskSpace, "full">;
  readonly lifecycle: Pick<Lifecycle, "destroy">;
  readonly pauses: Pick<Pauses, "pause">;
  readonly stopStart: Pick<StopStart, "stop">;
}

/** Ends what expired, pauses or stops what idles, and prunes the history: one round a tick. */
export class Reaper {
  /** Sandboxes being paused or stopped for idleness (that takes longer than a tick). */
  private readonly idling = new Set<string>();

  constructor(private readonly d: ReaperDeps) {}

  /**
   * Ends every live sandbox whose expiry has passed: destroyed, or paused when its lifecycle says
   * so (destroyed after all when it cannot be paused, saying why); returns how many.
   */
  async prune(): Promise<number> {
    // A pause takes longer than a tick: one in progress is left to finish.
    const expired = this.d.sandboxes.expired(new Date().toISOString()).filter((r) => !this.d.table.pausing.has(r.id));
    await Promise.all(expired.map((r) => (r.lifecycle?.on_expiry === "pause" ? this.pauseAtExpiry(r.id) : this.d.lifecycle.destroy(r.id, EXPIRED))));
    return expired.length;
  }

  private async pauseAtExpiry(id: string): Promise<void> {
    const sb = this.d.table.live.get(id);
    if (!sb) return this.d.lifecycle.destroy(id, EXPIRED);
    try {
      await this.d.pauses.pause(sb, "paused", "timeout", this.d.sandboxes.get(id)?.lifecycle?.pause_memory !== false);
    } catch {
      // Cannot be saved now (the disk is full, its VM went away): it expires as any other.
      await this.d.lifecycle.destroy(id, EXPIRED);
    }
  }

  /**
   * Pauses (or stops) every running sandbox whose idle policy's interval has passed with nothing
   * in flight (Sandbox.busy). A pause that cannot be made (a full disk) leaves it running, says
   * why in a `sandbox.pause_failed` event, and is tried again after another idle interval.
   */
  settleIdle(): void {
    const now = Date.now();
    for (const [id, sb] of this.d.table.live) {
      const row = this.d.sandboxes.get(id);
      if (!row?.idle_ms || !row.idle_action || sb.idleMs(now) < row.idle_ms) continue;
      if (this.idling.has(id) || this.d.table.destroying.has(id) || this.d.table.pausing.has(id) || this.d.table.waking.has(id) || this.d.disk.full) continue;
      this.idling.add(id);
      this.d.events.emit("sandbox.idle", id, { idle_ms: sb.idleMs(now), action: row.idle_action });
      const work = row.idle_action === "pause" ? this.d.pauses.pause(sb, "paused", "idle") : this.d.stopStart.stop(id);
      void work
        .catch((e: Error) => {
          sb.touch(); // the next try waits a whole interval
          this.d.events.emit("sandbox.pause_failed", id, { reason: "idle", action: row.idle_action, error: e.message.split("\n")[0] });
        })
        .finally(() => this.idling.delete(id));
    }
  }

  /** One round of the reaper; failures wait for the next round. */
  async reap(): Promise<void> {
    try {
      this.settleIdle();
      keepClocks(this.d);
      const reclaimAfter = this.d.opts.memory?.reclaimAfterMs ?? DEFAULT_RECLAIM_AFTER_MS;
      if (reclaimAfter > 0) reclaimIdle(this.d, reclaimAfter);
      await this.prune();
      const cutoff = new Date(Date.now() - (this.d.opts.historyRetentionMs ?? 7 * 86_400_000)).toISOString();
      for (const id of this.d.sandboxes.pruneHistory(cutoff)) {
        await rm(keptLogPath(this.d.paths, id), { force: true });
        await rm(mainLogPath(this.d, id), { force: true });
        await this.d.egress.removeLog(id);
      }
      this.d.eventStore.trim(cutoff);
      this.d.audit.trim(cutoff);
    } catch {
      // the next tick tries again
    }
  }
}

/**
 * How long a sandbox is unused before its idle memory is reclaimed, unless the config says
 * otherwise. Long, because the drop costs the next command that reads the same files: 2.9× here
 * under TCG for one that re-reads /usr/bin (docs/benchmarks.md), against ~9% less PSS.
 */
export const DEFAULT_RECLAIM_AFTER_MS = 10 * 60_000;
