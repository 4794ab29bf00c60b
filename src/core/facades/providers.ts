// The providers sandboxes run on, and the pools of VMs kept ahead of demand (pool mode's shared
// VMs, warm pools, prestarted VMMs).
import { notFound } from "../../http/errors.js";
import type { ProviderFeatures, ProviderHealth } from "../../providers/provider.js";
import type { SandboxStore } from "../../store/sandboxes.js";
import type { Providers } from "../providers.js";
import type { ForgeOptions } from "../options.js";
import type { TenantPool } from "../pools/tenant-pool.js";
import type { WarmPools } from "../pools/warm-pool.js";
import type { Spawner } from "../sandboxes/spawn.js";
import { idleReclaimState, ksmState } from "../host/host-memory.js";
import { prestartState, type Prestarts } from "../pools/prestart.js";
import { DEFAULT_RECLAIM_AFTER_MS } from "../sandboxes/reaper.js";

/** One provider as /providers shows it. */
export interface ProviderStatus extends ProviderHealth {
  default: boolean;
  isolation: ProviderFeatures["isolation"];
  features: ProviderFeatures;
  sandbox_count: number;
}

/** What the providers' calls read: the providers, what runs on them, and the host's memory settings. */
export interface ProvidersDeps {
  readonly opts: Pick<ForgeOptions, "memory">;
  readonly providers: Providers;
  readonly sandboxes: Pick<SandboxStore, "list">;
  readonly prestarts: Pick<Prestarts, "status">;
}

export class ProvidersFacade {
  constructor(private readonly d: ProvidersDeps) {}

  /** The default provider's name (spawns that name none run on it). */
  get defaultName(): string {
    return this.d.providers.defaultName;
  }

  /** The names of the enabled providers. */
  names(): string[] {
    return this.d.providers.names();
  }

  /** Every enabled provider: its health, whether it is the default, what isolates its sandboxes, how many run on it. */
  async list(): Promise<ProviderStatus[]> {
    const running = this.d.sandboxes.list(["creating", "running", "paused"]);
    const reclaim = {
      memory_idle_reclaim: idleReclaimState(this.d.opts.memory?.reclaimAfterMs ?? DEFAULT_RECLAIM_AFTER_MS),
      memory_ksm: await ksmState(),
      prestarted_vmms: prestartState(this.d.prestarts.status()),
    };
    return Promise.all(
      this.d.providers.all().map(async (p) => ({
        ...(await p.health().then((h) => (p.features.isolation === "vm" && p.features.snapshots ? { ...h, details: { ...h.details, ...reclaim } } : h))),
        default: p.name === this.d.providers.defaultName,
        isolation: p.features.isolation,
        features: p.features,
        sandbox_count: running.filter((r) => this.d.providers.of(r) === p).length,
      })),
    );
  }

  /** Whether a provider (default: the default one) can run sandboxes here, and what it found; 404 for one not enabled. */
  health(name?: string): Promise<ProviderHealth> {
    const p = name === undefined ? this.d.providers.default : this.d.providers.find(name);
    if (!p) throw notFound(`provider ${name} not found (enabled: ${this.d.providers.names().join(", ")})`);
    return p.health();
  }

  /** A real probe of every provider: starts a throwaway sandbox (no disk) on each and pings its agent. */
  async test(): Promise<Record<string, boolean>> {
    const out: Record<string, boolean> = {};
    for (const p of this.d.providers.all()) out[p.name] = await p.probe().catch(() => false);
    return out;
  }
}

/** What the pools' calls read and resize. */
export interface PoolsDeps {
  readonly tenants: Pick<TenantPool, "status"> | null;
  readonly warm: Pick<WarmPools, "shown">;
  readonly prestarts: Pick<Prestarts, "status">;
  readonly spawner: Pick<Spawner, "configurePools">;
}

export class PoolsFacade {
  constructor(private readonly d: PoolsDeps) {}

  /** Pool mode's shared VMs, warm pools and prestarted VMMs, in the shape of the REST contract. */
  status(): Record<string, unknown> {
    return { ...(this.d.tenants?.status() ?? { enabled: false }), warm: this.warm(), prestarted: this.d.prestarts.status() };
  }

  /** The warm pools: which image or template each is for, how many VMs it keeps and has ready. */
  warm(): { pool: string; size: number; ready: number; memory_mb: number }[] {
    return this.d.warm.shown();
  }

  /**
   * (Re)sizes the warm pools from the config (default spawns) and the templates' `pool_size`.
   * Resolves once the pools are set; they fill in the background.
   */
  async configure(): Promise<void> {
    return this.d.spawner.configurePools();
  }
}
