// The cluster's events as one live feed for a front: every node ships its events to the catalogue,
// and one poll per front (while anyone listens) hands the new ones to each listener in order.
import type { Catalogue, ClusterEvent } from "../../store/catalogue.js";

const POLL_MS = 250;
/** How far back (in event numbers) a poll looks for events that committed after later ones. */
const LATE_WINDOW = 200;

export class ClusterEventFeed {
  private readonly listeners = new Set<(e: ClusterEvent) => void>();
  private timer: NodeJS.Timeout | null = null;
  private last = 0;
  /** The numbers within the window already handed on. */
  private readonly seen = new Set<number>();
  private polling = false;

  constructor(private readonly catalogue: Catalogue) {}

  /** Events after `seq`, oldest first (a replay, in batches). */
  after(seq: number, limit = 1000): Promise<ClusterEvent[]> {
    return this.catalogue.eventsAfter(seq, limit);
  }

  /** The cluster's newest event number. */
  lastSeq(): Promise<number> {
    return this.catalogue.lastEventSeq();
  }

  /** Calls `fn` with each event that arrives from now on; returns the unsubscribe function. */
  async subscribe(fn: (e: ClusterEvent) => void): Promise<() => void> {
    if (!this.timer) {
      this.last = await this.catalogue.lastEventSeq();
      this.seen.clear();
      for (const e of await this.catalogue.eventsAfter(Math.max(0, this.last - LATE_WINDOW), LATE_WINDOW)) this.seen.add(e.seq);
      this.timer = setInterval(() => void this.poll(), POLL_MS);
    }
    this.listeners.add(fn);
    return () => {
      this.listeners.delete(fn);
      if (!this.listeners.size && this.timer) {
        clearInterval(this.timer);
        this.timer = null;
      }
    };
  }

  private async poll(): Promise<void> {
    if (this.polling) return;
    this.polling = true;
    try {
      // Two nodes' inserts may commit out of their numbers' order: the window reads back over the
      // last numbers so that one committed late is still handed on (once).
      for (;;) {
        const batch = (await this.catalogue.eventsAfter(Math.max(0, this.last - LATE_WINDOW), 1000)).filter((e) => !this.seen.has(e.seq));
        if (!batch.length) break;
        for (const e of batch) {
          this.seen.add(e.seq);
          this.last = Math.max(this.last, e.seq);
          for (const l of this.listeners) l(e);
        }
      }
      for (const seq of this.seen) if (seq <= this.last - LATE_WINDOW) this.seen.delete(seq);
    } catch {
      // the database is away: the next poll catches up
    } finally {
      this.polling = false;
    }
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    this.listeners.clear();
  }
}
