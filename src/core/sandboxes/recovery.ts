// Taking back what a previous server left: it stopped (server.on_stop keep or pause), crashed or
// was upgraded. QEMU runs detached and its sockets survive, so each VM left running is
// re-attached and serves again, with the processes its agent kept detached (guest/adopt.ts),
// its main process adopted rather than started twice, its ports and egress proxy, and its idle
// timer where it was; those the stop paused are resumed. One that cannot be re-attached (QEMU
// gone, agent silent) is stopped — only a VMM whose command line names the VM's own directory,
// so an unrelated process that reused the pid is never touched — and marked `error`.
import { readFile, rm } from "node:fs/promises";
import { MAIN_TAG, startMain } from "./main-process.js";
import type { TrackedProcess } from "../guest/processes.js";
import { resolveImage } from "../../images/store.js";
import type { Vm } from "../../providers/provider.js";
import type { Paths } from "../../config/paths.js";
import type { NetworkRecord, SandboxRow, SandboxStore } from "../../store/sandboxes.js";
import type { SnapshotStore } from "../../store/snapshots.js";
import type { Providers } from "../providers.js";
import type { EventBus } from "../events.js";
import type { Networks } from "../network.js";
import type { HostDirs } from "../host-dirs/host-dirs.js";
import { forwardOf, type Forwards } from "../guest/forwards.js";
import type { SandboxTable } from "./table.js";
import type { Lifecycle } from "./lifecycle.js";
import type { Pauses } from "./pause.js";
import { NO_NETWORK } from "../network.js";
import { execDefaults } from "./exec-defaults.js";
import { isNodeProcess } from "../host/owner.js";
import { Sandbox } from "../guest/sandbox.js";
import { lifeAfterWake } from "./pause.js";
import { ignore } from "../../util/ignore.js";

/** What a start took back from the server before it. */
export interface TakeBackReport {
  /** Running sandboxes re-attached, and how many processes they had running. */
  reattached: { id: string; processes: number }[];
  /** Sandboxes the last server paused as it stopped (server.on_stop: pause), running again. */
  resumed: string[];
  /** Ones that could not be taken back, with why (they are `error` now). */
  failed: { id: string; error: string }[];
}

/** Re-attaches at most this many VMs at once (each waits for its agent's hello). */
const AT_ONCE = 8;

/** What taking sandboxes back takes: their rows, their providers (to re-attach), their network and host directories, their main processes, and their resume. */
export interface RecoveryDeps {
  readonly paths: Paths;
  readonly sandboxes: SandboxStore;
  readonly snapshotRows: Pick<SnapshotStore, "get">;
  readonly providers: Providers;
  readonly table: SandboxTable;
  readonly events: EventBus;
  readonly networks: Pick<Networks, "attach">;
  readonly hostDirs: Pick<HostDirs, "attach">;
  readonly forwards: Pick<Forwards, "attach">;
  readonly lifecycle: Pick<Lifecycle, "destroy" | "watch">;
  readonly pauses: Pick<Pauses, "resume">;
}

/** Takes back what the server before this one left running or paused. */
export class Recovery {
  constructor(private readonly d: RecoveryDeps) {}

  /** Re-attaches or cleans up the sandboxes a dead server left, and sweeps VMs without a row. */
  async reconcile(): Promise<TakeBackReport> {
    const report: TakeBackReport = { reattached: [], resumed: [], failed: [] };
    const rows = this.d.sandboxes
      .list(["creating", "running"])
      .filter((row) => !this.d.table.live.has(row.id) && !(row.manager_pid && row.manager_pid !== process.pid && isNodeProcess(row.manager_pid)));
    await inTurn(rows, async (row) => {
      const took = await this.takeBack(row);
      if (typeof took === "number") report.reattached.push({ id: row.id, processes: took });
      else report.failed.push({ id: row.id, error: took.error });
    });
    // VMs without a sandbox row (warm pool, pool mode, base snapshot builds) of a server that is gone.
    const keep = new Set([...this.d.table.live.values()].map((sb) => sb.vm.info.id));
    for (const p of this.d.providers.all()) await p.sweepOrphans(keep, async (pid) => isNodeProcess(pid));
    return report;
  }

  /** Resumes the sandboxes the last server paused as it stopped (server.on_stop: pause). */
  async resumeServerPaused(report: TakeBackReport): Promise<void> {
    await inTurn(
      this.d.sandboxes.list(["paused"]).filter((r) => r.paused_reason === "server"),
      async (row) => {
        if (this.d.table.closed) return;
        try {
          await this.d.pauses.resume(row.id, lifeAfterWake(this.d.snapshotRows, row), "paused", "server start");
          report.resumed.push(row.id);
        } catch (e) {
          // It stays paused, on disk, as it was: a call resumes it later, or says why it cannot.
          this.d.events.emit("sandbox.pause_failed", row.id, { reason: "server start", error: (e as Error).message.split("\n")[0] });
        }
      },
      4,
    );
  }

  /** Takes one running sandbox back: the number of processes it had running, or why it could not be. */
  private async takeBack(row: SandboxRow): Promise<number | { error: string }> {
    const provider = this.d.providers.of(row);
    if (row.state === "running" && row.vm_pid && row.vm_dir && provider.features.reattach) {
      try {
        const vm = await provider.attach({ id: row.id, pid: row.vm_pid, dir: row.vm_dir, memoryMb: row.memory_mb, vcpus: row.vcpus });
        const image = await resolveImage(this.d.paths, row.image).catch(() => null);
        const network = await this.reattachNetwork(row, vm);
        const sb = new Sandbox(row.id, row.image, vm, (s) => this.d.lifecycle.destroy(s.id), this.d.events.emit, execDefaults(image, row.env, row.exec_user, network));
        const lastActive = Date.parse(row.last_active_at ?? "");
        if (Number.isFinite(lastActive)) sb.lastActive = Math.min(lastActive, Date.now());
        this.d.table.admit(sb);
        this.d.lifecycle.watch(sb);
        // The guest dropped its host directories with the old server's streams: mounted again.
        for (const m of row.host_dirs ?? []) await this.d.hostDirs.attach(sb, m).catch(ignore("a host directory gone since the crash: the sandbox runs without it"));
        await this.d.forwards.attach(sb, forwardOf(row)).catch(ignore("no host agent now: the sandbox runs on without its forwarded agent"));
        this.d.sandboxes.update(row.id, { manager_pid: process.pid, last_active_at: null });
        const adopted = await sb.adoptProcesses().catch(() => []);
        this.d.events.emit("sandbox.reattached", row.id, { pid: row.vm_pid, processes: adopted.filter((p) => p.running).length });
        await this.takeBackMain(sb, row, adopted);
        return adopted.filter((p) => p.running).length;
      } catch (e) {
        row.error = (e as Error).message;
      }
    }
    if (row.vm_pid && row.vm_dir) {
      const cmd = await readFile(`/proc/${row.vm_pid}/cmdline`, "utf8").catch(() => "");
      if (cmd.includes("qemu-system") && cmd.includes(row.vm_dir)) {
        try {
          process.kill(row.vm_pid, "SIGKILL");
        } catch {
          // gone meanwhile
        }
      }
    }
    if (row.vm_dir) await rm(row.vm_dir, { recursive: true, force: true });
    const reason = row.vm_id
      ? "the server restarted: sandboxes sharing a pool VM do not survive a restart"
      : !provider.features.reattach
        ? `the server restarted: sandboxes on provider ${provider.name} end with their server`
        : `the server restarted and could not re-attach to this VM${row.error ? `: ${row.error}` : ""}`;
    this.d.sandboxes.update(row.id, { state: "error", error: reason, destroyed_at: new Date().toISOString(), end_reason: "failed", ended_by: "server" });
    this.d.events.emit("sandbox.error", row.id, { error: reason });
    return { error: reason };
  }

  /**
   * A re-attached sandbox's main process: the one the guest kept is adopted, running or ended
   * meanwhile (startMain). An agent without `adopt` kept none: its restart policy says whether it
   * runs again, and otherwise its end is recorded.
   */
  private async takeBackMain(sb: Sandbox, row: SandboxRow, adopted: TrackedProcess[]): Promise<void> {
    const m = row.main;
    if (!m) return;
    if (adopted.some((p) => p.spec.tag === MAIN_TAG) || (m.restart !== "no" && !m.stopped_by_user)) await startMain(this.d, sb, adopted);
    else if (m.finished_at === null) this.d.sandboxes.setMain(row.id, { ...m, finished_at: new Date().toISOString() });
  }

  /** A re-attached sandbox's network; a published port taken meanwhile is dropped and reported. */
  private async reattachNetwork(row: SandboxRow, vm: Vm): Promise<NetworkRecord> {
    const want = row.network ?? NO_NETWORK;
    try {
      return await this.d.networks.attach(row.id, vm, want);
    } catch (e) {
      this.d.events.emit("sandbox.error", row.id, { error: `after restart: ${(e as Error).message}; its published ports were dropped` });
      const net = await this.d.networks.attach(row.id, vm, { ...want, ports: [] });
      this.d.sandboxes.setNetwork(row.id, net);
      return net;
    }
  }
}

/** Runs `work` over `items`, at most `n` at a time. */
async function inTurn<T>(items: T[], work: (item: T) => Promise<void>, n = AT_ONCE): Promise<void> {
  const queue = [...items];
  await Promise.all(
    Array.from({ length: Math.min(n, queue.length) }, async () => {
      for (let item = queue.shift(); item !== undefined; item = queue.shift()) await work(item);
    }),
  );
}
