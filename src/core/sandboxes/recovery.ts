// After a crash. A previous ForgeVM process may have died with VMs running: QEMU runs detached
// and its sockets survive, so each such VM is re-attached and serves again. One that cannot be
// (QEMU gone, agent silent) is stopped — only a VMM whose command line names the VM's own
// directory, so an unrelated process that reused the pid is never touched — and marked `error`.
import { readFile, rm } from "node:fs/promises";
import { startMain } from "./main-process.js";
import { resolveImage } from "../../images/store.js";
import type { Vm } from "../../providers/provider.js";
import type { NetworkRecord, SandboxRow } from "../../store/sandboxes.js";
import { NO_NETWORK, type Core } from "../core.js";
import { execDefaults } from "./exec-defaults.js";
import { destroy, watch } from "./lifecycle.js";
import { isNodeProcess } from "../host/owner.js";
import { Sandbox } from "../guest/sandbox.js";
import { ignore } from "../../util/ignore.js";

/** Re-attaches or cleans up the sandboxes a dead server left, and sweeps VMs without a row. */
export async function reconcile(core: Core): Promise<void> {
  for (const row of core.sandboxes.list(["creating", "running"])) {
    if (core.live.has(row.id)) continue;
    if (row.manager_pid && row.manager_pid !== process.pid && isNodeProcess(row.manager_pid)) continue;
    const provider = core.providers.of(row);
    if (row.state === "running" && row.vm_pid && row.vm_dir && provider.features.reattach) {
      try {
        const vm = await provider.attach({ id: row.id, pid: row.vm_pid, dir: row.vm_dir, memoryMb: row.memory_mb, vcpus: row.vcpus });
        const image = await resolveImage(core.paths, row.image).catch(() => null);
        const network = await reattachNetwork(core, row, vm);
        const sb = new Sandbox(row.id, row.image, vm, (s) => destroy(core, s.id), core.events.emit, execDefaults(image, row.env, row.exec_user, network));
        core.live.set(row.id, sb);
        watch(core, sb);
        // The guest dropped its host directories with the old server's streams: mounted again.
        for (const m of row.host_dirs ?? []) await core.hostDirs.attach(sb, m).catch(ignore("a host directory gone since the crash: the sandbox runs without it"));
        core.sandboxes.update(row.id, { manager_pid: process.pid });
        core.events.emit("sandbox.reattached", row.id, { pid: row.vm_pid });
        // The main process ended with the server that ran it: its restart policy says whether it comes back.
        if (row.main && row.main.restart !== "no" && !row.main.stopped_by_user) await startMain(core, sb);
        else if (row.main && row.main.finished_at === null) core.sandboxes.setMain(row.id, { ...row.main, finished_at: new Date().toISOString() });
        continue;
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
    core.sandboxes.update(row.id, { state: "error", error: reason, destroyed_at: new Date().toISOString() });
    core.events.emit("sandbox.error", row.id, { error: reason });
  }
  // VMs without a sandbox row (warm pool, pool mode, base snapshot builds) of a server that is gone.
  const keep = new Set([...core.live.values()].map((sb) => sb.vm.info.id));
  for (const p of core.providers.all()) await p.sweepOrphans(keep, async (pid) => isNodeProcess(pid));
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
