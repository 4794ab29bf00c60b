// A sandbox's life after its VM is up: handed out as running (admit), failed (recordFailure),
// destroyed, and its console log kept for its history.
import { copyFile, mkdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import type { LocalImage } from "../../images/store.js";
import { BootError, volumeSerial, type Vm } from "../../providers/provider.js";
import type { NetworkRecord, SandboxRow } from "../../store/sandboxes.js";
import { NO_NETWORK, type Core } from "../core.js";
import { badRequest, ForgevmError, sandboxGone } from "../../http/errors.js";
import { execDefaults } from "./exec-defaults.js";
import { Sandbox } from "../guest/sandbox.js";
import { injectSecretFiles, type PlannedSecrets } from "./secrets.js";
import { startMain } from "./main-process.js";
import { ignore } from "../../util/ignore.js";

/** Hands a started VM out as a running sandbox, unless it was destroyed meanwhile. */
export async function admit(core: Core, row: SandboxRow, vm: Vm, image: LocalImage | null, origin: string, secrets: PlannedSecrets | null = null): Promise<Sandbox> {
  // Destroyed while starting (a DELETE, or shutdown): stop the VM instead of handing it out.
  if (core.sandboxes.get(row.id)?.state !== "creating" || core.closed) {
    await vm.destroy();
    throw new ForgevmError("CONFLICT", `sandbox ${row.id} was destroyed while it was starting`);
  }
  let network: NetworkRecord;
  try {
    network = await core.networks.attach(row.id, vm, row.network ?? NO_NETWORK);
    if (secrets) await injectSecretFiles(vm, secrets.files);
    // Its volumes, mounted by the disks' serials (again after a resume: already there, no harm).
    for (const [i, m] of (row.volumes ?? []).entries()) {
      await vm.channel.request<"mount">({ op: "mount", serial: volumeSerial(i), path: m.path, readonly: m.read_only }).catch((e: Error) => {
        throw badRequest(`volumes: ${m.name} could not be mounted at ${m.path}: ${e.message}`);
      });
    }
  } catch (e) {
    await core.networks.detach(row.id);
    await vm.destroy();
    throw e;
  }
  const sb = new Sandbox(row.id, row.image, vm, (s) => destroy(core, s.id), core.events.emit, {
    ...execDefaults(image, row.env, row.exec_user, network),
    ...(secrets ? { secrets: secrets.env } : {}),
  });
  try {
    // As Docker's runtime does: an image's working directory that is not there is made.
    const workdir = image?.config?.WorkingDir;
    if (workdir?.startsWith("/") && workdir !== "/" && !row.vm_id) await sb.mkdir(workdir).catch(ignore("the work directory may exist; exec reports a missing one"));
    for (const m of row.host_dirs ?? []) await core.hostDirs.attach(sb, m);
  } catch (e) {
    core.hostDirs.forget(row.id);
    await core.networks.detach(row.id);
    await vm.destroy();
    throw e;
  }
  core.table.admit(sb, secrets);
  watch(core, sb);
  core.sandboxes.setNetwork(row.id, network);
  core.sandboxes.update(row.id, { state: "running", vm_pid: vm.info.pid, vm_dir: vm.info.dir, origin });
  core.events.emit("sandbox.running", row.id, { boot_ms: vm.info.bootMs, accel: vm.info.accel, origin });
  // A restored guest may hold processes its last server left running (a pause resumed by
  // another server, a snapshot or a fork): they are this sandbox's again, its main process among them.
  const adopted = vm.info.restored ? await sb.adoptProcesses().catch(() => []) : [];
  await startMain(core, sb, adopted);
  return sb;
}

/** A sandbox that failed to start: `error`, with the reason (and the console of a boot that failed), announced. */
export async function recordFailure(core: Core, id: string, e: unknown): Promise<void> {
  if (core.sandboxes.get(id)?.state !== "creating") return;
  const reason = (e as Error).message;
  const end = { state: "error" as const, error: reason, destroyed_at: new Date().toISOString(), end_reason: "failed", ended_by: "server" };
  core.disk.write(id, `sandbox ${id} failed`, () => core.sandboxes.update(id, end));
  if (core.disk.waitsFor(id)) core.sandboxes.showUnwritten(id, end);
  if (e instanceof BootError && e.consoleTail) await keepText(core, id, e.consoleTail);
  core.events.emit("sandbox.error", id, { error: reason.split("\n")[0] });
}

/**
 * Watches a running sandbox's VM: when its agent channel closes or its VMM exits without anyone
 * destroying it (a guest that broke the protocol, a VMM killed from outside), the sandbox
 * becomes `error` with the reason and is cleaned up as any failed sandbox.
 */
export function watch(core: Core, sb: Sandbox): void {
  const vm = sb.vm;
  const fail = (reason: string) => {
    if (core.table.live.get(sb.id) !== sb || core.closed || sb.vm !== vm) return;
    void teardown(core, sb.id, { state: "error", error: reason }).catch(ignore("teardown records its own failure on the row"));
  };
  // A channel outlives its VM across pauses: watched once, whichever VM it then serves.
  if (!watchedChannels.has(vm.channel)) {
    watchedChannels.add(vm.channel);
    vm.channel.once("close", (e: Error) => {
      if (core.table.live.get(sb.id) === sb && !core.closed)
        void teardown(core, sb.id, { state: "error", error: `the sandbox's agent channel closed: ${e.message}` }).catch(ignore("teardown records its own failure on the row"));
    });
  }
  void vm.exited.then(() => fail("the VM stopped: its VMM exited"));
}

const watchedChannels = new WeakSet<object>();

/**
 * Ends as `error` the sandboxes this process runs whose VM is gone without their row saying so
 * (the disk was full when the VM's end was to be written): each says why.
 */
export async function markLost(core: Core, reason: string): Promise<void> {
  for (const row of core.sandboxes.list(["running"])) {
    if (row.manager_pid !== process.pid || core.table.live.has(row.id) || core.table.destroying.has(row.id) || core.disk.waitsFor(row.id)) continue;
    core.sandboxes.update(row.id, { state: "error", error: reason, destroyed_at: new Date().toISOString(), end_reason: "failed", ended_by: "server" });
    core.events.emit("sandbox.error", row.id, { error: reason });
  }
}

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

/** Stops a sandbox and removes its files; idempotent for sandboxes that existed. */
export function destroy(core: Core, id: string, ending: Ending = { reason: "request", by: "api" }): Promise<void> {
  const pending = core.table.destroying.get(id);
  if (pending) return pending;
  const row = core.sandboxes.get(id);
  if (!row) throw sandboxGone(id, `sandbox ${id} not found`);
  if (row.state === "destroyed" || row.state === "error") return Promise.resolve();
  return teardown(core, id, { state: "destroyed", ending });
}

/** Ends a live sandbox as `destroyed` or `error`: row first, then its network, secrets and VM. */
function teardown(core: Core, id: string, end: { state: "destroyed"; ending: Ending } | { state: "error"; error: string }): Promise<void> {
  const pending = core.table.destroying.get(id);
  if (pending) return pending;
  const row = core.sandboxes.get(id);
  // An end a full disk keeps from the store has happened all the same.
  if (!row || row.state === "destroyed" || row.state === "error" || core.disk.waitsFor(id)) return Promise.resolve();
  return core.table.destroyOnce(id, async () => {
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
    core.disk.write(id, `sandbox ${id} ${end.state}`, () => core.sandboxes.update(id, mark));
    if (core.disk.waitsFor(id)) core.sandboxes.showUnwritten(id, mark);
    const asleep = core.table.sleeping.get(id);
    const sb = core.table.live.get(id) ?? asleep;
    core.table.mains.get(id)?.dispose();
    core.table.end(id);
    // The console log outlives the VM directory, until the row's history is pruned.
    if (row.vm_dir) await keepConsoleLog(core, id, row.vm_dir);
    await core.networks.detach(id);
    core.hostDirs.forget(id);
    core.sampler.forget(id);
    if (row.vm_id) await core.tenants?.leave(id);
    else if (sb) {
      // What it wrote to its volumes must reach their files before the VM goes (a hung guest gets 5 s).
      if (row.volumes?.length && end.state === "destroyed" && !asleep)
        await Promise.race([sb.sync().catch(ignore("the guest may be gone; the volume's journal covers it")), sleep(5000)]);
      await sb.vm.destroy();
      // A paused sandbox's channel waited for a resume that will not come: its streams end.
      sb.vm.channel.close();
    }
    if (end.state === "error") core.events.emit("sandbox.error", id, { error: end.error.split("\n")[0] });
    else core.events.emit(ending.reason === "ttl" ? "sandbox.expired" : "sandbox.destroyed", id, { reason: ending.reason, by: ending.by });
    if (row.snapshot_id) await core.snaps.collect().catch(ignore("collection runs again at the next end"));
  });
}

/** The last `lines` lines of a sandbox's serial console (kept after destroy, with its history). */
export async function logs(core: Core, row: SandboxRow, lines: number): Promise<string[]> {
  const live = row.vm_dir && (row.state === "running" || row.state === "creating");
  const file = live ? join(row.vm_dir!, "console.log") : keptLogPath(core, row.id);
  const text = await readFile(file, "utf8").catch(() => "");
  return text
    .replace(/\r/g, "")
    .split("\n")
    .filter((l) => l.length)
    .slice(-lines);
}

export function keptLogPath(core: Core, id: string): string {
  return join(core.paths.dataDir, "logs", `${id}.console.log`);
}

/** Copies a VM's console log to where it outlives the VM directory. */
export async function keepConsoleLog(core: Core, id: string, vmDir: string): Promise<void> {
  await mkdir(join(core.paths.dataDir, "logs"), { recursive: true });
  await copyFile(join(vmDir, "console.log"), keptLogPath(core, id)).catch(ignore("a sandbox without a console log still ends"));
}

async function keepText(core: Core, id: string, text: string): Promise<void> {
  await mkdir(join(core.paths.dataDir, "logs"), { recursive: true });
  await writeFile(keptLogPath(core, id), text, { mode: 0o600 }).catch(ignore("a sandbox without a console log still ends"));
}
