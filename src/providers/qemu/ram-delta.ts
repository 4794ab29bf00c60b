// A pause that stores only what changed. A VM restored from a snapshot maps that snapshot's RAM
// file privately (copy-on-write), so whatever the guest has not written since is still the
// file's. QEMU's migration stream carries every page; this filter passes the stream through and
// leaves out each guest-RAM page that equals the file's page at the same offset (a zero page
// where the file is zero too). Restoring maps the same file privately and loads the stream over
// it: the pages left out are already there. An idle sandbox restored from a base pauses to its
// devices and the few pages it touched instead of all its memory. Under KVM the guest's RAM is
// the same private mapping of QEMU's, so the scheme is the same.
import { closeSync, fstatSync, openSync, readSync } from "node:fs";
import { BootError } from "../provider.js";
import { PAGE_BYTES, StreamFilter, leavesSharedRamOut } from "./ram-stream.js";

const ZERO_PAGE = Buffer.alloc(PAGE_BYTES);
const WINDOW_BYTES = 2 * 1024 * 1024;
const ZERO_WINDOW = Buffer.alloc(WINDOW_BYTES);
const UNKNOWN = 0;
const ALL_ZERO = 1;
const DATA = 2;

/**
 * Which windows of each RAM file are all zeros, by file (device, inode, size): snapshot RAM
 * files never change once sealed, and most of one is a hole, so later pauses skip reading those
 * windows. A few hundred bytes per file; the oldest go past a bound.
 */
const zeroWindows = new Map<string, Uint8Array>();
const ZERO_MAPS_KEPT = 64;

/**
 * A RAM file read in windows as the stream's offsets advance (QEMU sends a block's pages in
 * order), with one buffer reused, so comparing costs no allocation per page.
 */
export class RamFile {
  private readonly fd: number;
  private readonly size: number;
  private readonly windows: Uint8Array;
  private readonly window = Buffer.allocUnsafe(WINDOW_BYTES);
  private start = -1;
  private closed = false;

  constructor(file: string) {
    this.fd = openSync(file, "r");
    const st = fstatSync(this.fd);
    this.size = st.size;
    const key = `${st.dev}:${st.ino}:${st.size}`;
    let w = zeroWindows.get(key);
    if (!w) {
      w = new Uint8Array(Math.ceil(st.size / WINDOW_BYTES));
      zeroWindows.set(key, w);
      if (zeroWindows.size > ZERO_MAPS_KEPT) zeroWindows.delete(zeroWindows.keys().next().value!);
    }
    this.windows = w;
  }

  /** Whether the file's page at `offset` (zeros past its end) is `data[at, at + PAGE_BYTES)`, or zeros when `at` is -1. */
  matches(offset: number, data: Buffer, at: number): boolean {
    const index = Math.floor(offset / WINDOW_BYTES);
    if (offset >= this.size || this.windows[index] === ALL_ZERO) return at < 0 || data.compare(ZERO_PAGE, 0, PAGE_BYTES, at, at + PAGE_BYTES) === 0;
    const start = index * WINDOW_BYTES;
    if (start !== this.start) {
      const n = readSync(this.fd, this.window, 0, WINDOW_BYTES, start);
      if (n < WINDOW_BYTES) this.window.fill(0, n);
      this.start = start;
      if (this.windows[index] === UNKNOWN) {
        this.windows[index] = this.window.equals(ZERO_WINDOW) ? ALL_ZERO : DATA;
        if (this.windows[index] === ALL_ZERO) return this.matches(offset, data, at);
      }
    }
    const o = offset - start;
    const held = at < 0 ? ZERO_PAGE : data;
    const from = Math.max(at, 0);
    return held.compare(this.window, o, o + PAGE_BYTES, from, from + PAGE_BYTES) === 0;
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    closeSync(this.fd);
  }
}

export interface DeltaCounts {
  kept: number;
  left: number;
}

/**
 * A filter that writes to `out` the stream less the pages of guest RAM (`block`) that equal
 * `base`'s. `counts` says how many pages of the block it kept and left out.
 */
export function deltaFilter(base: RamFile, block: string, out: (b: Buffer) => void): { filter: StreamFilter; counts: DeltaCounts } {
  const counts: DeltaCounts = { kept: 0, left: 0 };
  const filter = new StreamFilter({
    out,
    keep(name, offset, data, at) {
      if (name !== block) return true;
      const same = base.matches(offset, data, at);
      if (same) counts.left++;
      else counts.kept++;
      return !same;
    },
  });
  return { filter, counts };
}

/** Whether a restore's stream leaves its RAM file out (see leavesSharedRamOut); one that cannot be read is a restore that fails, as QEMU's own refusal would be. */
export async function streamLeavesRamOut(id: string, state: string): Promise<boolean> {
  try {
    return await leavesSharedRamOut(state);
  } catch (e) {
    throw new BootError(`VM ${id} could not be restored: ${(e as Error).message}`, "");
  }
}
