// Snapshots, forks and restores: copies of a running sandbox's memory, devices and disk
// (copies.ts), and snapshots moved between hosts as archives (snapshot-transfer.ts).
import type { Readable } from "node:stream";
import type { SnapshotRow, SnapshotState } from "../../store/snapshots.js";
import * as copies from "../sandboxes/copies.js";
import type { Core } from "../core.js";
import type { ForkOptions, ForkResult } from "../options.js";
import type { Sandbox } from "../guest/sandbox.js";
import { exportSnapshot, importSnapshot } from "../snapshots/snapshot-transfer.js";
import type { SandboxLookup } from "./lookup.js";

export class SnapshotsFacade {
  constructor(
    private readonly core: Core,
    private readonly sandboxes: SandboxLookup,
  ) {}

  /** Snapshots a running sandbox (memory, devices, disk) under an optional name (`replace`: taking it from an older one); it keeps running. */
  async take(id: string, name?: string, opts: { replace?: boolean } = {}): Promise<SnapshotRow> {
    this.core.disk.require("a snapshot");
    return copies.snapshot(this.core, this.sandboxes.running(id), name, opts.replace);
  }

  /** The live sandboxes (running or paused) made from a snapshot, directly or through their own pauses and snapshots; not the one it was taken of. */
  usedBy(idOrName: string): string[] {
    const snap = this.get(idOrName);
    const rows = this.core.snapshotRows.list(["ready", "deleted", "creating"]);
    const parent = new Map(rows.map((r) => [r.id, r.parent_id]));
    const descends = (id: string | null) => {
      for (let p = id; p; p = parent.get(p) ?? null) if (p === snap.id) return true;
      return false;
    };
    return this.core.sandboxes
      .list(["running", "paused"])
      .filter((r) => r.id !== snap.source_id && descends(r.snapshot_id))
      .map((r) => r.id);
  }

  /** Makes `count` running copies of a sandbox as it is now (see copies.ts). */
  async fork(id: string, opts: ForkOptions = {}): Promise<ForkResult> {
    this.core.disk.require("a fork");
    return copies.fork(this.core, this.sandboxes.running(id), opts);
  }

  /** Starts `count` sandboxes from a snapshot, each as the sandbox was when it was taken. */
  async restore(idOrName: string, opts: ForkOptions = {}): Promise<Sandbox[]> {
    this.core.disk.require("a restore");
    return copies.restore(this.core, idOrName, opts);
  }

  /** A named snapshot as an archive (its memory, its disk over its image, its description) for another host. */
  async export(idOrName: string): Promise<{ stream: Readable; filename: string }> {
    return exportSnapshot(this.core, this.get(idOrName));
  }

  /** A snapshot made here from an exported archive (taken by the same VMM build and accelerator). */
  async import(archive: AsyncIterable<Buffer>, name?: string): Promise<SnapshotRow> {
    this.core.disk.require("a snapshot import");
    return importSnapshot(this.core, archive, name);
  }

  /** A snapshot by id or name. */
  get(idOrName: string): SnapshotRow {
    return copies.getSnapshot(this.core, idOrName);
  }

  /** Snapshots in these states (default: ready), newest first; base and fork snapshots included. */
  list(states: SnapshotState[] = ["ready"]): SnapshotRow[] {
    return this.core.snapshotRows.list(states);
  }

  /** Deletes a snapshot; its files go once no sandbox restored from it runs. */
  async remove(idOrName: string): Promise<void> {
    await this.core.snaps.remove(this.get(idOrName));
  }
}
