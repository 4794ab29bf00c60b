// Warm pools: VMs restored ahead of demand, so that a spawn only has to claim one. Each pool
// belongs to one base snapshot key (image or template, and size); pooled VMs have no sandbox
// row and are invisible until claimed; a claimed VM is never given back, so nothing one user
// did can reach the next. Refills run one VM at a time at low CPU priority, within a memory budget.
import type { Vm } from "../../providers/provider.js";
import type { Emit } from "../events.js";
import { ignore } from "../../util/ignore.js";

export interface PoolTarget {
  /** Base snapshot key the pool's VMs are restored from. */
  key: string;
  /** What users see: the image or template name. */
  label: string;
  size: number;
  memoryMb: number;
  /** Restores one VM for the pool; resolves with it and the snapshot it came from. */
  make: () => Promise<{ vm: Vm; snapshotId: string }>;
}

interface Pool {
  target: PoolTarget;
  ready: { vm: Vm; snapshotId: string }[];
  filling: number;
  failures: number;
}

/** How long after the last claim a pool starts refilling. */
export const REFILL_DELAY_MS = 300;

/** Niceness of VMs waiting in a pool: they never compete with sandboxes in use. */
export const POOL_NICE = 10;

export class WarmPools {
  private readonly pools = new Map<string, Pool>();
  private closed = false;
  private refilling: Promise<void> | null = null;
  private refillTimer: NodeJS.Timeout | null = null;

  constructor(
    private readonly budgetMb: number,
    private readonly emit: Emit,
  ) {}

  /** Sets the pools wanted; pools no longer wanted (or resized down) release their VMs. */
  async configure(targets: PoolTarget[]): Promise<void> {
    const wanted = new Map(targets.filter((t) => t.size > 0).map((t) => [t.key, t]));
    const drop: Vm[] = [];
    for (const [key, pool] of this.pools) {
      const t = wanted.get(key);
      if (!t) {
        this.pools.delete(key);
        drop.push(...pool.ready.splice(0).map((r) => r.vm));
      } else {
        pool.target = t;
        pool.failures = 0;
        drop.push(...pool.ready.splice(t.size).map((r) => r.vm));
      }
    }
    for (const [key, t] of wanted) if (!this.pools.has(key)) this.pools.set(key, { target: t, ready: [], filling: 0, failures: 0 });
    await Promise.all(drop.map((vm) => vm.destroy()));
    this.refill();
  }

  /** Takes a ready VM of this key, or null; the pool refills in the background. */
  claim(key: string): { vm: Vm; snapshotId: string } | null {
    const pool = this.pools.get(key);
    if (pool) this.refillSoon();
    // A pooled VM whose QEMU died meanwhile is dropped, not handed out.
    while (pool?.ready.length) {
      const got = pool.ready.shift()!;
      if (got.vm.guest.isOpen) {
        this.emit("pool.claimed", got.vm.info.id, { pool: pool.target.label, left: pool.ready.length });
        return got;
      }
      void got.vm.destroy();
    }
    return null;
  }

  // Refilling restores VMs, which takes CPU the claimed sandboxes want for their first commands:
  // wait until a burst of claims is over.
  private refillSoon(): void {
    if (this.refillTimer) clearTimeout(this.refillTimer);
    this.refillTimer = setTimeout(() => {
      this.refillTimer = null;
      void this.refill();
    }, REFILL_DELAY_MS);
    this.refillTimer.unref();
  }

  /** Whether any pool is configured (spawns skip the claim attempt otherwise). */
  get empty(): boolean {
    return this.pools.size === 0;
  }

  /** Snapshots that pooled VMs are restored from. */
  snapshotIds(): Set<string> {
    return new Set([...this.pools.values()].flatMap((p) => p.ready.map((r) => r.snapshotId)));
  }

  /** The pools as the API and the metrics show them: which image or template each is for, how many VMs it keeps and has ready. */
  shown(): { pool: string; size: number; ready: number; memory_mb: number }[] {
    return this.status().map(({ label, size, ready, memory_mb }) => ({ pool: label, size, ready, memory_mb }));
  }

  status(): { key: string; label: string; size: number; ready: number; memory_mb: number }[] {
    return [...this.pools.values()].map((p) => ({ key: p.target.key, label: p.target.label, size: p.target.size, ready: p.ready.length, memory_mb: p.target.memoryMb }));
  }

  /** Memory that pooled VMs (ready or being made) hold, in MiB. */
  private usedMb(): number {
    let mb = 0;
    for (const p of this.pools.values()) mb += (p.ready.length + p.filling) * p.target.memoryMb;
    return mb;
  }

  /** Starts refilling unless a refill is already running; resolves when pools are full (or cannot grow). */
  refill(): Promise<void> {
    if (this.closed) return Promise.resolve();
    this.refilling ??= this.refillLoop().finally(() => (this.refilling = null));
    return this.refilling;
  }

  private async refillLoop(): Promise<void> {
    for (;;) {
      if (this.closed) return;
      const pool = [...this.pools.values()]
        .filter((p) => p.ready.length + p.filling < p.target.size && p.failures < 3)
        .sort((a, b) => a.ready.length / a.target.size - b.ready.length / b.target.size)[0];
      if (!pool || this.usedMb() + pool.target.memoryMb > this.budgetMb) return;
      pool.filling++;
      try {
        const got = await pool.target.make();
        // Reconfigured or closed while it was being made: it is not wanted.
        if (this.closed || this.pools.get(pool.target.key) !== pool || pool.ready.length >= pool.target.size) await got.vm.destroy();
        else {
          pool.ready.push(got);
          pool.failures = 0;
          this.emit("pool.filled", null, { pool: pool.target.label, ready: pool.ready.length, size: pool.target.size });
        }
      } catch (e) {
        pool.failures++;
        this.emit("pool.error", null, { pool: pool.target.label, error: (e as Error).message.split("\n")[0] });
      } finally {
        pool.filling--;
      }
    }
  }

  /** Destroys every pooled VM; no refill starts afterwards. */
  async close(): Promise<void> {
    this.closed = true;
    if (this.refillTimer) clearTimeout(this.refillTimer);
    await this.refilling?.catch(ignore("a failed refill is logged where it fails"));
    const vms = [...this.pools.values()].flatMap((p) => p.ready.splice(0).map((r) => r.vm));
    this.pools.clear();
    await Promise.all(vms.map((vm) => vm.destroy()));
  }
}
