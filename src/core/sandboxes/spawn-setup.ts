// What every way of making a VM for a spawn shares: whether spawns use base snapshots, the
// readying of a VM whose snapshot becomes a base (a template's setup commands, the page cache),
// and how a spawn pulls an image it names. Used by spawn.ts and pool-mode.ts alike.
import type { Provider, Vm } from "../../providers/provider.js";
import type { NetworkRecord } from "../../store/sandboxes.js";
import { NO_NETWORK, type Networks } from "../network.js";
import type { EgressProxy } from "../../net/egress-proxy.js";
import type { ForgeOptions } from "../options.js";
import { badRequest } from "../../http/errors.js";
import { execDefaults } from "./exec-defaults.js";
import type { SpawnPlan } from "./plan.js";
import { Sandbox } from "../guest/sandbox.js";
import { ignore } from "../../util/ignore.js";

/** What readying a base takes: the networks (setup commands get the template's allowlist) and the egress log of the setup VM. */
export interface SetupDeps {
  readonly networks: Networks;
  readonly egress: Pick<EgressProxy, "removeLog">;
}

/** Base snapshots are used unless the config turned them off or the provider (the default one: base snapshots are its) cannot take them. */
export function useBaseSnapshots(core: { readonly opts: Pick<ForgeOptions, "baseSnapshots">; readonly provider: Provider }, provider = core.provider): boolean {
  return core.opts.baseSnapshots !== false && provider === core.provider && provider.features.snapshots;
}

/**
 * Readies a VM whose snapshot becomes an image's (or template's) base: the template's setup, then
 * Python's start-up files read into the guest's page cache, which the snapshot keeps — a code
 * context in any sandbox restored from it then starts without waiting on the disk (1.4 s → 0.8 s
 * under emulation). An image without Python fails that step at once, which is fine.
 */
export async function prepareBase(core: SetupDeps, vm: Vm, p: SpawnPlan): Promise<void> {
  await runSetup(core, vm, p);
  await vm.guest
    .execBuffered({ argv: ["python3", "-c", "import ast, base64, io, json, signal, traceback"], timeout_ms: 60_000 }, { maxOutputBytes: 4096 })
    .catch(ignore("an image without Python: nothing to warm"));
}

/** How long a system image's boot may take to settle before a spawn goes on without waiting (TCG: seconds). */
const SYSTEM_SETTLE_MS = 120_000;

/**
 * Runs a template's setup commands; the first that fails fails the spawn. A system image's VM
 * first waits for systemd to finish starting its units: the agent answers early (it is ordered
 * before sysinit.target), and a base snapshot should hold a system that is up, not one half way.
 * A unit that fails leaves the system "degraded", which a spawn accepts, as a host's boot does.
 */
export async function runSetup(core: SetupDeps, vm: Vm, p: SpawnPlan): Promise<void> {
  if (p.init === "systemd") {
    await vm.guest
      .execBuffered({ argv: ["systemctl", "is-system-running", "--wait"], timeout_ms: SYSTEM_SETTLE_MS }, { maxOutputBytes: 4096 })
      .catch(ignore("systemd still starting: the sandbox is usable meanwhile"));
  }
  const setup = p.template?.setup ?? [];
  if (!setup.length) return;
  // Setup commands get the template's allowlist (e.g. `pip install` through @pypi), logged
  // under the setup VM's id; the network is taken down before the VM is frozen.
  const allow = p.template?.allowed_hosts ?? [];
  const network: NetworkRecord = allow.length ? { mode: "allowlist", allow, ports: [] } : NO_NETWORK;
  await core.networks.attach(vm.info.id, vm, network);
  try {
    const sb = new Sandbox(
      vm.info.id,
      p.image.name,
      vm,
      async () => {},
      () => {},
      execDefaults(p.image, p.env, p.execUser, network),
    );
    for (const [i, cmd] of setup.entries()) {
      const r = await sb.exec(cmd, { timeoutMs: 10 * 60_000 }).catch((e: Error) => ({ exitCode: -1, stderr: e.message }));
      if (r.exitCode !== 0) {
        throw badRequest(`template setup command ${i + 1} (${cmd}) failed with exit code ${r.exitCode}: ${r.stderr.trim().split("\n").slice(-3).join(" / ")}`);
      }
    }
  } finally {
    await core.networks.detach(vm.info.id);
    await core.egress.removeLog(vm.info.id); // the setup VM has no row whose history would keep it
  }
}
