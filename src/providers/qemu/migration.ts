// Moving a VM's state in and out of QEMU through its migration machinery. QEMU sends a stream
// to a unix socket this process serves (so QEMU never has to spawn a helper) and reads one from
// an inherited file descriptor on restore.
import { chmod } from "node:fs/promises";
import { createWriteStream, type WriteStream } from "node:fs";
import { createServer, type Server, type Socket } from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import type { Writable } from "node:stream";
import type { VmFiles } from "./args.js";
import { Qmp, type QmpEvent } from "./qmp.js";
import { RamFile, deltaFilter } from "./ram-delta.js";

/** Tuning every outgoing migration gets: never throttled (it is a local copy), short downtime. */
export const MIGRATION_PARAMETERS = { "max-bandwidth": 64 * 1024 * 1024 * 1024, "downtime-limit": 50 };

export interface StreamSink {
  /** URI to hand to QMP `migrate`. */
  uri: string;
  /** Resolves with the byte count once QEMU has closed the stream and the file is flushed. */
  done: Promise<number>;
  /** Why writing the stream failed (a full disk), once it has: the cause of a migration that then fails. */
  failure(): Error | null;
  close(): void;
}

/** A stream to be stored as what differs from the RAM file the VM maps (see ram-delta.ts). */
export interface DeltaTarget {
  /** The RAM file the guest's RAM block was mapped from. */
  base: string;
  /** The name of that block in the stream. */
  block: string;
}

/**
 * Serves one unix socket that accepts one QEMU migration stream and writes it to `file` (less
 * the pages `delta`'s file already holds), and to every `tee` as it is (a fork's children load
 * while the parent is still sending).
 */
export async function receiveStream(socketPath: string, file: string, opts: { tees?: Writable[]; delta?: DeltaTarget } = {}): Promise<StreamSink> {
  const tees = opts.tees ?? [];
  // Opened first: a base that cannot be read fails the save before QEMU is asked for anything.
  const base = opts.delta ? new RamFile(opts.delta.base) : null;
  const server: Server = createServer();
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(socketPath, () => resolve());
  }).catch((e) => {
    base?.close();
    throw e;
  });
  // A confined QEMU runs as its own uid and needs write access to connect; the socket lives in
  // that VM's private directory, so nobody else can reach it.
  await chmod(socketPath, 0o666);
  let conn: Socket | null = null;
  let out: WriteStream | null = null;
  let failure: Error | null = null;
  const done = new Promise<number>((resolve, reject) => {
    server.once("connection", (sock: Socket) => {
      conn = sock;
      server.close();
      const fileOut = (out = createWriteStream(file, { mode: 0o600 }));
      let bytes = 0;
      let waiting = 0;
      const resume = () => {
        if (--waiting === 0) sock.resume();
      };
      const send = (s: Writable, chunk: Buffer) => {
        if (s.destroyed || s.write(chunk)) return;
        waiting++;
        sock.pause();
        s.once("drain", resume);
      };
      // The filter's pieces (record heads, kept pages) go out as one write per chunk received.
      let pieces: Buffer[] = [];
      const delta = base ? deltaFilter(base, opts.delta!.block, (b) => pieces.push(b)) : null;
      sock.on("data", (chunk: Buffer) => {
        bytes += chunk.length;
        for (const t of tees) send(t, chunk);
        if (!delta) return send(fileOut, chunk);
        try {
          delta.filter.push(chunk);
        } catch (e) {
          sock.destroy();
          return reject(e);
        }
        // Copied: the pieces are views into buffers the filter reuses.
        if (pieces.length) send(fileOut, Buffer.concat(pieces));
        pieces = [];
      });
      // A child that dies mid-load must not stop the others.
      for (const t of tees) t.on("error", () => {});
      sock.once("error", reject);
      sock.once("end", () => {
        for (const t of tees) t.end();
        try {
          delta?.filter.end();
        } catch (e) {
          return reject(e);
        }
        fileOut.end(() => resolve(bytes));
      });
      fileOut.once("error", reject);
    });
  });
  done.catch((e) => (failure = e as Error));
  return {
    uri: `unix:${socketPath}`,
    done,
    failure: () => failure,
    close: () => {
      server.close();
      (conn as Socket | null)?.destroy();
      (out as WriteStream | null)?.destroy();
      base?.close();
    },
  };
}

export interface MigrationStatus {
  status: string;
  "error-desc"?: string;
  "total-time"?: number;
  downtime?: number;
  ram?: { transferred?: number };
}

/** Polls `query-migrate` until the status is one of `want`; a failed migration throws. */
export async function waitMigration(qmp: Qmp, want: string[], timeoutMs: number): Promise<MigrationStatus> {
  const end = Date.now() + timeoutMs;
  for (let delay = 1; ; delay = Math.min(delay * 2, 20)) {
    const s = await qmp.execute<MigrationStatus>("query-migrate");
    if (want.includes(s.status)) return s;
    if (s.status === "failed" || s.status === "cancelled") throw new Error(`migration ${s.status}${s["error-desc"] ? `: ${s["error-desc"]}` : ""}`);
    if (Date.now() > end) throw new Error(`migration still ${s.status} after ${timeoutMs} ms`);
    await sleep(delay);
  }
}

/** Milliseconds between two QMP events, from QEMU's own timestamps. */
export function eventGapMs(from: QmpEvent, to: QmpEvent): number {
  const t = (e: QmpEvent) => e.timestamp.seconds * 1000 + e.timestamp.microseconds / 1000;
  return Math.round((t(to) - t(from)) * 10) / 10;
}

/**
 * Loads a restore's state and returns once it is loaded; the guest stays stopped. With RAM in
 * its own file the stream leaves RAM out (x-ignore-shared, which only QMP can set), so the load
 * is started here; otherwise QEMU reads fd 3 from its start, unless it was started `deferred`
 * (a VMM started ahead, args.ts), when the load is started here too. `qmp`: a connection of the
 * caller's to use (QEMU's monitor serves one at a time), left open.
 */
export async function loadState(files: VmFiles, exited: Promise<void>, ignoreShared: boolean, o: { deferred?: boolean; qmp?: Qmp } = {}): Promise<void> {
  const deferred = !!o.deferred;
  const qmp = o.qmp ?? (await Qmp.connect(files.qmpSocket));
  try {
    if (ignoreShared) await qmp.execute("migrate-set-capabilities", { capabilities: [{ capability: "x-ignore-shared", state: true }] });
    if (ignoreShared || deferred) await qmp.execute("migrate-incoming", { uri: "fd:3" });
    let gone = false;
    void exited.then(() => (gone = true));
    for (let delay = 2; ; delay = Math.min(delay * 2, 20)) {
      const { status } = await qmp.execute<{ status: string }>("query-status");
      if (status !== "inmigrate") break;
      if (gone) throw new Error("QEMU exited while loading the snapshot");
      await sleep(delay);
    }
  } finally {
    if (!o.qmp) qmp.close();
  }
}

/**
 * Lets a restored guest run. `cont` must wait for the load to finish: sent during it, QEMU only
 * notes to start afterwards, and then obeys the run state saved in the stream instead, which is
 * "paused" (snapshots stop the guest for the copy), so the guest would never run. It must wait
 * anyway while the parent still writes the backing file (a fork fed live): `cont` takes the
 * disk's locks.
 */
export async function letRun(files: VmFiles): Promise<void> {
  const qmp = await Qmp.connect(files.qmpSocket);
  try {
    await qmp.execute("cont");
  } finally {
    qmp.close();
  }
}
