// The data directory's disk, watched. When it fills (sandboxes writing their disks, snapshots,
// imports), QEMU pauses each guest whose write found no room (werror=enospc: the write waits and
// is retried, so nothing a guest wrote is lost), SQLite refuses writes (SQLITE_FULL), and every
// file write fails with ENOSPC. Here that becomes a state with an owner: work that would write to
// the disk is refused with a clear 507, sandboxes whose guest waits answer 507 instead of hanging
// (file operations already in flight to it too: an exec in flight waits with its process),
// store writes that must not be lost (a sandbox's end) wait in order, and when there is room
// again the waiting guests go on, the waiting writes are made, and sandboxes whose VM went away
// meanwhile are marked `error`. Under KVM the guest pauses the same way (the block layer's
// werror policy does not depend on the accelerator). A data directory on a tmpfs is the one
// place this does not hold: there a guest reading a page of its sparse RAM file needs room too,
// and a full tmpfs kills its VMM (SIGBUS) instead of pausing it. A forkable sandbox is the other:
// its RAM is a shared file on the data disk, and its guest's first write to a page it never
// touched needs a block, so a full disk kills that VMM too (docs/architecture.md says why it is opt-in).
import { statfs } from "node:fs/promises";
import { hostDiskFull, isHostDiskFull } from "../error-map.js";
import type { ForgevmError } from "../../http/errors.js";

/** Below this much free space the disk counts as full. */
export const LOW_FREE_BYTES = 32 * 1048576;
/** Above this much it has room again (the gap keeps it from flapping). */
export const ROOM_FREE_BYTES = 96 * 1048576;

/** What the watch acts on: the guests that may wait, and what to do once there is room. */
export interface DiskSpaceHooks {
  /** Live sandboxes with their VMs. */
  vms(): Iterable<{ id: string; vm: { waitingForDisk(): Promise<boolean>; continueAfterDisk(): Promise<void> } }>;
  /** A sandbox's guest was found waiting: its file operations in flight are answered with `err` now. */
  failFileOps(id: string, err: ForgevmError): void;
  /** Called once there is room again, after the waiting writes are made (reconciling the store). */
  onRoom(): Promise<void>;
  log(line: string): void;
}

export class DiskSpace {
  /** Whether the data directory's disk is full now. */
  full = false;
  /** Sandboxes whose guest QEMU holds paused on a write that found no room. */
  readonly waiting = new Set<string>();
  private readonly deferred: { id: string; what: string; write: () => void }[] = [];
  private timer: NodeJS.Timeout | null = null;
  private checking: Promise<void> | null = null;

  constructor(
    private readonly dir: string,
    private readonly hooks: DiskSpaceHooks,
    private readonly intervalMs = 2000,
  ) {}

  start(): void {
    this.timer ??= setInterval(() => void this.check(), this.intervalMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    await this.checking;
  }

  /** Refuses `what` (work that writes to the data directory) while the disk is full. */
  require(what: string): void {
    if (this.full) throw hostDiskFull(`${what} needs room in the data directory`);
  }

  /** Refuses a call to a sandbox whose guest waits for room, at once rather than after a hang. */
  requireAnswering(id: string): void {
    if (this.waiting.has(id)) throw sandboxWaits(id);
  }

  /** Whether a write that waits for room names this sandbox (its end is known, not yet stored). */
  waitsFor(id: string): boolean {
    return this.deferred.some((d) => d.id === id);
  }

  /**
   * Makes a store write about sandbox `id` now or, when the disk is full, once there is room
   * again (in the order they came): for writes a caller was already told of, such as its end.
   */
  write(id: string, what: string, write: () => void): void {
    if (!this.deferred.length) {
      try {
        write();
        return;
      } catch (e) {
        if (!isHostDiskFull(e)) throw e;
        this.noteFull();
      }
    }
    this.deferred.push({ id, what, write });
  }

  /** Marks the disk full at once (a write just failed for want of room); the watch confirms it. */
  noteFull(): void {
    this.markFull("a write found no room");
    void this.check();
  }

  private markFull(why: string): void {
    if (this.full) return;
    this.full = true;
    this.hooks.log(`the data directory's disk is full (${why}): work that writes to it is refused (507) until there is room again`);
  }

  /** Looks at the free space and the guests now (the timer does this every interval). */
  check(): Promise<void> {
    this.checking ??= this.look().finally(() => (this.checking = null));
    return this.checking;
  }

  private async look(): Promise<void> {
    const st = await statfs(this.dir).catch(() => null);
    if (!st) return;
    const free = st.bavail * st.bsize;
    if (free < LOW_FREE_BYTES) this.markFull(`${Math.round(free / 1048576)} MiB free`);
    if (!this.full) return;
    if (free < ROOM_FREE_BYTES) {
      for (const { id, vm } of this.hooks.vms()) {
        if (this.waiting.has(id) || !(await vm.waitingForDisk().catch(() => false))) continue;
        this.waiting.add(id);
        this.hooks.failFileOps(id, sandboxWaits(id));
      }
      return;
    }
    // Room again: the guests go on (each retries its write), then what waited is written.
    for (const { id, vm } of this.hooks.vms()) {
      if (!this.waiting.has(id) && !(await vm.waitingForDisk().catch(() => false))) continue;
      await vm.continueAfterDisk().catch((e) => this.hooks.log(`sandbox ${id} could not go on after the disk had room again: ${(e as Error).message}`));
      this.waiting.delete(id);
    }
    this.waiting.clear();
    while (this.deferred.length) {
      const next = this.deferred[0];
      try {
        next.write();
      } catch (e) {
        if (isHostDiskFull(e)) return; // full again: the rest waits for the next look
        this.hooks.log(`a write that waited for room failed (${next.what}): ${(e as Error).message}`);
      }
      this.deferred.shift();
    }
    this.full = false;
    this.hooks.log(`the data directory's disk has room again (${Math.round(free / 1048576)} MiB free): waiting sandboxes go on`);
    await this.hooks.onRoom().catch((e) => this.hooks.log(`after the disk had room again: ${(e as Error).message}`));
  }
}

/** The error a call to a sandbox whose guest waits for room gets. */
const sandboxWaits = (id: string): ForgevmError => hostDiskFull(`sandbox ${id} is paused until there is room: a write to its disk found none`);
