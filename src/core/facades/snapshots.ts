// Snapshots, forks and restores: copies of a running sandbox's memory, devices and disk
// (copies.ts), and snapshots moved between hosts as archives (snapshot-transfer.ts).
import type { Readable } from "node:stream";
import type { SandboxStore } from "../../store/sandboxes.js";
import type { SnapshotRow, SnapshotState, SnapshotStore } from "../../store/snapshots.js";
import type { Copies } from "../sandboxes/copies.js";
import type { DiskSpace } from "../host/disk-space.js";
import type { Snapshots } from "../snapshots/snapshots.js";
import type { ForkOptions, ForkResult } from "../options.js";
import type { Sandbox } from "../guest/sandbox.js";
import { exportSnapshot, importSnapshot, type TransferDeps } from "../snapshots/snapshot-transfer.js";
import type { SandboxLookup } from "./lookup.js";

/** What the snapshot calls take: the copies, the snapshots and their rows, the sandboxes' rows, and the disk's room. */
export interface SnapshotsDeps extends TransferDeps {
  readonly snapshotRows: SnapshotStore;
  readonly sandboxes: Pick<SandboxStore, "list">;
  readonly snaps: Snapshots;
  readonly disk: Pick<DiskSpace, "require">;
  readonly copies: Pick<Copies, "snapshot" | "fork" | "restore" | "getSnapshot">;
}

export class SnapshotsFacade {
  constructor(
    private readonly d: SnapshotsDeps,
    private readonly sandboxes: SandboxLookup,
  ) {}

  /** Snapshots a running sandbox (memory, devices, disk) under an optional name (`replace`: taking it from an older one); it keeps running. */
  async take(id: string, name?: string, opts: { replace?: boolean } = {}): Promise<SnapshotRow> {
    this.d.disk.require("a snapshot");
    return this.d.copies.snapshot(this.sandboxes.running(id), name, opts.replace);
  }

  /** The live sandboxes (running or paused) made from a snapshot, directly or through their own pauses and snapshots; not the one it was taken of. */
  usedBy(idOrName: string): string[] {
    const snap = this.get(idOrName);
    const rows = this.d.snapshotRows.list(["ready", "deleted", "creating"]);
    const parent = new Map(rows.map((r) => [r.id, r.parent_id]));
    const descends = (id: string | null) => {
      for (let p = id; p; p = parent.get(p) ?? null) if (p === snap.id) return true;
      return false;
    };
    return this.d.sandboxes
      .list(["running", "paused"])
      .filter((r) => r.id !== snap.source_id && descends(r.snapshot_id))
      .map((r) => r.id);
  }

  /** Makes `count` running copies of a sandbox as it is now (see copies.ts). */
  async fork(id: string, opts: ForkOptions = {}): Promise<ForkResult> {
    this.d.disk.require("a fork");
    return this.d.copies.fork(this.sandboxes.running(id), opts);
  }

  /** Starts `count` sandboxes from a snapshot, each as the sandbox was when it was taken. */
  async restore(idOrName: string, opts: ForkOptions = {}): Promise<Sandbox[]> {
    this.d.disk.require("a restore");
    return this.d.copies.restore(idOrName, opts);
  }

  /** A named snapshot as an archive (its memory, its disk over its image, its description) for another host. */
  async export(idOrName: string): Promise<{ stream: Readable; filename: string }> {
    return exportSnapshot(this.d, this.get(idOrName));
  }

  /** A snapshot made here from an exported archive (taken by the same VMM build and accelerator). */
  async import(archive: AsyncIterable<Buffer>, name?: string): Promise<SnapshotRow> {
    this.d.disk.require("a snapshot import");
    return importSnapshot(this.d, archive, name);
  }

  /** A snapshot by id or name. */
  get(idOrName: string): SnapshotRow {
    return this.d.copies.getSnapshot(idOrName);
  }

  /** Snapshots in these states (default: ready), newest first; base and fork snapshots included. */
  list(states: SnapshotState[] = ["ready"]): SnapshotRow[] {
    return this.d.snapshotRows.list(states);
  }

  /** Deletes a snapshot; its files go once no sandbox restored from it runs. */
  async remove(idOrName: string): Promise<void> {
    await this.d.snaps.remove(this.get(idOrName));
  }
}
