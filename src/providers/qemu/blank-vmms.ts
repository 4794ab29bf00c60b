// VMMs started ahead of restores not yet asked for ("blank" VMMs): a QEMU running with a
// snapshot's RAM file mapped, its devices made, an empty overlay for its disk and no state loaded
// (`-incoming defer`). A resume of the same shape takes one instead of starting a QEMU: the
// resume of a pause's delta, whose RAM file is the one its sandbox was restored from (the base's,
// for most; a spawn from a base has the prestarted VMMs of core/pools/prestart.ts, already loaded,
// and keeps its sandbox's id as its directory's name). What a resume then pays is
// the chain of its disk put under the overlay, its stream loaded, and its guest run: no process
// started, no overlay made (about 150 ms of 330 here under TCG; under KVM QEMU's start is a
// larger share, since the guest's first instructions are not translated afresh).
//
// The disk: the overlay has no backing when QEMU opens it. The restore's chain is linked into
// the VM's directory (the only place a confined VMM sees files added after its start), added as
// read-only nodes, and set as the overlay's backing (blockdev-reopen); once the state is loaded,
// the overlay's header is made to name the chain's top by its real path, as any other VM's does.
// So a blank VMM's directory is named by its own id, not its sandbox's (VmInfo.dir says where).
import { randomBytes } from "node:crypto";
import { link, open, readFile, stat, truncate } from "node:fs/promises";
import { join } from "node:path";
import type { VmSpec } from "../provider.js";
import { BLANK_DISK_NODES } from "./args.js";
import { backingChain, isQcow2 } from "./jail.js";
import { loadRestore } from "./launch.js";
import { Qmp } from "./qmp.js";
import { streamLeavesRamOut } from "./ram-delta.js";
import { setVmmNice } from "./qemu-vm.js";
import type { QemuRuntime } from "./runtime.js";
import { BLANK_INCOMING, type BlankDisk, type BlankSource, type Vmm, type VmmProcess } from "./vmm.js";

/** A blank VMM waits at a warm pool's niceness; the restore that takes it runs at its own. */
export const BLANK_NICE = 10;
/** Shapes kept served at once (the most recently restored). */
const SHAPES = 4;
/** How long after a restore the refill starts: a burst of restores gets the CPU first. */
const REFILL_DELAY_MS = 300;
/** Starts of one shape that may fail in a row before it is served no more. */
const MAX_FAILURES = 3;

/** What a restore must match to take a blank VMM: its RAM file (by inode), size, devices and disk size. */
interface Shape extends BlankDisk {
  key: string;
  memoryMb: number;
  vcpus: number;
  nic: boolean;
}

/** A blank VMM, and the monitor connection it is fitted through (made ahead too: QEMU serves one). */
interface Blank {
  p: VmmProcess;
  qmp: Qmp;
}

interface Entry {
  shape: Shape;
  ready: Blank[];
  filling: boolean;
  failures: number;
}

/** The shape of a restore a blank VMM can serve, or null: a resume of a file-mapped snapshot with a disk, no volumes, not forkable. */
async function shapeOf(spec: VmSpec): Promise<Shape | null> {
  const r = spec.restore;
  if (!r?.sameMachine || !r.files.memory || !r.files.disk || !r.files.diskBytes || r.feed || r.adoptMemory || r.diskInUse) return null;
  if (spec.forkable || spec.memoryFile || spec.volumes?.length || spec.qemuArgs?.length) return null;
  const st = await stat(r.files.memory).catch(() => null);
  if (!st) return null;
  const nic = !!spec.nic;
  return {
    key: `${st.dev}:${st.ino}:${spec.memoryMb}:${spec.vcpus}:${nic}:${r.files.diskBytes}`,
    ramFile: r.files.memory,
    diskBytes: r.files.diskBytes,
    memoryMb: spec.memoryMb,
    vcpus: spec.vcpus,
    nic,
  };
}

export class BlankVmms implements BlankSource {
  /** By shape, most recently used last. */
  private readonly entries = new Map<string, Entry>();
  private readonly timers = new Set<NodeJS.Timeout>();
  private readonly filling = new Set<Promise<void>>();
  private closed = false;

  constructor(
    private readonly rt: QemuRuntime,
    /** Kept per shape (0: none). */
    private readonly perShape: number,
    /** Starts a blank VMM under this spec (launch.ts startProcess, with the accelerator). */
    private readonly start: (spec: VmSpec, blank: BlankDisk) => Promise<VmmProcess>,
  ) {}

  async take(spec: VmSpec): Promise<Vmm | null> {
    if (!this.perShape || this.closed) return null;
    const shape = await shapeOf(spec);
    if (!shape) return null;
    const e = this.entries.get(shape.key) ?? { shape, ready: [], filling: false, failures: 0 };
    this.entries.delete(shape.key);
    this.entries.set(shape.key, e);
    for (const [key, old] of [...this.entries].slice(0, Math.max(0, this.entries.size - SHAPES))) {
      this.entries.delete(key);
      for (const p of old.ready.splice(0)) await this.discard(p);
    }
    let b = e.ready.shift();
    while (b && (b.p.proc.exitCode !== null || b.p.proc.signalCode !== null)) {
      await this.discard(b);
      b = e.ready.shift();
    }
    this.refillSoon(shape.key);
    if (!b) return null;
    try {
      return await fit(b, spec);
    } catch {
      // The restore goes on as if there had been none ready: a VMM of its own.
      await this.discard(b);
      return null;
    } finally {
      b.qmp.close();
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const t of this.timers) clearTimeout(t);
    this.timers.clear();
    await Promise.all([...this.filling]);
    for (const e of this.entries.values()) for (const p of e.ready.splice(0)) await this.discard(p);
    this.entries.clear();
  }

  private async discard({ p, qmp }: { p: VmmProcess; qmp?: Qmp }): Promise<void> {
    qmp?.close();
    await p.cleanup();
    this.rt.launching.delete(p.proc.pid!);
  }

  private refillSoon(key: string): void {
    const t = setTimeout(() => {
      this.timers.delete(t);
      const work = this.refill(key).finally(() => this.filling.delete(work));
      this.filling.add(work);
    }, REFILL_DELAY_MS);
    this.timers.add(t);
  }

  private async refill(key: string): Promise<void> {
    const e = this.entries.get(key);
    if (!e || e.filling) return;
    e.filling = true;
    try {
      while (!this.closed && this.entries.get(key) === e && e.ready.length < this.perShape && e.failures < MAX_FAILURES) {
        const id = `blank-${randomBytes(4).toString("hex")}`;
        const { shape } = e;
        try {
          const p = await this.start({ id, memoryMb: shape.memoryMb, vcpus: shape.vcpus, nic: shape.nic, nice: BLANK_NICE }, shape);
          const qmp = await Qmp.connect(p.files.qmpSocket).catch(async (err: Error) => {
            await this.discard({ p });
            throw err;
          });
          if (this.closed || this.entries.get(key) !== e) await this.discard({ p, qmp });
          else e.ready.push({ p, qmp });
          e.failures = 0;
        } catch {
          e.failures++;
        }
      }
    } finally {
      e.filling = false;
    }
  }
}

/** Gives a blank VMM the restore's disk chain and state, at the restore's niceness; the guest does not run yet. */
async function fit({ p, qmp }: Blank, spec: VmSpec): Promise<Vmm> {
  const restore = spec.restore!;
  const disk = restore.files.disk!;
  if ((spec.nice ?? 0) !== BLANK_NICE) await setVmmNice(p.proc.pid!, spec.nice ?? 0);
  const before = restore.files.console ? await readFile(restore.files.console, "utf8").catch(() => "") : "";
  p.consoleLog.note(`${before.slice(-64 * 1024)}\n[forgevm] restored from a snapshot at ${new Date().toISOString()}\n`);
  await qmp.execute("blockdev-add", await chainNode(p.dir, disk));
  // Every option of the overlay's node is given again (those left out would take their defaults).
  await qmp.execute("blockdev-reopen", { options: [{ driver: "qcow2", "node-name": BLANK_DISK_NODES.format, file: BLANK_DISK_NODES.file, backing: "chain-0", discard: "unmap" }] });
  // Into the file QEMU holds as fd 3, at its start: the same inode, so QEMU reads what is written.
  const incoming = join(p.dir, BLANK_INCOMING);
  await copyInto(restore.files.state, incoming);
  p.files.incoming = { ignoreShared: await streamLeavesRamOut(spec.id, restore.files.state), deferred: true };
  const vmm = await loadRestore(p, spec, { deferred: true, qmp });
  await truncate(incoming, 0);
  // The images are active once the state is loaded: the overlay's header can be written now.
  await qmp.execute("change-backing-file", { device: "root", "image-node-name": BLANK_DISK_NODES.format, "backing-file": disk });
  return vmm;
}

/**
 * The restore's disk chain as nested read-only nodes, each file linked into the VM's directory
 * first (a confined VMM sees nothing else), top named chain-0; the bottom is the image (raw), or a
 * qcow2 layer without backing.
 */
async function chainNode(dir: string, disk: string): Promise<Record<string, unknown>> {
  const chain = await backingChain(disk);
  let node: Record<string, unknown> | null = null;
  for (let i = chain.length - 1; i >= 0; i--) {
    const file = join(dir, `chain-${i}`);
    await link(chain[i], file);
    const qcow2 = await isQcow2(file);
    node = {
      driver: qcow2 ? "qcow2" : "raw",
      "node-name": `chain-${i}`,
      "read-only": true,
      file: { driver: "file", filename: file },
      ...(qcow2 ? { backing: node } : {}),
    };
  }
  return node!;
}

/** Copies `from` into the existing file `to` (its inode kept: QEMU has it open). */
async function copyInto(from: string, to: string): Promise<void> {
  const src = await open(from, "r");
  const dst = await open(to, "r+");
  try {
    const buf = Buffer.allocUnsafe(1 << 20);
    for (let pos = 0; ; ) {
      const { bytesRead } = await src.read(buf, 0, buf.length, pos);
      if (!bytesRead) break;
      await dst.write(buf, 0, bytesRead, pos);
      pos += bytesRead;
    }
  } finally {
    await src.close();
    await dst.close();
  }
}
