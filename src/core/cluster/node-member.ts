// A node's part in a cluster: it heartbeats into the catalogue (where fronts reach it, its
// capacity and what it has ready), records where each of its sandboxes lives as they come and go,
// whatever interface made them, and at start tells the catalogue which of its sandboxes survived.
import { availableParallelism, totalmem } from "node:os";
import type { Catalogue } from "../../store/catalogue.js";
import type { Forge } from "../forge.js";

export interface NodeMemberOptions {
  id: string;
  /** Where fronts reach this node. */
  url: string;
  heartbeatMs: number;
  version: string;
}

export class NodeMember {
  private timer: NodeJS.Timeout | null = null;
  private off: (() => void) | null = null;
  private readonly started = new Date();
  /** Placement writes that failed (the database was away): retried at the next heartbeat. */
  private readonly unsynced = new Map<string, "place" | "unplace">();

  /** This node's id in the catalogue. */
  get id(): string {
    return this.o.id;
  }

  constructor(
    private readonly forge: Forge,
    private readonly catalogue: Catalogue,
    private readonly o: NodeMemberOptions,
  ) {}

  /** Registers, reconciles the catalogue with this node's sandboxes, and keeps heart-beating. */
  async start(): Promise<void> {
    await this.beat();
    await this.catalogue.reconcile(this.o.id, this.running());
    for (const id of this.running()) await this.catalogue.place(id, this.o.id);
    this.off = this.forge.subscribe((e) => {
      if (!e.sandbox_id) return;
      if (e.type === "sandbox.created") this.sync(e.sandbox_id, "place");
      else if (e.type === "sandbox.destroyed") this.sync(e.sandbox_id, "unplace");
    });
    this.timer = setInterval(() => void this.beat().catch(() => {}), this.o.heartbeatMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.off?.();
  }

  private running(): string[] {
    return this.forge.list(undefined, ["creating", "running", "paused", "stopped"]).map((r) => r.id);
  }

  private sync(id: string, what: "place" | "unplace"): void {
    const write = what === "place" ? this.catalogue.place(id, this.o.id) : this.catalogue.unplace(id);
    write.then(
      () => this.unsynced.delete(id),
      () => this.unsynced.set(id, what),
    );
  }

  private async beat(): Promise<void> {
    const active = this.forge.list(undefined, ["creating", "running"]);
    const totalMb = Math.floor(totalmem() / 1048576);
    const images = (await this.forge.listImages()).map((i) => i.name);
    await this.catalogue.heartbeat(
      {
        id: this.o.id,
        url: this.o.url,
        memory_mb: totalMb,
        vcpus: availableParallelism(),
        free_memory_mb: Math.max(0, totalMb - active.reduce((n, r) => n + r.memory_mb, 0)),
        running: active.length,
        images,
        warm: this.forge
          .warmPools()
          .filter((p) => p.ready > 0)
          .map((p) => p.pool),
        version: this.o.version,
      },
      this.started,
    );
    for (const [id, what] of [...this.unsynced]) this.sync(id, what);
  }
}
