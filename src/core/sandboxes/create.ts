// `create`, as Docker's: a sandbox defined (checked, its image pulled, its name taken) but not
// started, costing nothing until `start` boots it with the options it was created with.
import type { SandboxRow, SandboxStore } from "../../store/sandboxes.js";
import type { EventBus } from "../events.js";
import type { SandboxTable } from "./table.js";
import type { Lifecycle } from "./lifecycle.js";
import type { Planner } from "./plan.js";
import type { Spawner } from "./spawn.js";
import { badRequest, ForgevmError, sandboxGone } from "../../http/errors.js";
import type { SpawnOptions } from "../options.js";
import type { Sandbox } from "../guest/sandbox.js";
import { requireState } from "./states.js";
import { expiryAfter, NO_TTL } from "../../schemas/durations.js";

/** What a create and its later start take: the plan, the row, the VM's start, and the sandbox's admission. */
export interface CreatesDeps {
  readonly sandboxes: SandboxStore;
  readonly table: Pick<SandboxTable, "closed">;
  readonly events: EventBus;
  /** Whether the server runs sandboxes in pool mode's shared VMs (which cannot be created ahead). */
  readonly poolMode: boolean;
  readonly planner: Pick<Planner, "plan" | "newRow">;
  readonly spawner: Pick<Spawner, "startVm">;
  readonly lifecycle: Pick<Lifecycle, "admit" | "recordFailure">;
}

/** Defines sandboxes ahead of starting them, and starts them. */
export class Creates {
  constructor(private readonly d: CreatesDeps) {}

  /** Defines a sandbox without starting it; `startCreated` boots it. */
  async create(opts: SpawnOptions): Promise<SandboxRow> {
    if (this.d.table.closed) throw new ForgevmError("UNAVAILABLE", "the server is shutting down");
    if (opts.secrets && Object.keys(opts.secrets).length)
      throw badRequest("secrets cannot be given to a sandbox that is created but not started: they are never stored; spawn it instead");
    if (this.d.poolMode && opts.template === undefined) throw badRequest("this server runs sandboxes in shared pool VMs, which cannot be created ahead of starting");
    const p = await this.d.planner.plan(opts);
    // JSON has no Infinity: a TTL of none is kept as 0, which no TTL can otherwise be.
    const spec = JSON.stringify({ ...opts, ...(opts.ttlMs === NO_TTL ? { ttlMs: 0 } : {}) });
    const row: SandboxRow = { ...this.d.planner.newRow(p, opts), state: "created", spec, manager_pid: null };
    this.d.sandboxes.insert(row);
    this.d.events.emit("sandbox.created", row.id, { image: row.image, memory_mb: row.memory_mb, vcpus: row.vcpus, started: false });
    return row;
  }

  /** Boots a created sandbox with the options it was created with; it lives `ttlMs` (else its own TTL) from now. */
  async startCreated(id: string, ttlMs: number | undefined): Promise<Sandbox> {
    const row = this.d.sandboxes.get(id);
    if (!row) throw sandboxGone(id, `sandbox ${id} not found`);
    requireState(row, "start");
    if (row.state !== "created" || !row.spec) throw new ForgevmError("CONFLICT", `sandbox ${id} is ${row.state}, not created`);
    const opts = JSON.parse(row.spec) as SpawnOptions;
    if (opts.ttlMs === 0) opts.ttlMs = NO_TTL;
    // Its name is its own already: the plan must not find it taken.
    const p = await this.d.planner.plan({ ...opts, name: undefined }, id);
    const life = ttlMs ?? opts.ttlMs ?? p.ttlMs;
    const fresh = this.d.planner.newRow(p, opts, id);
    this.d.sandboxes.update(id, { state: "creating", expires_at: expiryAfter(life), manager_pid: process.pid });
    this.d.sandboxes.setNetwork(id, fresh.network);
    try {
      const { vm, origin } = await this.d.spawner.startVm(id, p, opts);
      return await this.d.lifecycle.admit({ ...row, network: fresh.network, state: "creating" }, vm, p.image, origin, null);
    } catch (e) {
      await this.d.lifecycle.recordFailure(id, e);
      throw e;
    }
  }
}
