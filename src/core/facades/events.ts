// The event feed (every sandbox, snapshot and image change, stored and numbered) and the audit
// log of calls made through the agent interfaces.
import type { AuditEntry, AuditQuery } from "../../store/audit.js";
import type { EventRange, EventRow } from "../../store/events.js";
import type { AuditStore } from "../../store/audit.js";
import type { SandboxStore } from "../../store/sandboxes.js";
import type { EventBus } from "../events.js";

/** What the event and audit operations read: the event bus, the audit log, the sandbox rows. */
export interface EventsDeps {
  readonly events: EventBus;
  readonly audit: AuditStore;
  readonly sandboxes: SandboxStore;
}

export class EventsFacade {
  constructor(private readonly core: EventsDeps) {}

  /** Calls `fn` for every event from now on; returns the unsubscribe function. */
  subscribe(fn: (e: EventRow) => void): () => void {
    return this.core.events.subscribe(fn);
  }

  /** The newest stored event's number (0 when there is none). */
  lastSeq(): number {
    return this.core.events.lastSeq();
  }

  /** A sandbox's stored events from `sinceIso` on, oldest first (or newest first), at most `limit`: what happened to it and in it. */
  ofSandbox(idOrName: string, o: EventRange): EventRow[] {
    return this.core.events.ofSandbox(this.core.sandboxes.get(idOrName)?.id ?? idOrName, o);
  }

  /** Stored events after `seq`, oldest first. */
  replay(afterSeq: number, limit?: number): EventRow[] {
    return this.core.events.replay(afterSeq, limit);
  }
}

export class AuditFacade {
  constructor(private readonly core: EventsDeps) {}

  /** Records one call an agent made through an agent interface (arguments already redacted). */
  record(e: Omit<AuditEntry, "seq" | "time">): AuditEntry {
    return this.core.audit.append(e);
  }

  /** Audit entries, oldest first: the newest `limit` matching the query. */
  list(q: AuditQuery = {}): AuditEntry[] {
    return this.core.audit.list(q);
  }
}
