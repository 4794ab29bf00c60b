// One running QEMU VM: its agent channel and console, and what can be done to it from the
// host: snapshots (a copy while it runs on), freezing (it becomes a base snapshot), priority,
// destruction. Snapshots go through QEMU's migration into a socket this process serves.
import { chmod, chown, copyFile, link, readdir, rename, rm, writeFile } from "node:fs/promises";
import { setPriority } from "node:os";
import { join } from "node:path";
import type { Writable } from "node:stream";
import type { AgentChannel } from "../../agent-client/index.js";
import { HostDiskFullError, type CaptureResult, type SnapshotMemory, type Vm, type VmInfo, type VmUsage } from "../provider.js";
import { processUsage } from "../process-usage.js";
import type { ConsoleLog } from "../console-log.js";
import { RAM_BACKEND_ID } from "./args.js";
import { MIGRATION_PARAMETERS, eventGapMs, receiveStream, waitMigration } from "./migration.js";
import { Qmp } from "./qmp.js";
import { copyRam, giveRam } from "./ram-file.js";
import { activeDisk, collapseIfDeep, deepChain, newOverlay, type Overlay, settleJobs, switchDisk } from "./disk-layers.js";
import { run, sessionOf } from "../../util/process.js";
import { ignore } from "../../util/ignore.js";

export class QemuVm implements Vm {
  private destroying: Promise<void> | null = null;

  constructor(
    readonly info: VmInfo,
    readonly guest: AgentChannel,
    private readonly console: ConsoleLog,
    readonly exited: Promise<void>,
    private readonly cleanup: () => Promise<void>,
    private readonly forget: () => void,
    /** Its shared RAM file: a base snapshot's being made (see freeze), or a forkable VM's own. */
    private readonly memoryFile?: string,
    /** The snapshot RAM file it maps privately: what its pauses store only the differences from. */
    private readonly mappedRam?: string,
  ) {}

  consoleTail(bytes = 4096): string {
    return this.console.getTail(bytes);
  }

  private get qmpSocket(): string {
    return join(this.info.dir, "qmp.sock");
  }

  // One snapshot at a time per VM: QEMU runs one migration at a time.
  private busy: Promise<unknown> = Promise.resolve();
  private serial<T>(fn: () => Promise<T>): Promise<T> {
    const p = this.busy.then(fn, fn);
    this.busy = p.catch(ignore("the failure is the call's own; the queue goes on"));
    return p;
  }

  async prepareSnapshot(dir: string): Promise<{ disk: string; diskBytes: number } | null> {
    const qmp = await Qmp.connect(this.qmpSocket);
    try {
      return await this.prepareSnapshotWith(qmp, dir);
    } finally {
      qmp.close();
    }
  }

  snapshot(dir: string, opts: { tees?: Writable[]; disk?: string; memory?: SnapshotMemory } = {}): Promise<CaptureResult> {
    const byFile = opts.memory === "copy" || opts.memory === "give";
    if (byFile && !this.memoryFile) throw new Error(`VM ${this.info.id} has no RAM file of its own: its snapshot streams its RAM`);
    if (byFile && opts.tees?.length) throw new Error("a snapshot that copies the RAM file has no stream of RAM to tee");
    return this.serial(async () => {
      const qmp = await Qmp.connect(this.qmpSocket);
      await requireRunning(qmp, this.info.id).catch((e) => {
        qmp.close();
        throw e;
      });
      await settleJobs(qmp).catch(ignore("no block job to wait for; the save goes on"));
      const state = join(dir, "state");
      // A delta: the stream less the pages its mapped RAM file holds, which the snapshot links.
      const delta = opts.memory === "delta" && this.mappedRam && !opts.tees?.length ? { base: this.mappedRam, block: RAM_BACKEND_ID } : undefined;
      // In the VM's own directory: the only place a confined QEMU can reach.
      const sink = await receiveStream(join(this.info.dir, "migrate.sock"), state, { tees: opts.tees, delta });
      await copyFile(join(this.info.dir, "console.log"), join(dir, "console.log")).catch(ignore("a snapshot without the console log still restores"));
      let stopped = false;
      let overlay: Overlay | null = null;
      let switched = false;
      try {
        const prepared = opts.disk ? null : await this.prepareSnapshotWith(qmp, dir);
        const disk = opts.disk ?? prepared?.disk;
        const diskBytes = prepared?.diskBytes ?? (disk ? (await activeDisk(qmp, this.info.dir))?.bytes : undefined);
        await qmp.execute("migrate-set-parameters", MIGRATION_PARAMETERS);
        // By file: the stream carries the devices only, and RAM is the file, copied while the
        // guest is stopped. Under KVM as under TCG the stop is what makes the copy consistent
        // (no dirty-page tracking is involved), so the pause is the time to copy the touched RAM.
        await qmp.execute("migrate-set-capabilities", { capabilities: [{ capability: "x-ignore-shared", state: byFile }] });
        // The guest is stopped for the whole copy. Live pre-copy would pause it only for the last
        // round, but on QEMU 7.2 under TCG it lost guest writes: half the snapshots taken soon
        // after a restore from a mapped snapshot crashed their guests (0 of 18 when stopped).
        // The overlay the guest goes on with, made while it still runs.
        overlay = disk && diskBytes ? await newOverlay(this.info.dir, disk, diskBytes) : null;
        const stopEvent = qmp.waitEvent((e) => e.event === "STOP", 10_000);
        await qmp.execute("stop");
        stopped = true;
        // From here on the guest writes to the new overlay; the old one, consistent with the RAM
        // being sent, belongs to the snapshot (and its children).
        if (overlay) {
          await switchDisk(qmp, overlay);
          switched = true;
        }
        await qmp.execute("migrate", { uri: sink.uri });
        await waitMigration(qmp, ["completed"], 120_000);
        const bytes = await sink.done;
        // The frozen disk belongs to the snapshot now: not even this VM's QEMU may change it.
        if (disk) await sealFile(disk);
        let memory: string | undefined;
        if (delta) {
          // The same sealed file (a link): it must outlive this VM and the snapshot it came from.
          memory = join(dir, "memory");
          await giveRam(delta.base, memory);
        } else if (byFile) {
          memory = join(dir, "memory");
          if (opts.memory === "give") await giveRam(this.memoryFile!, memory);
          else await copyRam(this.memoryFile!, memory);
          await sealFile(memory);
        }
        // Given away: the guest must never run again (its RAM is the snapshot's now).
        if (opts.memory === "give") return { files: { state, memory, disk, diskBytes }, pauseMs: 0, bytes };
        const resumed = qmp.waitEvent((e) => e.event === "RESUME", 10_000);
        await qmp.execute("cont");
        stopped = false;
        const pauseMs = eventGapMs(await stopEvent, await resumed);
        // One layer more below the guest's disk: past the bound, they are collapsed while it runs.
        if (switched) await collapseIfDeep(qmp, this.info.dir).catch(ignore("the chain stays as it is until the next snapshot"));
        return { files: { state, memory, disk, diskBytes }, pauseMs, bytes, memoryShared: !!delta };
      } catch (e) {
        await qmp.execute("migrate_cancel").catch(ignore("no migration may be running any more"));
        if (overlay && !switched) await rm(overlay.file, { force: true });
        if (stopped) await qmp.execute("cont").catch(ignore("the VM is being given up already; the save's error is the one reported"));
        // A stream that could not be written (a full disk) is why the migration failed.
        throw sink.failure() ?? e;
      } finally {
        sink.close();
        qmp.close();
      }
    });
  }

  // A hard link: the snapshot keeps the disk (frozen at the switch) after this VM is gone.
  private async prepareSnapshotWith(qmp: Qmp, dir: string): Promise<{ disk: string; diskBytes: number } | null> {
    const active = await activeDisk(qmp, this.info.dir);
    if (!active) return null;
    const disk = join(dir, "disk.qcow2");
    await link(active.file, disk);
    return { disk, diskBytes: active.bytes };
  }

  freeze(dir: string): Promise<CaptureResult> {
    return this.serial(async () => {
      if (!this.memoryFile) throw new Error(`VM ${this.info.id} was not spawned with a memory file and cannot be frozen`);
      const qmp = await Qmp.connect(this.qmpSocket);
      const state = join(dir, "state");
      const sink = await receiveStream(join(this.info.dir, "migrate.sock"), state);
      await copyFile(join(this.info.dir, "console.log"), join(dir, "console.log")).catch(ignore("a snapshot without the console log still restores"));
      try {
        await requireRunning(qmp, this.info.id);
        await settleJobs(qmp);
        const active = await activeDisk(qmp, this.info.dir);
        const stopEvent = qmp.waitEvent((e) => e.event === "STOP", 10_000);
        await qmp.execute("stop");
        await qmp.execute("migrate-set-parameters", MIGRATION_PARAMETERS);
        await qmp.execute("migrate-set-capabilities", { capabilities: [{ capability: "x-ignore-shared", state: true }] });
        await qmp.execute("migrate", { uri: sink.uri });
        await waitMigration(qmp, ["completed"], 60_000);
        const bytes = await sink.done;
        let disk: string | undefined;
        if (active) {
          disk = join(dir, "disk.qcow2");
          await rename(active.file, disk);
          await sealFile(disk);
        }
        await sealFile(this.memoryFile);
        await stopEvent;
        // The guest never runs again, so there is no pause to report.
        return { files: { state, memory: this.memoryFile, disk, diskBytes: active?.bytes }, pauseMs: 0, bytes };
      } finally {
        sink.close();
        qmp.close();
        await this.destroy();
      }
    });
  }

  copyDisk(dest: string): Promise<{ pauseMs: number } | null> {
    return this.serial(async () => {
      const qmp = await Qmp.connect(this.qmpSocket);
      let stopped = false;
      try {
        await requireRunning(qmp, this.info.id);
        await settleJobs(qmp);
        const active = await activeDisk(qmp, this.info.dir);
        if (!active) return null;
        const t0 = performance.now();
        await qmp.execute("stop");
        stopped = true;
        // -U: QEMU holds the image's write lock; with the vCPUs stopped nothing writes to it.
        await run("qemu-img", ["convert", "-U", "-O", "raw", active.file, dest]);
        await qmp.execute("cont");
        stopped = false;
        return { pauseMs: Math.round(performance.now() - t0) };
      } finally {
        if (stopped) await qmp.execute("cont").catch(ignore("the VM is being given up already; the save's error is the one reported"));
        qmp.close();
      }
    });
  }

  /** Collapses the layers below the guest's disk when there are too many (disk-layers.ts): after a restore, whose chain is its snapshot's and one more. */
  collapseLayers(): Promise<void> {
    return this.serial(async () => {
      if (!(await deepChain(this.info.dir))) return;
      const qmp = await Qmp.connect(this.qmpSocket);
      try {
        await collapseIfDeep(qmp, this.info.dir);
      } finally {
        qmp.close();
      }
    });
  }

  waitingForDisk(): Promise<boolean> {
    // After a copy in progress: QEMU serves one QMP client at a time.
    return this.serial(async () => {
      const qmp = await Qmp.connect(this.qmpSocket, 5000);
      try {
        return (await runState(qmp)) === "io-error";
      } finally {
        qmp.close();
      }
    });
  }

  continueAfterDisk(): Promise<void> {
    return this.serial(async () => {
      const qmp = await Qmp.connect(this.qmpSocket, 5000);
      try {
        // QEMU retries the write that failed; a disk still full pauses the guest again.
        if ((await runState(qmp)) === "io-error") await qmp.execute("cont");
      } finally {
        qmp.close();
      }
    });
  }

  continueAfterGive(): Promise<void> {
    return this.serial(async () => {
      const qmp = await Qmp.connect(this.qmpSocket, 5000);
      try {
        // After its migration completed QEMU says "postmigrate"; `cont` takes it from there too.
        if (["paused", "postmigrate"].includes(await runState(qmp))) await qmp.execute("cont");
      } finally {
        qmp.close();
      }
    });
  }

  balloon(bytes?: number): Promise<number> {
    return this.serial(async () => {
      const qmp = await Qmp.connect(this.qmpSocket, 5000);
      const actual = async () => (await qmp.execute<{ actual: number }>("query-balloon")).actual;
      try {
        if (bytes === undefined) return await actual();
        // The guest's driver moves the balloon a batch of pages at a time (as fast under TCG as
        // under KVM: the work is the guest kernel's); wait until it arrives or stops moving.
        await qmp.execute("balloon", { value: bytes });
        let last = -1;
        let still = 0;
        for (const end = Date.now() + 30_000; Date.now() < end; ) {
          const now = await actual();
          if (now === bytes) return now;
          still = now === last ? still + 1 : 0;
          if (still >= 20) return now;
          last = now;
          await new Promise((r) => setTimeout(r, 100));
        }
        return last;
      } finally {
        qmp.close();
      }
    });
  }

  setLink(up: boolean): Promise<void> {
    return this.serial(async () => {
      const qmp = await Qmp.connect(this.qmpSocket, 5000);
      try {
        // The user-mode backend drops every frame while its link is down, under KVM as under TCG.
        await qmp.execute("set_link", { name: "net0", up });
      } finally {
        qmp.close();
      }
    });
  }

  setNice(nice: number): Promise<void> {
    return setVmmNice(this.info.pid, nice);
  }

  usage(): Promise<VmUsage | null> {
    return processUsage(this.info.pid);
  }

  release(reason?: Error): void {
    this.guest.close(reason);
    this.console.close();
    this.forget();
  }

  destroy(): Promise<void> {
    this.destroying ??= (async () => {
      // A held channel outlives its VM: its streams go on in the VM restored from the save
      // (its owner closes it when that never comes).
      if (this.guest.held) this.guest.letGoOfSocket();
      else this.guest.close();
      await this.cleanup();
      this.forget();
    })();
    return this.destroying;
  }
}

/** Changes a VMM's niceness: its autogroup's and each of its threads'. */
export async function setVmmNice(pid: number, nice: number): Promise<void> {
  await setAutogroupNice(pid, nice);
  for (const tid of await readdir(`/proc/${pid}/task`).catch(() => [] as string[])) {
    try {
      setPriority(Number(tid), nice);
    } catch {
      // thread gone meanwhile
    }
  }
}

/**
 * QEMU runs in its own session, and with autogroup scheduling (the Linux default) a session's
 * threads compete with others as one group whose weight is the group's nice, not the threads'.
 */
export async function setAutogroupNice(pid: number, nice: number): Promise<void> {
  // A process not yet in its own session would renice its parent's group: the server's.
  if (sessionOf(pid) !== pid) return;
  await writeFile(`/proc/${pid}/autogroup`, String(nice)).catch(ignore("no autogroup support: niceness is a hint"));
}

/** What QEMU says of a VM's run state: "running", "paused", "io-error" (a disk write failed and it waits), … */
export async function runState(qmp: Qmp): Promise<string> {
  return (await qmp.execute<{ status: string }>("query-status")).status;
}

/** Refuses to copy a VM that QEMU holds paused on a full disk (its snapshot would need room too, and a `cont` would hit the same wall). */
async function requireRunning(qmp: Qmp, id: string): Promise<void> {
  const state = await runState(qmp);
  if (state === "io-error") throw new HostDiskFullError(`VM ${id} is paused: a write to its disk found the host's disk full`);
}

/** The file behind the VM's root disk as QEMU sees it now, and its virtual size. */
/** Makes a snapshot file root's and read-only for everyone. */
async function sealFile(file: string): Promise<void> {
  await chown(file, 0, 0).catch(ignore("not root: the file is the server's own already"));
  await chmod(file, 0o444);
}
