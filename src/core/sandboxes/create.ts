// `create`, as Docker's: a sandbox defined (checked, its image pulled, its name taken) but not
// started, costing nothing until `start` boots it with the options it was created with.
import type { Core } from "../core.js";
import { badRequest, ForgevmError, sandboxGone } from "../../http/errors.js";
import { admit, recordFailure } from "./lifecycle.js";
import type { SpawnOptions } from "../options.js";
import { newRow, plan } from "./plan.js";
import type { Sandbox } from "../guest/sandbox.js";
import type { Pull } from "./spawn-setup.js";
import { startVm } from "./spawn.js";
import { requireState } from "./states.js";
import type { SandboxRow } from "../../store/sandboxes.js";
import { expiryAfter, NO_TTL } from "../../schemas/durations.js";

/** Defines a sandbox without starting it; `startCreated` boots it. */
export async function create(core: Core, opts: SpawnOptions, pull: Pull): Promise<SandboxRow> {
  if (core.closed) throw new ForgevmError("UNAVAILABLE", "the server is shutting down");
  if (opts.secrets && Object.keys(opts.secrets).length)
    throw badRequest("secrets cannot be given to a sandbox that is created but not started: they are never stored; spawn it instead");
  if (core.tenants && opts.template === undefined) throw badRequest("this server runs sandboxes in shared pool VMs, which cannot be created ahead of starting");
  const p = await plan(core, opts, pull);
  // JSON has no Infinity: a TTL of none is kept as 0, which no TTL can otherwise be.
  const spec = JSON.stringify({ ...opts, ...(opts.ttlMs === NO_TTL ? { ttlMs: 0 } : {}) });
  const row: SandboxRow = { ...newRow(core, p, opts), state: "created", spec, manager_pid: null };
  core.sandboxes.insert(row);
  core.events.emit("sandbox.created", row.id, { image: row.image, memory_mb: row.memory_mb, vcpus: row.vcpus, started: false });
  return row;
}

/** Boots a created sandbox with the options it was created with; it lives `ttlMs` (else its own TTL) from now. */
export async function startCreated(core: Core, id: string, ttlMs: number | undefined, pull: Pull): Promise<Sandbox> {
  const row = core.sandboxes.get(id);
  if (!row) throw sandboxGone(id, `sandbox ${id} not found`);
  requireState(row, "start");
  if (row.state !== "created" || !row.spec) throw new ForgevmError("CONFLICT", `sandbox ${id} is ${row.state}, not created`);
  const opts = JSON.parse(row.spec) as SpawnOptions;
  if (opts.ttlMs === 0) opts.ttlMs = NO_TTL;
  // Its name is its own already: the plan must not find it taken.
  const p = await plan(core, { ...opts, name: undefined }, pull, id);
  const life = ttlMs ?? opts.ttlMs ?? p.ttlMs;
  const fresh = newRow(core, p, opts, id);
  core.sandboxes.update(id, { state: "creating", expires_at: expiryAfter(life), manager_pid: process.pid });
  core.sandboxes.setNetwork(id, fresh.network);
  try {
    const { vm, origin } = await startVm(core, id, p, opts);
    return await admit(core, { ...row, network: fresh.network, state: "creating" }, vm, p.image, origin, null);
  } catch (e) {
    await recordFailure(core, id, e);
    throw e;
  }
}
