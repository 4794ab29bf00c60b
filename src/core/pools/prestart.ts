// Prestarted VMMs: for the base snapshots that spawns restored last, a few QEMU processes started
// ahead, each with its disk overlay made, the snapshot's device state loaded and the guest held
// before its first instruction. A spawn that takes one pays only for letting it run (no process
// start, no overlay, no load). Unlike a warm-pool VM, a held guest has touched none of its RAM
// (the snapshot's is mapped copy-on-write), so one costs only the VMM's own memory. Each has
// the sandbox id it will have (its directory's name), so it is taken before the row is made.
import type { PrestartedVm } from "../../providers/provider.js";
import type { Emit } from "../events.js";
import { ignore } from "../../util/ignore.js";

export interface PrestartTarget {
  /** The base snapshot key spawns of this shape restore (as the warm pool's). */
  key: string;
  /** The base snapshot the VMMs load; a newer base makes them stale. */
  snapshotId: string;
  /** Starts one, under a fresh sandbox id. */
  make: () => Promise<PrestartedVm>;
}

interface Entry {
  target: PrestartTarget;
  ready: PrestartedVm[];
  filling: boolean;
  failures: number;
}

/** How many base snapshots are kept served at once (the most recently restored). */
export const PRESTART_BASES = 4;

/** How long after a spawn the refill starts: a burst of spawns gets the CPU first. */
const REFILL_DELAY_MS = 300;

/** doctor's line on prestarted VMMs. */
export function prestartState(s: { per_base: number; bases: number; ready: number }): string {
  if (!s.per_base) return "off (snapshots.prestart: 0)";
  return `${s.per_base} per base snapshot spawns restored lately (snapshots.prestart): ${s.ready} ready for ${s.bases} base${s.bases === 1 ? "" : "s"}`;
}

export class Prestarts {
  /** By key, most recently used last. */
  private readonly entries = new Map<string, Entry>();
  private timer: NodeJS.Timeout | null = null;
  private refilling: Promise<void> | null = null;
  private closed = false;

  constructor(
    /** VMMs kept per base (0: none). */
    private readonly perBase: number,
    /** Bases kept served; the least recently used beyond these loses its VMMs. */
    private readonly maxBases: number,
    private readonly emit: Emit,
  ) {}

  get enabled(): boolean {
    return this.perBase > 0 && !this.closed;
  }

  /** A prestarted VMM for this key and base, or null; a stale or dead one is discarded on the way. */
  take(key: string, snapshotId: string): PrestartedVm | null {
    const e = this.entries.get(key);
    if (!e) return null;
    if (e.target.snapshotId !== snapshotId) {
      this.drop(key);
      return null;
    }
    while (e.ready.length) {
      const vm = e.ready.shift()!;
      if (vm.alive) return vm;
      void vm.discard();
    }
    return null;
  }

  /** Whether any VMM is held (a dead one too: `take` discards it). */
  holds(): boolean {
    for (const e of this.entries.values()) if (e.ready.length) return true;
    return false;
  }

  /** Notes that a spawn restored this base: its VMMs are (re)made soon after. */
  want(target: PrestartTarget): void {
    if (!this.enabled) return;
    const old = this.entries.get(target.key);
    if (old && old.target.snapshotId !== target.snapshotId) this.drop(target.key);
    const e = this.entries.get(target.key) ?? { target, ready: [], filling: false, failures: 0 };
    this.entries.delete(target.key);
    this.entries.set(target.key, e); // most recent last
    while (this.entries.size > this.maxBases) this.drop(this.entries.keys().next().value!);
    if (this.timer) clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.timer = null;
      this.refilling ??= this.refill().finally(() => (this.refilling = null));
    }, REFILL_DELAY_MS);
    this.timer.unref();
  }

  /** Base snapshots that prestarted VMMs have loaded (their files must stay). */
  snapshotIds(): Set<string> {
    return new Set([...this.entries.values()].map((e) => e.target.snapshotId));
  }

  /** How many are kept per base and how many are ready now. */
  status(): { per_base: number; bases: number; ready: number } {
    let ready = 0;
    for (const e of this.entries.values()) ready += e.ready.filter((v) => v.alive).length;
    return { per_base: this.perBase, bases: this.entries.size, ready };
  }

  private drop(key: string): void {
    const e = this.entries.get(key);
    this.entries.delete(key);
    for (const vm of e?.ready.splice(0) ?? []) void vm.discard();
  }

  // One at a time, most recently used base first.
  private async refill(): Promise<void> {
    for (;;) {
      const e = [...this.entries.values()].reverse().find((x) => !x.filling && x.failures < 3 && x.ready.filter((v) => v.alive).length < this.perBase);
      if (!e || this.closed) return;
      e.filling = true;
      try {
        const vm = await e.target.make();
        if (this.closed || this.entries.get(e.target.key) !== e) await vm.discard();
        else {
          e.ready.push(vm);
          e.failures = 0;
        }
      } catch (err) {
        e.failures++;
        this.emit("pool.error", null, { pool: `prestart:${e.target.key}`, error: (err as Error).message.split("\n")[0] });
      } finally {
        e.filling = false;
      }
    }
  }

  /** Stops every prestarted VMM; none is made afterwards. */
  async close(): Promise<void> {
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    await this.refilling?.catch(ignore("a failed refill is logged where it fails"));
    const all = [...this.entries.values()].flatMap((e) => e.ready.splice(0));
    this.entries.clear();
    await Promise.all(all.map((vm) => vm.discard()));
  }
}
