// The providers sandboxes run on, and the pools of VMs kept ahead of demand (pool mode's shared
// VMs, warm pools, prestarted VMMs).
import { notFound } from "../../http/errors.js";
import type { ProviderFeatures, ProviderHealth } from "../../providers/provider.js";
import type { Core } from "../core.js";
import { idleReclaimState, ksmState } from "../host/host-memory.js";
import { prestartState } from "../pools/prestart.js";
import { DEFAULT_RECLAIM_AFTER_MS } from "../sandboxes/reaper.js";
import type { Pull } from "../sandboxes/spawn-setup.js";
import { configurePools } from "../sandboxes/spawn.js";

/** One provider as /providers shows it. */
export interface ProviderStatus extends ProviderHealth {
  default: boolean;
  isolation: ProviderFeatures["isolation"];
  features: ProviderFeatures;
  sandbox_count: number;
}

export class ProvidersFacade {
  constructor(private readonly core: Core) {}

  /** The default provider's name (spawns that name none run on it). */
  get defaultName(): string {
    return this.core.providers.defaultName;
  }

  /** The names of the enabled providers. */
  names(): string[] {
    return this.core.providers.names();
  }

  /** Every enabled provider: its health, whether it is the default, what isolates its sandboxes, how many run on it. */
  async list(): Promise<ProviderStatus[]> {
    const running = this.core.sandboxes.list(["creating", "running", "paused"]);
    const reclaim = {
      memory_idle_reclaim: idleReclaimState(this.core.opts.memory?.reclaimAfterMs ?? DEFAULT_RECLAIM_AFTER_MS),
      memory_ksm: await ksmState(),
      prestarted_vmms: prestartState(this.core.prestarts.status()),
    };
    return Promise.all(
      this.core.providers.all().map(async (p) => ({
        ...(await p.health().then((h) => (p.features.isolation === "vm" && p.features.snapshots ? { ...h, details: { ...h.details, ...reclaim } } : h))),
        default: p.name === this.core.providers.defaultName,
        isolation: p.features.isolation,
        features: p.features,
        sandbox_count: running.filter((r) => this.core.providers.of(r) === p).length,
      })),
    );
  }

  /** Whether a provider (default: the default one) can run sandboxes here, and what it found; 404 for one not enabled. */
  health(name?: string): Promise<ProviderHealth> {
    const p = name === undefined ? this.core.providers.default : this.core.providers.find(name);
    if (!p) throw notFound(`provider ${name} not found (enabled: ${this.core.providers.names().join(", ")})`);
    return p.health();
  }

  /** A real probe of every provider: starts a throwaway sandbox (no disk) on each and pings its agent. */
  async test(): Promise<Record<string, boolean>> {
    const out: Record<string, boolean> = {};
    for (const p of this.core.providers.all()) out[p.name] = await p.probe().catch(() => false);
    return out;
  }
}

export class PoolsFacade {
  constructor(
    private readonly core: Core,
    private readonly pull: Pull,
  ) {}

  /** Pool mode's shared VMs, warm pools and prestarted VMMs, in the shape of the REST contract. */
  status(): Record<string, unknown> {
    return { ...(this.core.tenants?.status() ?? { enabled: false }), warm: this.warm(), prestarted: this.core.prestarts.status() };
  }

  /** The warm pools: which image or template each is for, how many VMs it keeps and has ready. */
  warm(): { pool: string; size: number; ready: number; memory_mb: number }[] {
    return this.core.warm.shown();
  }

  /**
   * (Re)sizes the warm pools from the config (default spawns) and the templates' `pool_size`.
   * Resolves once the pools are set; they fill in the background.
   */
  async configure(): Promise<void> {
    return configurePools(this.core, this.pull);
  }
}
