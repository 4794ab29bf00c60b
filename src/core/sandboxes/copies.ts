// Copies of running sandboxes: named snapshots, forks (running copies made while the parent is
// paused once), and restores of a snapshot into new sandboxes.
import { join } from "node:path";
import type { Writable } from "node:stream";
import { imageInit, resolveImage, type LocalImage } from "../../images/store.js";
import { BootError, type RestoreSource, type Vm, type VmSpec } from "../../providers/provider.js";
import type { SandboxRow } from "../../store/sandboxes.js";
import type { SnapshotRow } from "../../store/snapshots.js";
import { MAX_FORK } from "../core.js";
import type { Paths } from "../../config/paths.js";
import type { SandboxStore } from "../../store/sandboxes.js";
import type { SnapshotStore } from "../../store/snapshots.js";
import type { Providers } from "../providers.js";
import type { EventBus } from "../events.js";
import type { Networks } from "../network.js";
import type { SpawnDefaults } from "../options.js";
import type { SandboxTable } from "./table.js";
import type { Lifecycle } from "./lifecycle.js";
import type { Planner } from "./plan.js";
import { badRequest, conflict, ForgevmError, notFound } from "../../http/errors.js";
import { hasNic } from "../network.js";
import { ignore } from "../../util/ignore.js";
import { EGRESS_HINT } from "./secrets.js";
import type { ForkOptions, ForkResult } from "../options.js";
import { checkEnv } from "../../schemas/checks.js";
import type { Sandbox } from "../guest/sandbox.js";
import { Snapshots } from "../snapshots/snapshots.js";
import { ttlLeft } from "../../schemas/durations.js";

/** What copies of sandboxes take: the snapshots and their rows, the new sandboxes' rows (planned), and their start and end. */
export interface CopiesDeps {
  readonly paths: Paths;
  readonly sandboxes: SandboxStore;
  readonly snapshotRows: SnapshotStore;
  readonly snaps: Snapshots;
  readonly providers: Providers;
  readonly table: Pick<SandboxTable, "secrets">;
  readonly events: EventBus;
  readonly networks: Pick<Networks, "plan">;
  readonly defaults: Pick<SpawnDefaults, "ttlMs">;
  readonly planner: Pick<Planner, "copyNames" | "planLifecycle" | "rowOf">;
  readonly lifecycle: Pick<Lifecycle, "admit" | "destroy" | "recordFailure">;
}

/** Snapshots, forks and restores of sandboxes. */
export class Copies {
  constructor(private readonly d: CopiesDeps) {}

  /**
   * Snapshots a running sandbox (memory, devices, disk) under an optional name; it keeps running.
   * With `replace`, a snapshot already of that name is deleted once the new one is taken, which
   * then takes the name (E2B's builds of a snapshot name); without, the name must be free.
   */
  async snapshot(sb: Sandbox, name?: string, replace = false): Promise<SnapshotRow> {
    const src = this.d.sandboxes.get(sb.id)!;
    this.refuseCopy(src, "snapshotted");
    const old = name !== undefined ? this.d.snapshotRows.find(name) : undefined;
    if (old && (!replace || old.name !== name)) throw conflict(`a snapshot named "${name}" already exists`);
    const row = await this.d.snaps.beginOf(src, "sandbox", old ? null : name);
    try {
      let done = await this.d.snaps.finish(row, await sb.vm.snapshot(row.dir));
      this.disksBackedBy(sb.id, done);
      if (old) {
        // The old build gives its name up (it may live on, unnamed, while sandboxes made from it run).
        this.d.snapshotRows.update(old.id, { name: null });
        await this.d.snaps.remove(old);
        this.d.snapshotRows.update(done.id, { name: name! });
        done = this.d.snapshotRows.get(done.id)!;
      }
      return done;
    } catch (e) {
      await abandon(this.d, row, sb.id);
      throw e;
    }
  }

  /** A snapshot by id or name. */
  getSnapshot(idOrName: string): SnapshotRow {
    const row = this.d.snapshotRows.find(idOrName);
    if (!row) throw notFound(`snapshot ${idOrName} not found`);
    return row;
  }

  /**
   * Makes `count` running copies of a sandbox as it is now, processes and memory included. The
   * children load while the parent is being copied; each gets its own disk overlay and a new
   * identity (hostname, machine id, entropy, clock). The parent pauses for the copy only.
   */
  async fork(parent: Sandbox, opts: ForkOptions = {}): Promise<ForkResult> {
    const count = opts.count ?? 1;
    if (!Number.isInteger(count) || count < 1 || count > MAX_FORK) throw badRequest(`count must be an integer from 1 to ${MAX_FORK}`);
    const id = parent.id;
    const src = this.d.sandboxes.get(id)!;
    this.refuseCopy(src, "forked");
    if (opts.network !== undefined || opts.allow !== undefined)
      throw badRequest(`${opts.network !== undefined ? "network" : "allow"}: a fork keeps its parent's network; change the copies' allowlist after the fork`);
    const image = await resolveImage(this.d.paths, src.image).catch(() => null);
    const snap = await this.d.snaps.beginOf(src, "fork");
    const started = performance.now();
    const rows: SandboxRow[] = [];
    try {
      if (parent.vm.info.forkable) return await this.forkByFile(parent, src, snap, count, opts, image, started);
      const disk = await parent.vm.prepareSnapshot(snap.dir);
      const files = { state: join(snap.dir, "state"), disk: disk?.disk, diskBytes: disk?.diskBytes };
      const tees: Writable[] = [];
      let fed!: () => void;
      const allFed = new Promise<void>((r) => (fed = r));
      rows.push(...this.childRows(src, snap, count, opts));
      const children = rows.map((row) =>
        this.d.providers.of(src).spawn(
          childSpec(src, row, opts, {
            files,
            diskInUse: true,
            feed: (w) => {
              tees.push(w);
              if (tees.length === count) fed();
            },
          }),
        ),
      );
      // A child that fails before QEMU runs would never take its pipe: stop waiting then.
      const settled = Promise.allSettled(children);
      await Promise.race([allFed, settled]);
      if (tees.length < count) {
        const results = await settled;
        await stopStarted(results);
        throw results.find((r) => r.status === "rejected")!.reason;
      }
      let capture: Awaited<ReturnType<typeof parent.vm.snapshot>>;
      try {
        capture = await parent.vm.snapshot(snap.dir, { tees, disk: disk?.disk });
      } catch (e) {
        // The children loading from the parent's stream never get it whole: their VMs stop here.
        for (const t of tees) t.destroy();
        await stopStarted(await settled);
        throw e;
      }
      this.disksBackedBy(id, await this.d.snaps.finish(snap, capture));
      const sandboxes = await this.admitChildren(rows, await settled, image);
      this.d.events.emit("sandbox.forked", id, { children: rows.map((r) => r.id), pause_ms: capture.pauseMs });
      return { sandboxes, pauseMs: capture.pauseMs, totalMs: Math.round(performance.now() - started), snapshotBytes: capture.bytes };
    } catch (e) {
      for (const r of rows) await this.d.lifecycle.recordFailure(r.id, e);
      if (this.d.snapshotRows.get(snap.id)?.state === "creating") await abandon(this.d, snap, id);
      else await this.d.snaps.collect();
      throw e;
    }
  }

  /**
   * A fork of a forkable sandbox: the parent stops only while its devices are saved and its RAM
   * file copied (sparse: the pages it touched), however many children there are; the children
   * are then restored from that copy, mapped copy-on-write, so they share its pages.
   */
  private async forkByFile(parent: Sandbox, src: SandboxRow, snap: SnapshotRow, count: number, opts: ForkOptions, image: LocalImage | null, started: number): Promise<ForkResult> {
    // The children's rows first: from the moment the snapshot is ready they keep it from being
    // collected as a mere layer of the parent's disk.
    const rows = this.childRows(src, snap, count, opts);
    try {
      const capture = await parent.vm.snapshot(snap.dir, { memory: "copy" });
      const ready = await this.d.snaps.finish(snap, capture);
      this.disksBackedBy(src.id, ready);
      const results = await Promise.allSettled(rows.map((row) => this.d.providers.of(src).spawn(childSpec(src, row, opts, { files: Snapshots.files(ready) }))));
      const sandboxes = await this.admitChildren(rows, results, image);
      this.d.events.emit("sandbox.forked", src.id, { children: rows.map((r) => r.id), pause_ms: capture.pauseMs, by_file: true });
      return { sandboxes, pauseMs: capture.pauseMs, totalMs: Math.round(performance.now() - started), snapshotBytes: ready.size_bytes };
    } catch (e) {
      for (const r of rows) await this.d.lifecycle.recordFailure(r.id, e);
      if (this.d.snapshotRows.get(snap.id)?.state === "creating") await abandon(this.d, snap, src.id);
      else await this.d.snaps.collect();
      throw e;
    }
  }

  /**
   * A fork's children admitted as running sandboxes, all or none: when one failed to start or to be
   * admitted, every VM started is stopped, every child admitted is destroyed, and the failure thrown.
   */
  private async admitChildren(rows: SandboxRow[], results: PromiseSettledResult<Vm>[], image: LocalImage | null): Promise<Sandbox[]> {
    const failed = results.find((r) => r.status === "rejected");
    if (failed) {
      await stopStarted(results);
      throw failed.reason;
    }
    const sandboxes: Sandbox[] = [];
    for (const [i, r] of results.entries()) {
      try {
        sandboxes.push(await this.d.lifecycle.admit(rows[i], (r as PromiseFulfilledResult<Vm>).value, image, "fork"));
      } catch (e) {
        // admit stopped this one's VM; the ones after it were never handed out, the ones before it were.
        await stopStarted(results.slice(i + 1));
        for (const sb of sandboxes) await this.d.lifecycle.destroy(sb.id, { reason: "failed", by: "server" }).catch(ignore("a sibling gone already"));
        throw e;
      }
    }
    return sandboxes;
  }

  /** The `creating` rows of a fork's children, inserted: the parent's settings, unique names, no host ports. */
  private childRows(src: SandboxRow, snap: SnapshotRow, count: number, opts: ForkOptions): SandboxRow[] {
    const ttlMs = opts.ttlMs ?? Math.max(1000, ttlLeft(src.expires_at));
    // Names stay unique: the copies of "web" are web-1, web-2, … (and the name kept in the metadata follows).
    const parentName = src.name ?? src.metadata?.name ?? null;
    return this.d.planner.copyNames(parentName, count).map((name) => {
      // A copy keeps its parent's network and allowlist; host ports stay with the parent.
      const network = src.network ? { ...src.network, ports: [] } : null;
      const inherited = opts.metadata ?? src.metadata;
      const metadata = inherited && name && "name" in inherited ? { ...inherited, name } : inherited;
      const row = {
        ...this.d.planner.rowOf({ ...src, network }, { ttlMs, ownerId: opts.ownerId ?? src.owner_id, metadata, snapshotId: snap.id }),
        name,
        forkable: opts.forkable ? 1 : 0,
        init: src.init ?? null,
      };
      this.d.sandboxes.insert(row);
      this.d.events.emit("sandbox.created", row.id, { image: row.image, forked_from: src.id });
      return row;
    });
  }

  /** Starts `count` sandboxes from a snapshot, each as the sandbox was when it was taken. */
  async restore(idOrName: string, opts: ForkOptions = {}): Promise<Sandbox[]> {
    if (!this.d.providers.default.features.snapshots) throw badRequest(`provider ${this.d.providers.default.name} cannot restore snapshots`);
    const snap = this.getSnapshot(idOrName);
    if (snap.state !== "ready") throw conflict(`snapshot ${snap.id} is ${snap.state}`);
    const count = opts.count ?? 1;
    if (!Number.isInteger(count) || count < 1 || count > MAX_FORK) throw badRequest(`count must be an integer from 1 to ${MAX_FORK}`);
    const image = await resolveImage(this.d.paths, snap.image).catch(() => null);
    const sourceRow = snap.source_id ? this.d.sandboxes.get(snap.source_id) : undefined;
    const source = sourceRow?.network ?? null;
    // What a later cold start of a copy boots as init: its source's, else what its image says.
    const init = sourceRow ? (sourceRow.init ?? null) : image ? imageInit(image) : null;
    const planned =
      opts.network !== undefined || opts.allow !== undefined
        ? this.d.networks.plan({ mode: opts.network, allow: opts.allow })
        : source
          ? { ...source, ports: [] }
          : this.d.networks.plan({ mode: snap.nic ? "full" : undefined });
    // The network device is part of the saved machine: a copy has one exactly when the snapshot did
    // (cut at the VMM while its mode is not "full"), and only a copy with one can be "full".
    if (planned.mode === "full" && !snap.nic) {
      throw badRequest(`network: snapshot ${snap.id} was taken without a network device; its copies must use network "none" or "allowlist"`);
    }
    const { nic: _nic, ...rest } = planned;
    const network = { ...rest, ...(snap.nic ? { nic: true } : {}) };
    if (opts.env) checkEnv(opts.env, "env");
    const lifecycle = this.d.planner.planLifecycle(opts, null, this.d.providers.default);
    return Promise.all(
      Array.from({ length: count }, async () => {
        const env = opts.env ? { ...snap.env, ...opts.env } : snap.env;
        const row = {
          ...this.d.planner.rowOf({ ...snap, network, env }, { ttlMs: opts.ttlMs ?? this.d.defaults.ttlMs, ownerId: opts.ownerId, metadata: opts.metadata, snapshotId: snap.id }),
          forkable: opts.forkable ? 1 : 0,
          lifecycle,
          init,
        };
        this.d.sandboxes.insert(row);
        this.d.events.emit("sandbox.created", row.id, { image: row.image, snapshot_id: snap.id });
        try {
          const spec = {
            id: row.id,
            memoryMb: snap.memory_mb,
            vcpus: snap.vcpus,
            hostname: row.id,
            // The processes that ran when the snapshot was taken run on in it, and are adopted (guest/adopt.ts).
            restore: { files: Snapshots.files(snap), keepProcesses: true },
            nic: !!snap.nic,
            forkable: !!opts.forkable,
          };
          // Under emulation a restored guest has (rarely: twice in the test suite's history) never
          // answered; a restore is cheap, so one more is tried before the caller hears of it.
          const vm = await this.d.providers.default.spawn(spec).catch(async (e) => {
            if (!(e instanceof BootError)) throw e;
            this.d.events.emit("sandbox.restore_retry", row.id, { snapshot_id: snap.id, reason: e.message.split("\n")[0] });
            return this.d.providers.default.spawn(spec);
          });
          return await this.d.lifecycle.admit(row, vm, image, "snapshot");
        } catch (e) {
          await this.d.lifecycle.recordFailure(row.id, e);
          throw e instanceof BootError ? new ForgevmError("UNAVAILABLE", `snapshot ${snap.id} could not be restored: ${e.message.split("\n")[0]}`) : e;
        }
      }),
    );
  }

  /**
   * After a snapshot the sandbox's disk is an overlay on the snapshot's frozen one: it now counts as
   * restored from it, so the snapshot (and, through its parent, the whole chain) stays while it lives.
   */
  private disksBackedBy(id: string, snap: SnapshotRow): void {
    if (snap.disk_bytes) this.d.sandboxes.update(id, { snapshot_id: snap.id });
  }

  /** What no copy may be made of: a pool VM's tenant, a sandbox holding secrets, a provider without snapshots. */
  private refuseCopy(src: SandboxRow, what: "snapshotted" | "forked"): void {
    this.d.providers.require(this.d.providers.of(src), "snapshots", `sandbox ${src.id} cannot be ${what}`);
    if (src.vm_id) throw badRequest(`sandbox ${src.id} shares a pool VM with other sandboxes and cannot be ${what}`);
    // A sandbox holding secrets has them in its RAM: no snapshot may carry them to disk.
    if (this.d.table.secrets.has(src.id))
      throw conflict(`sandbox ${src.id} holds secrets, which a snapshot would write to disk in its memory image; it cannot be ${what} (${EGRESS_HINT})`);
    // A copy would share the volume's one filesystem with its parent: two writers corrupt it.
    if (src.volumes?.length)
      throw conflict(
        `sandbox ${src.id} mounts volume ${src.volumes.map((v) => `${v.name} at ${v.path}`).join(", ")}; a copy cannot share it, so it cannot be ${what} (copy the data into the sandbox's own disk first)`,
      );
  }
}

/** Forgets a snapshot of a sandbox that runs on; its disk link stays if its overlay may be backed by it (Snapshots.abort). */
export async function abandon(
  d: { readonly snaps: Pick<Snapshots, "abort">; readonly sandboxes: Pick<SandboxStore, "update"> },
  snap: SnapshotRow,
  sandboxId: string,
): Promise<void> {
  if (await d.snaps.abort(snap, true)) d.sandboxes.update(sandboxId, { snapshot_id: snap.id });
}

/** What a fork's child VM is: its parent's machine, its own id and hostname, restored from `restore`. */
function childSpec(src: SandboxRow, row: SandboxRow, opts: ForkOptions, restore: RestoreSource): VmSpec {
  // The parent's processes run on in each child, which adopts them (guest/adopt.ts).
  return {
    id: row.id,
    memoryMb: src.memory_mb,
    vcpus: src.vcpus,
    hostname: row.id,
    nic: hasNic(src.network),
    forkable: !!opts.forkable,
    restore: { ...restore, keepProcesses: true },
  };
}

/** Stops the VMs a copy started that were never handed out as sandboxes. */
async function stopStarted(results: PromiseSettledResult<Vm>[]): Promise<void> {
  await Promise.all(results.map((r) => (r.status === "fulfilled" ? r.value.destroy().catch(ignore("stopped already")) : null)));
}
