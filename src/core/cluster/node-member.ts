// A node's part in a cluster: it heartbeats into the catalogue (where fronts reach it, its
// capacity and what it has ready), records where each of its sandboxes lives as they come and go,
// whatever interface made them, and at start tells the catalogue which of its sandboxes survived.
// It ships its events to the catalogue (fronts serve them as one stream) and mirrors the
// cluster's templates into its own store.
import { availableParallelism, totalmem } from "node:os";
import type { Catalogue } from "../../store/catalogue.js";
import type { EventRow } from "../../store/events.js";
import type { SandboxRow, SandboxState } from "../../store/sandboxes.js";
import type { TemplateBody } from "../../store/templates.js";
import type { TemplateInput } from "../sandboxes/template-ops.js";
import { templateBody } from "../sandboxes/template-ops.js";
import { ignore } from "../../util/ignore.js";

/** How long a node waits to ship an event, gathering those that follow it. */
const SHIP_DELAY_MS = 50;

export interface NodeMemberOptions {
  id: string;
  /** Where fronts reach this node. */
  url: string;
  heartbeatMs: number;
  version: string;
}

/** What a member needs of its node's facades (which have these, and more). */
export interface MemberForge {
  events: { lastSeq(): number; subscribe(fn: (e: EventRow) => void): () => void; replay(afterSeq: number, limit?: number): EventRow[] };
  templates: { remove(name: string): Promise<boolean>; apply(templates: TemplateBody[]): Promise<string[]> };
  sandboxes: { list(ownerId?: string, states?: SandboxState[]): SandboxRow[] };
  images: { list(): Promise<{ name: string }[]> };
  pools: { warm(): { pool: string; ready: number }[] };
}

export class NodeMember {
  private timer: NodeJS.Timeout | null = null;
  private off: (() => void) | null = null;
  private readonly started = new Date();
  /** Placement writes that failed (the database was away): retried at the next heartbeat. */
  private readonly unsynced = new Map<string, "place" | "unplace">();
  /** The newest of this node's events the catalogue has. */
  private shipped = 0;
  private shipping: Promise<void> | null = null;
  private shipTimer: NodeJS.Timeout | null = null;
  /** The newest template change mirrored, and the mirror running now. */
  private templatesAt: Date | null = null;
  private mirroring: Promise<void> | null = null;

  /** This node's id in the catalogue. */
  get id(): string {
    return this.o.id;
  }

  constructor(
    private readonly forge: MemberForge,
    private readonly catalogue: Catalogue,
    private readonly o: NodeMemberOptions,
  ) {}

  /** Registers, reconciles the catalogue with this node's sandboxes, and keeps heart-beating. */
  async start(): Promise<void> {
    await this.report();
    await this.catalogue.reconcile(this.o.id, this.running());
    for (const id of this.running()) await this.catalogue.place(id, this.o.id);
    const local = this.forge.events.lastSeq();
    this.shipped = await this.catalogue.lastNodeEvent(this.o.id);
    if (local < this.shipped) {
      // A new data directory numbers its events from 1 again: the catalogue's later ones were another log's.
      await this.catalogue.forgetNodeEventsAfter(this.o.id, local);
      this.shipped = local;
    }
    await this.shipEvents();
    await this.mirrorTemplates();
    this.off = this.forge.events.subscribe((e) => {
      this.shipSoon();
      if (!e.sandbox_id) return;
      if (e.type === "sandbox.created") this.sync(e.sandbox_id, "place");
      else if (e.type === "sandbox.destroyed") this.sync(e.sandbox_id, "unplace");
    });
    this.timer = setInterval(() => void this.beat().catch(ignore("a missed heartbeat is retried at the next tick")), this.o.heartbeatMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    if (this.shipTimer) clearTimeout(this.shipTimer);
    this.off?.();
  }

  /** Ships shortly: a burst of events (an exec makes two) goes in one insert. */
  private shipSoon(): void {
    if (this.shipTimer) return;
    this.shipTimer = setTimeout(() => {
      this.shipTimer = null;
      // After a sending under way, which may have read the log before these events.
      void (this.shipping ?? Promise.resolve()).then(() => this.shipEvents());
    }, SHIP_DELAY_MS);
    this.shipTimer.unref();
  }

  /** Sends the events the catalogue does not have yet; one sending at a time. */
  shipEvents(): Promise<void> {
    // (`finally` runs after the assignment even when nothing waits inside.)
    this.shipping ??= this.shipAll().finally(() => {
      this.shipping = null;
    });
    return this.shipping;
  }

  private async shipAll(): Promise<void> {
    try {
      for (let batch = this.forge.events.replay(this.shipped, 500); batch.length; batch = this.forge.events.replay(this.shipped, 500)) {
        await this.catalogue.appendEvents(this.o.id, batch);
        this.shipped = batch[batch.length - 1].seq;
      }
    } catch {
      // the database is away: the next heartbeat sends them
    }
  }

  /** Applies the cluster's template changes since the last mirror to this node's store. */
  mirrorTemplates(): Promise<void> {
    this.mirroring ??= this.mirrorAll().finally(() => {
      this.mirroring = null;
    });
    return this.mirroring;
  }

  private async mirrorAll(): Promise<void> {
    for (const t of await this.catalogue.templatesSince(this.templatesAt)) {
      try {
        if (t.deleted || !t.body) await this.forge.templates.remove(t.name);
        // (The node that took the write has it already: an unchanged template is left alone.)
        else await this.forge.templates.apply([templateBody({ ...(t.body as unknown as TemplateInput), name: t.name })]);
      } catch {
        // one this node cannot take (its image cannot be pulled here) stays as it was; spawns of it fail here with that error
      }
      this.templatesAt = t.updated_at;
    }
  }

  private running(): string[] {
    return this.forge.sandboxes.list(undefined, ["creating", "running", "paused", "stopped"]).map((r) => r.id);
  }

  private sync(id: string, what: "place" | "unplace"): void {
    const write = what === "place" ? this.catalogue.place(id, this.o.id) : this.catalogue.unplace(id);
    write.then(
      () => this.unsynced.delete(id),
      () => this.unsynced.set(id, what),
    );
  }

  private async beat(): Promise<void> {
    await this.report();
    for (const [id, what] of [...this.unsynced]) this.sync(id, what);
    await this.shipEvents();
    await this.mirrorTemplates();
  }

  /** The heartbeat itself: this node's capacity and load. */
  private async report(): Promise<void> {
    const active = this.forge.sandboxes.list(undefined, ["creating", "running"]);
    const totalMb = Math.floor(totalmem() / 1048576);
    const images = (await this.forge.images.list()).map((i) => i.name);
    await this.catalogue.heartbeat(
      {
        id: this.o.id,
        url: this.o.url,
        memory_mb: totalMb,
        vcpus: availableParallelism(),
        free_memory_mb: Math.max(0, totalMb - active.reduce((n, r) => n + r.memory_mb, 0)),
        running: active.length,
        used_vcpus: active.reduce((n, r) => n + r.vcpus, 0),
        images,
        warm: this.forge.pools
          .warm()
          .filter((p) => p.ready > 0)
          .map((p) => p.pool),
        version: this.o.version,
      },
      this.started,
    );
  }
}
