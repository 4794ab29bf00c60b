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
import type { NetworkRecord, SandboxRow } from "../../store/sandboxes.js";
import { NO_NETWORK, type Core } from "../core.js";
import { execDefaults } from "./exec-defaults.js";
import { destroy, watch } from "./lifecycle.js";
import { isNodeProcess } from "../host/owner.js";
import { Sandbox } from "../guest/sandbox.js";
import { lifeAfterWake, resume } from "./pause.js";
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

/** Re-attaches or cleans up the sandboxes a dead server left, and sweeps VMs without a row. */
export async function reconcile(core: Core): Promise<TakeBackReport> {
  const report: TakeBackReport = { reattached: [], resumed: [], failed: [] };
  const rows = core.sandboxes
    .list(["creating", "running"])
    .filter((row) => !core.table.live.has(row.id) && !(row.manager_pid && row.manager_pid !== process.pid && isNodeProcess(row.manager_pid)));
  await inTurn(rows, async (row) => {
    const took = await takeBack(core, row);
    if (typeof took === "number") report.reattached.push({ id: row.id, processes: took });
    else report.failed.push({ id: row.id, error: took.error });
  });
  // VMs without a sandbox row (warm pool, pool mode, base snapshot builds) of a server that is gone.
  const keep = new Set([...core.table.live.values()].map((sb) => sb.vm.info.id));
  for (const p of core.providers.all()) await p.sweepOrphans(keep, async (pid) => isNodeProcess(pid));
  return report;
}

/** Resumes the sandboxes the last server paused as it stopped (server.on_stop: pause). */
export async function resumeServerPaused(core: Core, report: TakeBackReport): Promise<void> {
  await inTurn(
    core.sandboxes.list(["paused"]).filter((r) => r.paused_reason === "server"),
    async (row) => {
      if (core.closed) return;
      try {
        await resume(core, row.id, lifeAfterWake(core, row), "paused", "server start");
        report.resumed.push(row.id);
      } catch (e) {
        // It stays paused, on disk, as it was: a call resumes it later, or says why it cannot.
        core.events.emit("sandbox.pause_failed", row.id, { reason: "server start", error: (e as Error).message.split("\n")[0] });
      }
    },
    4,
  );
}

/** Takes one running sandbox back: the number of processes it had running, or why it could not be. */
async function takeBack(core: Core, row: SandboxRow): Promise<number | { error: string }> {
  const provider = core.providers.of(row);
  if (row.state === "running" && row.vm_pid && row.vm_dir && provider.features.reattach) {
    try {
      const vm = await provider.attach({ id: row.id, pid: row.vm_pid, dir: row.vm_dir, memoryMb: row.memory_mb, vcpus: row.vcpus });
      const image = await resolveImage(core.paths, row.image).catch(() => null);
      const network = await reattachNetwork(core, row, vm);
      const sb = new Sandbox(row.id, row.image, vm, (s) => destroy(core, s.id), core.events.emit, execDefaults(image, row.env, row.exec_user, network));
      const lastActive = Date.parse(row.last_active_at ?? "");
      if (Number.isFinite(lastActive)) sb.lastActive = Math.min(lastActive, Date.now());
      core.table.admit(sb);
      watch(core, sb);
      // The guest dropped its host directories with the old server's streams: mounted again.
      for (const m of row.host_dirs ?? []) await core.hostDirs.attach(sb, m).catch(ignore("a host directory gone since the crash: the sandbox runs without it"));
      core.sandboxes.update(row.id, { manager_pid: process.pid, last_active_at: null });
      const adopted = await sb.adoptProcesses().catch(() => []);
      core.events.emit("sandbox.reattached", row.id, { pid: row.vm_pid, processes: adopted.filter((p) => p.running).length });
      await takeBackMain(core, sb, row, adopted);
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
  core.sandboxes.update(row.id, { state: "error", error: reason, destroyed_at: new Date().toISOString(), end_reason: "failed", ended_by: "server" });
  core.events.emit("sandbox.error", row.id, { error: reason });
  return { error: reason };
}

/**
 * A re-attached sandbox's main process: the one the guest kept is adopted, running or ended
 * meanwhile (startMain). An agent without `adopt` kept none: its restart policy says whether it
 * runs again, and otherwise its end is recorded.
 */
async function takeBackMain(core: Core, sb: Sandbox, row: SandboxRow, adopted: TrackedProcess[]): Promise<void> {
  const m = row.main;
  if (!m) return;
  if (adopted.some((p) => p.spec.tag === MAIN_TAG) || (m.restart !== "no" && !m.stopped_by_user)) await startMain(core, sb, adopted);
  else if (m.finished_at === null) core.sandboxes.setMain(row.id, { ...m, finished_at: new Date().toISOString() });
}

/** A re-attached sandbox's network; a published port taken meanwhile is dropped and reported. */
async function reattachNetwork(core: Core, row: SandboxRow, vm: Vm): Promise<NetworkRecord> {
  const want = row.network ?? NO_NETWORK;
  try {
    return await core.networks.attach(row.id, vm, want);
  } catch (e) {
    core.events.emit("sandbox.error", row.id, { error: `after restart: ${(e as Error).message}; its published ports were dropped` });
    const net = await core.networks.attach(row.id, vm, { ...want, ports: [] });
    core.sandboxes.setNetwork(row.id, net);
    return net;
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
