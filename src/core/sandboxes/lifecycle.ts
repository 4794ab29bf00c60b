// A sandbox's life after its VM is up: handed out as running (admit), failed (recordFailure),
// destroyed, and its console log kept for its history.
import { copyFile, mkdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import type { LocalImage } from "../../images/store.js";
import { BootError, volumeSerial, type Vm } from "../../providers/provider.js";
import type { NetworkRecord, SandboxRow } from "../../store/sandboxes.js";
import type { SandboxStore } from "../../store/sandboxes.js";
import type { EventBus } from "../events.js";
import { NO_NETWORK, type Networks } from "../network.js";
import type { HostDirs } from "../host-dirs/host-dirs.js";
import { forwardOf, type Forwards } from "../guest/forwards.js";
import type { Snapshots } from "../snapshots/snapshots.js";
import type { MetricsSampler } from "../metrics/sampler.js";
import type { TenantPool } from "../pools/tenant-pool.js";
import type { DiskSpace } from "../host/disk-space.js";
import type { SandboxTable } from "./table.js";
import type { Paths } from "../../config/paths.js";
import { badRequest, ForgevmError, sandboxGone } from "../../http/errors.js";
import { execDefaults } from "./exec-defaults.js";
import { Sandbox } from "../guest/sandbox.js";
import { injectSecretFiles, type PlannedSecrets } from "./secrets.js";
import { startMain } from "./main-process.js";
import { ignore } from "../../util/ignore.js";

/** What the start and the end of a sandbox touch: its row and run-time state, its network and host directories, its metrics, its pool VM, and the snapshots it may have kept. */
export interface LifecycleDeps {
  readonly paths: Paths;
  readonly sandboxes: SandboxStore;
  readonly table: SandboxTable;
  readonly events: EventBus;
  readonly networks: Pick<Networks, "attach" | "detach">;
  readonly hostDirs: Pick<HostDirs, "attach" | "forget">;
  readonly forwards: Pick<Forwards, "attach" | "forget">;
  readonly snaps: Pick<Snapshots, "collect">;
  readonly sampler: Pick<MetricsSampler, "forget">;
  readonly tenants: Pick<TenantPool, "leave"> | null;
  readonly disk: Pick<DiskSpace, "write" | "waitsFor">;
}

/** Hands started VMs out as running sandboxes, watches them, and ends them (destroyed or failed). */
export class Lifecycle {
  constructor(private readonly d: LifecycleDeps) {}

  /** Hands a started VM out as a running sandbox, unless it was destroyed meanwhile. */
  async admit(row: SandboxRow, vm: Vm, image: LocalImage | null, origin: string, secrets: PlannedSecrets | null = null): Promise<Sandbox> {
    // Destroyed while starting (a DELETE, or shutdown): stop the VM instead of handing it out.
    if (this.d.sandboxes.get(row.id)?.state !== "creating" || this.d.table.closed) {
      await vm.destroy();
      throw new ForgevmError("CONFLICT", `sandbox ${row.id} was destroyed while it was starting`);
    }
    let network: NetworkRecord;
    try {
      network = await this.d.networks.attach(row.id, vm, row.network ?? NO_NETWORK);
      if (secrets) await injectSecretFiles(vm, secrets.files);
      // Its volumes, mounted by the disks' serials (again after a resume: already there, no harm).
      for (const [i, m] of (row.volumes ?? []).entries()) {
        await vm.guest.request<"mount">({ op: "mount", serial: volumeSerial(i), path: m.path, readonly: m.read_only }).catch((e: Error) => {
          throw badRequest(`volumes: ${m.name} could not be mounted at ${m.path}: ${e.message}`);
        });
      }
    } catch (e) {
      await this.d.networks.detach(row.id);
      await vm.destroy();
      throw e;
    }
    const sb = new Sandbox(row.id, row.image, vm, (s) => this.destroy(s.id), this.d.events.emit, {
      ...execDefaults(image, row.env, row.exec_user, network),
      ...(secrets ? { secrets: secrets.env } : {}),
    });
    try {
      // As Docker's runtime does: an image's working directory that is not there is made.
      const workdir = image?.config?.WorkingDir;
      if (workdir?.startsWith("/") && workdir !== "/" && !row.vm_id) await sb.mkdir(workdir).catch(ignore("the work directory may exist; exec reports a missing one"));
      for (const m of row.host_dirs ?? []) await this.d.hostDirs.attach(sb, m);
      await this.d.forwards.attach(sb, forwardOf(row));
    } catch (e) {
      this.d.hostDirs.forget(row.id);
      this.d.forwards.forget(row.id);
      await this.d.networks.detach(row.id);
      await vm.destroy();
      throw e;
    }
    this.d.table.admit(sb, secrets);
    this.watch(sb);
    this.d.sandboxes.setNetwork(row.id, network);
    this.d.sandboxes.update(row.id, { state: "running", vm_pid: vm.info.pid, vm_dir: vm.info.dir, origin });
    this.d.events.emit("sandbox.running", row.id, { boot_ms: vm.info.bootMs, accel: vm.info.accel, origin });
    // A restored guest may hold processes its last server left running (a pause resumed by
    // another server, a snapshot or a fork): they are this sandbox's again, its main process among them.
    const adopted = vm.info.restored ? await sb.adoptProcesses().catch(() => []) : [];
    await startMain(this.d, sb, adopted);
    return sb;
  }

  /** A sandbox that failed to start: `error`, with the reason (and the console of a boot that failed), announced. */
  async recordFailure(id: string, e: unknown): Promise<void> {
    if (this.d.sandboxes.get(id)?.state !== "creating") return;
    const reason = (e as Error).message;
    const end = { state: "error" as const, error: reason, destroyed_at: new Date().toISOString(), end_reason: "failed", ended_by: "server" };
    this.d.disk.write(id, `sandbox ${id} failed`, () => this.d.sandboxes.update(id, end));
    if (this.d.disk.waitsFor(id)) this.d.sandboxes.showUnwritten(id, end);
    if (e instanceof BootError && e.consoleTail) await keepText(this.d.paths, id, e.consoleTail);
    this.d.events.emit("sandbox.error", id, { error: reason.split("\n")[0] });
  }

  /**
   * Watches a running sandbox's VM: when its agent channel closes or its VMM exits without anyone
   * destroying it (a guest that broke the protocol, a VMM killed from outside), the sandbox
   * becomes `error` with the reason and is cleaned up as any failed sandbox.
   */
  watch(sb: Sandbox): void {
    const vm = sb.vm;
    const fail = (reason: string) => {
      if (this.d.table.live.get(sb.id) !== sb || this.d.table.closed || sb.vm !== vm) return;
      void this.teardown(sb.id, { state: "error", error: reason }).catch(ignore("teardown records its own failure on the row"));
    };
    // A channel outlives its VM across pauses: watched once, whichever VM it then serves.
    if (!watchedChannels.has(vm.guest)) {
      watchedChannels.add(vm.guest);
      vm.guest.once("close", (e: Error) => {
        if (this.d.table.live.get(sb.id) === sb && !this.d.table.closed)
          void this.teardown(sb.id, { state: "error", error: `the sandbox's agent channel closed: ${e.message}` }).catch(ignore("teardown records its own failure on the row"));
      });
    }
    void vm.exited.then(() => fail("the VM stopped: its VMM exited"));
  }

  /**
   * Ends as `error` the sandboxes this process runs whose VM is gone without their row saying so
   * (the disk was full when the VM's end was to be written): each says why.
   */
  async markLost(reason: string): Promise<void> {
    for (const row of this.d.sandboxes.list(["running"])) {
      if (row.manager_pid !== process.pid || this.d.table.live.has(row.id) || this.d.table.destroying.has(row.id) || this.d.disk.waitsFor(row.id)) continue;
      this.d.sandboxes.update(row.id, { state: "error", error: reason, destroyed_at: new Date().toISOString(), end_reason: "failed", ended_by: "server" });
      this.d.events.emit("sandbox.error", row.id, { error: reason });
    }
  }

  /** Stops a sandbox and removes its files; idempotent for sandboxes that existed. */
  destroy(id: string, ending: Ending = { reason: "request", by: "api" }): Promise<void> {
    const pending = this.d.table.destroying.get(id);
    if (pending) return pending;
    const row = this.d.sandboxes.get(id);
    if (!row) throw sandboxGone(id, `sandbox ${id} not found`);
    if (row.state === "destroyed" || row.state === "error") return Promise.resolve();
    return this.teardown(id, { state: "destroyed", ending });
  }

  /** Ends a live sandbox as `destroyed` or `error`: row first, then its network, secrets and VM. */
  private teardown(id: string, end: { state: "destroyed"; ending: Ending } | { state: "error"; error: string }): Promise<void> {
    const pending = this.d.table.destroying.get(id);
    if (pending) return pending;
    const row = this.d.sandboxes.get(id);
    // An end a full disk keeps from the store has happened all the same.
    if (!row || row.state === "destroyed" || row.state === "error" || this.d.disk.waitsFor(id)) return Promise.resolve();
    return this.d.table.destroyOnce(id, async () => {
      // Marked first so that a spawn completing, the reaper or the VM's watcher see it at once;
      // on a full disk the row is written once there is room, and the rest goes on now.
      const ending: Ending = end.state === "error" ? { reason: "failed", by: "server" } : end.ending;
      const mark = {
        state: end.state,
        destroyed_at: new Date().toISOString(),
        end_reason: ending.reason,
        ended_by: ending.by,
        ...(end.state === "error" ? { error: end.error } : {}),
      };
      this.d.disk.write(id, `sandbox ${id} ${end.state}`, () => this.d.sandboxes.update(id, mark));
      if (this.d.disk.waitsFor(id)) this.d.sandboxes.showUnwritten(id, mark);
      const asleep = this.d.table.sleeping.get(id);
      const sb = this.d.table.live.get(id) ?? asleep;
      this.d.table.mains.get(id)?.dispose();
      this.d.table.end(id);
      // The console log outlives the VM directory, until the row's history is pruned.
      if (row.vm_dir) await keepConsoleLog(this.d.paths, id, row.vm_dir);
      await this.d.networks.detach(id);
      this.d.hostDirs.forget(id);
      this.d.forwards.forget(id);
      this.d.sampler.forget(id);
      if (row.vm_id) await this.d.tenants?.leave(id);
      else if (sb) {
        // What it wrote to its volumes must reach their files before the VM goes (a hung guest gets 5 s).
        if (row.volumes?.length && end.state === "destroyed" && !asleep)
          await Promise.race([sb.sync().catch(ignore("the guest may be gone; the volume's journal covers it")), sleep(5000)]);
        await sb.vm.destroy();
        // A paused sandbox's channel waited for a resume that will not come: its streams end.
        sb.vm.guest.close();
      }
      if (end.state === "error") this.d.events.emit("sandbox.error", id, { error: end.error.split("\n")[0] });
      else this.d.events.emit(ending.reason === "ttl" ? "sandbox.expired" : "sandbox.destroyed", id, { reason: ending.reason, by: ending.by });
      if (row.snapshot_id) await this.d.snaps.collect().catch(ignore("collection runs again at the next end"));
    });
  }
}

const watchedChannels = new WeakSet<object>();

/**
 * Why a sandbox ended, as its record keeps it: a user's `request`, its `ttl`, Daytona's
 * `auto-delete`, the end of the MCP `session end` that made it, a `server stop` whose config says
 * to destroy, or `failed` (state error, or made by a call that failed).
 */
export type EndReason = "request" | "ttl" | "auto-delete" | "session end" | "server stop" | "failed";

/** Why a sandbox is destroyed and who asked: an interface (`rest`, `e2b`, `daytona`, `mcp`, `cli`, …) or `server`. */
export interface Ending {
  reason: EndReason;
  by: string;
}

/** The last `lines` lines of a sandbox's serial console (kept after destroy, with its history). */
export async function logs(paths: Paths, row: SandboxRow, lines: number): Promise<string[]> {
  const live = row.vm_dir && (row.state === "running" || row.state === "creating");
  const file = live ? join(row.vm_dir!, "console.log") : keptLogPath(paths, row.id);
  const text = await readFile(file, "utf8").catch(() => "");
  return text
    .replace(/\r/g, "")
    .split("\n")
    .filter((l) => l.length)
    .slice(-lines);
}

export function keptLogPath(paths: Paths, id: string): string {
  return join(paths.dataDir, "logs", `${id}.console.log`);
}

/** Copies a VM's console log to where it outlives the VM directory. */
export async function keepConsoleLog(paths: Paths, id: string, vmDir: string): Promise<void> {
  await mkdir(join(paths.dataDir, "logs"), { recursive: true });
  await copyFile(join(vmDir, "console.log"), keptLogPath(paths, id)).catch(ignore("a sandbox without a console log still ends"));
}

async function keepText(paths: Paths, id: string, text: string): Promise<void> {
  await mkdir(join(paths.dataDir, "logs"), { recursive: true });
  await writeFile(keptLogPath(paths, id), text, { mode: 0o600 }).catch(ignore("a sandbox without a console log still ends"));
}
