// The core: sandbox lifecycle over a provider, recorded in the store, announced as events.
// Every interface (library, CLI, REST) calls these functions; none of them knows about HTTP.
import { randomBytes } from "node:crypto";
import { copyFile, mkdir, readFile, rm } from "node:fs/promises";
import { isIP } from "node:net";
import { join } from "node:path";
import type { Writable } from "node:stream";
import { defaultDataDir, pathsFor, type Paths } from "../config/paths.js";
import { BlobStore } from "../images/blobs.js";
import type { RegistryOptions } from "../images/registry.js";
import { DEFAULT_IMAGE, ImageNotFoundError, canonicalName, resolveImage, type LocalImage } from "../images/store.js";
import { BootError, type Vm } from "../providers/provider.js";
import { QemuProvider } from "../providers/qemu/qemu-provider.js";
import { openDb, type Db } from "../store/db.js";
import { EventStore } from "../store/events.js";
import { SandboxStore, type SandboxRow } from "../store/sandboxes.js";
import { SnapshotStore, type SnapshotRow } from "../store/snapshots.js";
import { TemplateStore, type TemplateBody, type TemplateRow } from "../store/templates.js";
import { badRequest, conflict, ForgevmError, notFound } from "./errors.js";
import { EventBus } from "./events.js";
import { Sandbox, type ExecDefaults } from "./sandbox.js";
import { Images } from "./images.js";
import { Snapshots } from "./snapshots.js";
import { POOL_NICE, WarmPools, type PoolTarget } from "./warm-pool.js";
import { TenantPool } from "./tenant-pool.js";
import type { ForgeOptions, ForkOptions, ForkResult, SpawnDefaults, SpawnOptions } from "./options.js";
export type { ForgeOptions, ForkOptions, ForkResult, NetworkOptions, PoolModeOptions, SpawnDefaults, SpawnOptions } from "./options.js";
import { Networks, proxyEnv } from "./network.js";
import { checkDecls, injectSecretFiles, planSecrets, type PlannedSecrets } from "./secrets.js";
import { EgressProxy } from "../net/egress-proxy.js";
import { loadPresets } from "../net/allowlist.js";
import { BLOCKED_V4 } from "../net/addresses.js";
import type { NetworkRecord } from "../store/sandboxes.js";
import type { EgressEntry } from "../net/egress-log.js";
import type { PortMapping } from "../net/ports.js";

const NO_NETWORK: NetworkRecord = { mode: "none", allow: [], ports: [] };


/** Most copies one fork or restore call makes. */
export const MAX_FORK = 32;

/** A spawn request with its template and defaults applied and its image resolved. */
interface SpawnPlan {
  image: LocalImage;
  template?: TemplateRow;
  memoryMb: number;
  vcpus: number;
  diskMb: number;
  ttlMs: number;
  env: Record<string, string> | null;
  execUser: string | null;
  network: NetworkRecord;
  secrets: PlannedSecrets | null;
  /** A network device (network "full"): part of the machine, so of its base snapshot too. */
  nic: boolean;
}

export const SPAWN_DEFAULTS: SpawnDefaults = { image: DEFAULT_IMAGE, memoryMb: 512, vcpus: 1, diskMb: 2048, ttlMs: 30 * 60_000 };

export class Forge {
  private readonly live = new Map<string, Sandbox>();
  /** Secrets of running sandboxes, by id: in memory only. */
  private readonly secrets = new Map<string, PlannedSecrets>();
  private readonly destroying = new Map<string, Promise<void>>();
  private reaper: NodeJS.Timeout | null = null;
  readonly sandboxes: SandboxStore;
  readonly templates: TemplateStore;
  readonly snapshotRows: SnapshotStore;
  readonly snaps: Snapshots;
  readonly warm: WarmPools;
  readonly images: Images;
  readonly tenants: TenantPool | null;
  readonly blobs: BlobStore;
  readonly events: EventBus;
  readonly networks: Networks;
  private readonly egress: EgressProxy;
  private readonly eventStore: EventStore;
  readonly defaults: SpawnDefaults;
  private closed = false;

  private constructor(
    readonly paths: Paths,
    readonly provider: QemuProvider,
    private readonly db: Db,
    private readonly opts: ForgeOptions,
  ) {
    this.sandboxes = new SandboxStore(db);
    this.templates = new TemplateStore(db);
    this.snapshotRows = new SnapshotStore(db);
    this.blobs = new BlobStore(paths.blobsDir);
    this.eventStore = new EventStore(db);
    this.events = new EventBus(this.eventStore);
    this.defaults = { ...SPAWN_DEFAULTS, ...opts.defaults };
    this.snaps = new Snapshots({ paths, provider, store: this.snapshotRows, events: this.events, inUse: () => this.snapshotsInUse() });
    this.warm = new WarmPools(opts.warmPool?.memoryBudgetMb ?? 2048, this.events.emit);
    this.images = new Images({
      paths,
      blobs: this.blobs,
      events: this.events,
      registryAuth: opts.registryAuth,
      sandboxesUsing: (image) => this.list().filter((r) => r.image === image).map((r) => r.id),
      snapshotsUsing: (image) => this.snapshotRows.list(["ready"]).filter((r) => r.image === image && r.kind !== "base").map((r) => r.name ?? r.id),
      dropBases: (image) => this.snaps.dropBases((r) => r.image === image),
    });
    const net = opts.network ?? {};
    this.egress = new EgressProxy({ logDir: join(paths.dataDir, "egress"), allowPrivate: net.allowPrivate, hostsOverride: net.hostsOverride });
    this.networks = new Networks(this.egress, loadPresets(net.presetsFile), net.default ?? "none", (id, r) => this.sandboxes.setNetwork(id, r));
    const pool = opts.pool;
    this.tenants = pool?.enabled ? new TenantPool(pool, () => this.makePoolHost(), this.events.emit) : null;
  }

  /** Snapshots that live VMs are restored from (their disks are backed by the snapshot's). */
  private snapshotsInUse(): Set<string> {
    const ids = new Set<string>();
    for (const r of this.sandboxes.list(["creating", "running"])) if (r.snapshot_id) ids.add(r.snapshot_id);
    for (const id of this.warm.snapshotIds()) ids.add(id);
    for (const id of this.tenants?.snapshotIds() ?? []) ids.add(id);
    return ids;
  }

  /**
   * (Re)sizes the warm pools from the config (default spawns) and the templates' `pool_size`.
   * Resolves once the pools are set; they fill in the background.
   */
  async configurePools(): Promise<void> {
    if (this.opts.baseSnapshots === false) return;
    const wanted: { label: string; size: number; opts: SpawnOptions }[] = [];
    if (this.opts.warmPool?.size) wanted.push({ label: `image:${this.defaults.image}`, size: this.opts.warmPool.size, opts: {} });
    for (const t of this.templates.list()) if (t.pool_size) wanted.push({ label: `template:${t.name}`, size: t.pool_size, opts: { template: t.name } });
    const targets: PoolTarget[] = [];
    for (const w of wanted) {
      try {
        const plan = await this.plan(w.opts);
        targets.push({ key: await this.snaps.baseKey(plan), label: w.label, size: w.size, memoryMb: plan.memoryMb, make: () => this.makePooled(plan) });
      } catch (e) {
        this.events.emit("pool.error", null, { pool: w.label, error: (e as Error).message.split("\n")[0] });
      }
    }
    await this.warm.configure(targets);
    await this.snaps.collect();
  }

  /** Restores one VM for a warm pool, at low priority, under the sandbox id it will have. */
  private async makePooled(plan: SpawnPlan): Promise<{ vm: Vm; snapshotId: string }> {
    const base = await this.snaps.base(plan, (vm) => this.runSetup(vm, plan));
    if (!base) throw new Error(`no base snapshot for ${plan.image.name}`);
    const id = `sb-${randomBytes(4).toString("hex")}`;
    const vm = await this.provider.spawn({ id, memoryMb: plan.memoryMb, vcpus: plan.vcpus, hostname: id, restore: { files: Snapshots.files(base) }, nice: POOL_NICE, nic: plan.nic });
    // A first exec in a restored VM costs ~5× a later one (under TCG the code it runs is
    // translated afresh in every QEMU); pay it here, not in the claimer's first command.
    try {
      for (let i = 0; i < 2; i++) await vm.channel.execBuffered({ argv: ["true"], timeout_ms: 30_000 });
    } catch (e) {
      await vm.destroy();
      throw e;
    }
    return { vm, snapshotId: base.id };
  }

  /** Pool mode: a sandbox that is a user of its own in a shared VM. */
  private async spawnTenant(opts: SpawnOptions): Promise<Sandbox> {
    const image = this.opts.pool!.image || this.defaults.image;
    if (opts.network && opts.network !== "none") throw badRequest(`network: in pool mode sandboxes share a VM and have no network; only "none" is available`);
    if (opts.secrets && Object.keys(opts.secrets).length) throw badRequest("secrets: in pool mode sandboxes share a VM, where other tenants' processes could read them");
    if (opts.allow?.length || opts.ports?.length) throw badRequest(`${opts.allow?.length ? "allow" : "ports"}: in pool mode sandboxes share a VM and have no network`);
    if (opts.image && canonicalName(opts.image) !== canonicalName(image)) {
      throw badRequest(`image: in pool mode every sandbox shares VMs of ${image}; "${opts.image}" is not available`);
    }
    const plan = await this.plan({ ...opts, image, memoryMb: this.opts.pool!.memoryMb, vcpus: this.opts.pool!.vcpus, user: undefined, network: "none" });
    const row = this.newRow(plan, opts);
    this.sandboxes.insert(row);
    this.events.emit("sandbox.created", row.id, { image: row.image, pool: true });
    try {
      const { host, tenant } = await this.tenants!.join(row.id);
      if (this.sandboxes.get(row.id)?.state !== "creating" || this.closed) {
        await this.tenants!.leave(row.id);
        throw new ForgevmError("CONFLICT", `sandbox ${row.id} was destroyed while it was starting`);
      }
      const sb = new Sandbox(row.id, row.image, host.vm!, (s) => this.destroy(s.id), this.events.emit, { ...execDefaults(plan.image, row.env, null), cwd: tenant.home, tenant });
      this.live.set(row.id, sb);
      this.sandboxes.update(row.id, { state: "running", vm_id: host.id, snapshot_id: host.snapshotId || null, origin: "pool" });
      this.events.emit("sandbox.running", row.id, { vm_id: host.id, user: tenant.user });
      return sb;
    } catch (e) {
      this.recordFailure(row.id, e);
      throw e;
    }
  }

  /** A shared VM for pool mode, restored from the pool image's base snapshot when possible. */
  private async makePoolHost(): Promise<{ vm: Vm; snapshotId: string }> {
    const p = this.opts.pool!;
    const plan = await this.plan({ image: p.image || this.defaults.image, memoryMb: p.memoryMb, vcpus: p.vcpus });
    const id = `pool-${randomBytes(4).toString("hex")}`;
    const base = this.opts.baseSnapshots === false ? null : await this.snaps.base(plan, (vm) => this.runSetup(vm, plan));
    if (base) {
      try {
        return { vm: await this.provider.spawn({ id, memoryMb: plan.memoryMb, vcpus: plan.vcpus, hostname: id, restore: { files: Snapshots.files(base) } }), snapshotId: base.id };
      } catch (e) {
        if (!(e instanceof BootError)) throw e;
        this.snaps.markUnusable(base, e.message);
      }
    }
    return { vm: await this.provider.spawn({ id, memoryMb: plan.memoryMb, vcpus: plan.vcpus, hostname: id, rootfs: plan.image.rootfs, diskMb: plan.diskMb }), snapshotId: "" };
  }

  /** A warm VM for this plan, made into a running sandbox; null when its pool is empty. */
  private async claimPooled(plan: SpawnPlan, opts: SpawnOptions): Promise<Sandbox | null> {
    // Without pools there is nothing to claim: no need to compute the key (file stats) per spawn.
    if (this.warm.empty || opts.coldBoot || opts.hostname || this.opts.baseSnapshots === false) return null;
    const got = this.warm.claim(await this.snaps.baseKey(plan));
    if (!got) return null;
    const row = { ...this.newRow(plan, opts, got.vm.info.id), snapshot_id: got.snapshotId };
    this.sandboxes.insert(row);
    this.events.emit("sandbox.created", row.id, { image: row.image, memory_mb: row.memory_mb, vcpus: row.vcpus });
    void got.vm.setNice(0);
    try {
      return await this.admit(row, got.vm, plan.image, "pool", plan.secrets);
    } catch (e) {
      this.recordFailure(row.id, e);
      throw e;
    }
  }

  /** Opens ForgeVM on a data directory that ./setup.sh has prepared. */
  static async open(opts: ForgeOptions = {}): Promise<Forge> {
    const paths = pathsFor(opts.dataDir ?? defaultDataDir());
    const db = openDb(opts.dbPath ?? join(paths.dataDir, "forgevm.db"));
    const forge = new Forge(paths, new QemuProvider({
      paths,
      accel: opts.accel,
      guestLimits: opts.guestLimits,
      jail: opts.jail,
      firewall: { blockedV4: BLOCKED_V4.map(([a, p]) => `${a}/${p}`), allowV4: (opts.network?.allowPrivate ?? []).filter((c) => isIP(c.split("/")[0]) === 4) },
    }), db, opts);
    await forge.reconcile();
    await forge.snaps.collect(true);
    await forge.configurePools();
    forge.tenants?.prewarm();
    const every = opts.reapIntervalMs ?? 1000;
    if (every > 0) {
      forge.reaper = setInterval(() => void forge.reap(), every);
      forge.reaper.unref();
    }
    return forge;
  }

  /**
   * Starts a sandbox and returns once its agent answers: restored from its image's (or
   * template's) base snapshot when one exists or can be made, else booted. A failed start is
   * recorded as `error`.
   */
  async spawn(opts: SpawnOptions = {}): Promise<Sandbox> {
    if (this.closed) throw new ForgevmError("UNAVAILABLE", "the server is shutting down");
    if (this.tenants && opts.template === undefined) return this.spawnTenant(opts);
    const plan = await this.plan(opts);
    const pooled = await this.claimPooled(plan, opts);
    if (pooled) return pooled;
    const row = this.newRow(plan, opts);
    this.sandboxes.insert(row);
    this.events.emit("sandbox.created", row.id, { image: row.image, memory_mb: row.memory_mb, vcpus: row.vcpus });
    try {
      const { vm, origin } = await this.startVm(row.id, plan, opts);
      return await this.admit(row, vm, plan.image, origin, plan.secrets);
    } catch (e) {
      this.recordFailure(row.id, e);
      throw e;
    }
  }

  /** What a spawn will make: its template's fields filled in, the image resolved (pulled if need be). */
  private async plan(opts: SpawnOptions): Promise<SpawnPlan> {
    const tpl = opts.template !== undefined ? this.templates.get(opts.template) : undefined;
    if (opts.template !== undefined && !tpl) throw notFound(`template "${opts.template}" not found`);
    const network = this.networks.plan({ mode: opts.network, allow: opts.allow, ports: opts.ports }, { allow: tpl?.allowed_hosts });
    const secrets = planSecrets(opts.secrets, tpl?.secrets, this.opts.hostSecrets);
    if (network.mode === "full") await this.checkFullNetwork();
    const d = this.defaults;
    const imageName = opts.image ?? tpl?.image ?? d.image;
    // An image that is not local is pulled first when its name is a registry reference.
    const image = await resolveImage(this.paths, imageName).catch((e) => {
      if (!(e instanceof ImageNotFoundError)) throw e;
      if (imageName.startsWith("forgevm/")) throw badRequest(`image: ${e.message}`);
      return this.pullImage(imageName);
    });
    const env = tpl?.env || opts.env ? { ...tpl?.env, ...opts.env } : null;
    let execUser: string | null = null;
    if (opts.user === "image") {
      // USER may be "name", "uid" or "name:group"; the agent takes the user part.
      execUser = image.config?.User?.split(":")[0] || null;
    } else if (opts.user) {
      execUser = opts.user;
    }
    return {
      image,
      template: tpl,
      memoryMb: opts.memoryMb ?? tpl?.memory_mb ?? d.memoryMb,
      vcpus: opts.vcpus ?? tpl?.cpu_cores ?? d.vcpus,
      diskMb: opts.diskMb ?? d.diskMb,
      ttlMs: opts.ttlMs ?? (tpl?.ttl_seconds ? tpl.ttl_seconds * 1000 : d.ttlMs),
      env,
      execUser,
      network,
      secrets,
      nic: network.mode === "full",
    };
  }

  private newRow(plan: SpawnPlan, opts: { ownerId?: string; metadata?: Record<string, string>; ttlMs?: number }, id?: string): SandboxRow {
    const what = { image: plan.image.name, template: plan.template?.name ?? null, memory_mb: plan.memoryMb, vcpus: plan.vcpus, disk_mb: plan.diskMb, env: plan.env, exec_user: plan.execUser, network: plan.network };
    return this.rowOf(what, { ttlMs: opts.ttlMs ?? plan.ttlMs, ownerId: opts.ownerId, metadata: opts.metadata }, id);
  }

  /** A new `creating` row for a sandbox like `what` (a plan, a fork's parent, a snapshot). */
  private rowOf(
    what: Pick<SandboxRow, "image" | "template" | "memory_mb" | "vcpus" | "disk_mb" | "env" | "exec_user"> & { network?: NetworkRecord | null },
    opts: { ttlMs: number; ownerId?: string | null; metadata?: Record<string, string> | null; snapshotId?: string },
    id = `sb-${randomBytes(4).toString("hex")}`,
  ): SandboxRow {
    const now = Date.now();
    return {
      id,
      state: "creating",
      provider: this.provider.name,
      image: what.image,
      memory_mb: what.memory_mb,
      vcpus: what.vcpus,
      disk_mb: what.disk_mb,
      owner_id: opts.ownerId ?? null,
      metadata: opts.metadata ?? null,
      created_at: new Date(now).toISOString(),
      expires_at: new Date(now + opts.ttlMs).toISOString(),
      destroyed_at: null,
      error: null,
      vm_pid: null,
      vm_dir: null,
      manager_pid: process.pid,
      env: what.env,
      template: what.template,
      exec_user: what.exec_user,
      snapshot_id: opts.snapshotId ?? null,
      origin: null,
      vm_id: null,
      network: what.network ?? null,
    };
  }

  /**
   * A VM for a new sandbox: restored from the base snapshot (made on first use, with the
   * template's setup commands already run), else booted cold with setup run now.
   */
  private async startVm(id: string, plan: SpawnPlan, opts: SpawnOptions): Promise<{ vm: Vm; origin: string }> {
    const spec = { id, memoryMb: plan.memoryMb, vcpus: plan.vcpus, hostname: opts.hostname ?? id, bootTimeoutMs: opts.bootTimeoutMs, nic: plan.nic };
    if (this.opts.baseSnapshots !== false && !opts.coldBoot) {
      const base = await this.snaps.base(plan, (vm) => this.runSetup(vm, plan));
      if (base) {
        this.sandboxes.update(id, { snapshot_id: base.id });
        try {
          return { vm: await this.provider.spawn({ ...spec, restore: { files: Snapshots.files(base) } }), origin: "snapshot" };
        } catch (e) {
          if (!(e instanceof BootError)) throw e;
          // An unusable snapshot costs this spawn a cold boot, and no later spawn uses it.
          this.snaps.markUnusable(base, e.message);
          this.sandboxes.update(id, { snapshot_id: null });
        }
      }
    }
    const vm = await this.provider.spawn({ ...spec, rootfs: plan.image.rootfs, diskMb: plan.diskMb });
    try {
      await this.runSetup(vm, plan);
    } catch (e) {
      await vm.destroy();
      throw e;
    }
    return { vm, origin: "boot" };
  }

  /** Runs a template's setup commands; the first that fails fails the spawn. */
  private async runSetup(vm: Vm, plan: SpawnPlan): Promise<void> {
    const setup = plan.template?.setup ?? [];
    if (!setup.length) return;
    // Setup commands get the template's allowlist (e.g. `pip install` through @pypi), logged
    // under the setup VM's id; the network is taken down before the VM is frozen.
    const allow = plan.template?.allowed_hosts ?? [];
    const network: NetworkRecord = allow.length ? { mode: "allowlist", allow, ports: [] } : NO_NETWORK;
    await this.networks.attach(vm.info.id, vm, network);
    try {
      const sb = new Sandbox(vm.info.id, plan.image.name, vm, async () => {}, () => {}, execDefaults(plan.image, plan.env, plan.execUser, network));
      for (const [i, cmd] of setup.entries()) {
        const r = await sb.exec(cmd, { timeoutMs: 10 * 60_000 }).catch((e: Error) => ({ exitCode: -1, stderr: e.message }));
        if (r.exitCode !== 0) {
          throw badRequest(`template setup command ${i + 1} (${cmd}) failed with exit code ${r.exitCode}: ${r.stderr.trim().split("\n").slice(-3).join(" / ")}`);
        }
      }
    } finally {
      await this.networks.detach(vm.info.id);
      await this.egress.removeLog(vm.info.id); // the setup VM has no row whose history would keep it
    }
  }

  /** Hands a started VM out as a running sandbox, unless it was destroyed meanwhile. */
  private async admit(row: SandboxRow, vm: Vm, image: LocalImage | null, origin: string, secrets: PlannedSecrets | null = null): Promise<Sandbox> {
    // Destroyed while starting (a DELETE, or shutdown): stop the VM instead of handing it out.
    if (this.sandboxes.get(row.id)?.state !== "creating" || this.closed) {
      await vm.destroy();
      throw new ForgevmError("CONFLICT", `sandbox ${row.id} was destroyed while it was starting`);
    }
    let network: NetworkRecord;
    try {
      network = await this.networks.attach(row.id, vm, row.network ?? NO_NETWORK);
      if (secrets) await injectSecretFiles(vm, secrets.files);
    } catch (e) {
      await this.networks.detach(row.id);
      await vm.destroy();
      throw e;
    }
    const sb = new Sandbox(row.id, row.image, vm, (s) => this.destroy(s.id), this.events.emit, {
      ...execDefaults(image, row.env, row.exec_user, network),
      ...(secrets ? { secrets: secrets.env } : {}),
    });
    if (secrets) this.secrets.set(row.id, secrets);
    this.live.set(row.id, sb);
    this.sandboxes.setNetwork(row.id, network);
    this.sandboxes.update(row.id, { state: "running", vm_pid: vm.info.pid, vm_dir: vm.info.dir, origin });
    this.events.emit("sandbox.running", row.id, { boot_ms: vm.info.bootMs, accel: vm.info.accel, origin });
    return sb;
  }

  private recordFailure(id: string, e: unknown): void {
    if (this.sandboxes.get(id)?.state !== "creating") return;
    const reason = (e as Error).message;
    this.sandboxes.update(id, { state: "error", error: reason, destroyed_at: new Date().toISOString() });
    this.events.emit("sandbox.error", id, { error: reason.split("\n")[0] });
  }

  /** Pool mode's shared VMs and warm pools, in the shape of the REST contract. */
  poolStatus(): Record<string, unknown> {
    const warm = this.warm.status().map(({ label, size, ready, memory_mb }) => ({ pool: label, size, ready, memory_mb }));
    return { ...(this.tenants?.status() ?? { enabled: false }), warm };
  }

  /** Stores a new template (false when the name is taken) and starts its warm pool. */
  async createTemplate(t: TemplateBody): Promise<boolean> {
    this.checkTemplate(t);
    if (!this.templates.create(t)) return false;
    await this.configurePools();
    return true;
  }

  private checkTemplate(t: TemplateBody): void {
    checkDecls(t.secrets ?? []);
    try {
      this.networks.plan({}, { allow: t.allowed_hosts });
    } catch (e) {
      throw badRequest(`allowed_hosts: ${(e as Error).message}`);
    }
  }

  /** Network "full" needs the host firewall (a root server with iptables): a 400 that says why not. */
  private async checkFullNetwork(): Promise<void> {
    const problem = await this.provider.nicProblem();
    if (problem) throw badRequest(`network: "full" is not available on this server: ${problem}`);
  }

  /** A sandbox holding secrets has them in its RAM: no snapshot may carry them to disk. */
  private refuseIfSecrets(id: string, what: string): void {
    if (this.secrets.has(id)) throw conflict(`sandbox ${id} holds secrets, which a snapshot would write to disk in its memory image; it cannot be ${what}`);
  }

  /** Replaces a template; its base snapshots and warm VMs are remade from the new definition. */
  async replaceTemplate(t: TemplateBody): Promise<boolean> {
    this.checkTemplate(t);
    if (!this.templates.replace(t)) return false;
    await this.snaps.dropBases((r) => r.template === t.name);
    await this.configurePools();
    return true;
  }

  /** Deletes a template with its base snapshots and warm VMs. */
  async deleteTemplate(name: string): Promise<boolean> {
    if (!this.templates.delete(name)) return false;
    await this.snaps.dropBases((r) => r.template === name);
    await this.configurePools();
    return true;
  }

  /** Snapshots a running sandbox (memory, devices, disk) under an optional name; it keeps running. */
  async snapshot(id: string, name?: string): Promise<SnapshotRow> {
    const sb = this.sandbox(id);
    const src = this.get(id);
    if (src.vm_id) throw badRequest(`sandbox ${id} shares a pool VM with other sandboxes and cannot be snapshotted`);
    this.refuseIfSecrets(id, "snapshotted");
    if (name !== undefined && this.snapshotRows.find(name)) throw conflict(`a snapshot named "${name}" already exists`);
    const row = await this.snaps.begin({ kind: "sandbox", name: name ?? null, image: src.image, template: src.template, memory_mb: src.memory_mb, vcpus: src.vcpus, disk_mb: src.disk_mb, format: "stream", source: src });
    try {
      return await this.snaps.finish(row, await sb.vm.snapshot(row.dir));
    } catch (e) {
      await this.snaps.abort(row);
      throw e;
    }
  }

  /** A snapshot by id or name. */
  getSnapshot(idOrName: string): SnapshotRow {
    const row = this.snapshotRows.find(idOrName);
    if (!row) throw notFound(`snapshot ${idOrName} not found`);
    return row;
  }

  /** Deletes a snapshot; its files go once no sandbox restored from it runs. */
  async deleteSnapshot(idOrName: string): Promise<void> {
    await this.snaps.remove(this.getSnapshot(idOrName));
  }

  /**
   * Makes `count` running copies of a sandbox as it is now, processes and memory included. The
   * children load while the parent is being copied; each gets its own disk overlay and a new
   * identity (hostname, machine id, entropy, clock). The parent pauses for the copy only.
   */
  async fork(id: string, opts: ForkOptions = {}): Promise<ForkResult> {
    const count = opts.count ?? 1;
    if (!Number.isInteger(count) || count < 1 || count > MAX_FORK) throw badRequest(`count must be an integer from 1 to ${MAX_FORK}`);
    const parent = this.sandbox(id);
    const src = this.get(id);
    if (src.vm_id) throw badRequest(`sandbox ${id} shares a pool VM with other sandboxes and cannot be forked`);
    if (opts.network !== undefined || opts.allow !== undefined) throw badRequest(`${opts.network !== undefined ? "network" : "allow"}: a fork keeps its parent's network; change the copies' allowlist after the fork`);
    this.refuseIfSecrets(id, "forked");
    const image = await resolveImage(this.paths, src.image).catch(() => null);
    const snap = await this.snaps.begin({ kind: "fork", image: src.image, template: src.template, memory_mb: src.memory_mb, vcpus: src.vcpus, disk_mb: src.disk_mb, format: "stream", source: src });
    const started = performance.now();
    const rows: SandboxRow[] = [];
    try {
      const disk = await parent.vm.prepareSnapshot(snap.dir);
      const files = { state: join(snap.dir, "state"), disk: disk?.disk, diskBytes: disk?.diskBytes };
      const tees: Writable[] = [];
      let fed!: () => void;
      const allFed = new Promise<void>((r) => (fed = r));
      const ttlMs = opts.ttlMs ?? Math.max(1000, Date.parse(src.expires_at) - Date.now());
      const children = Array.from({ length: count }, () => {
        // A copy keeps its parent's network and allowlist; host ports stay with the parent.
        const network = src.network ? { ...src.network, ports: [] } : null;
        const row = this.rowOf({ ...src, network }, { ttlMs, ownerId: opts.ownerId ?? src.owner_id, metadata: opts.metadata ?? src.metadata, snapshotId: snap.id });
        rows.push(row);
        this.sandboxes.insert(row);
        this.events.emit("sandbox.created", row.id, { image: row.image, forked_from: id });
        return this.provider.spawn({
          id: row.id,
          memoryMb: src.memory_mb,
          vcpus: src.vcpus,
          hostname: row.id,
          nic: src.network?.mode === "full",
          restore: {
            files,
            diskInUse: true,
            feed: (w) => {
              tees.push(w);
              if (tees.length === count) fed();
            },
          },
        });
      });
      // A child that fails before QEMU runs would never take its pipe: stop waiting then.
      const settled = Promise.allSettled(children);
      await Promise.race([allFed, settled]);
      if (tees.length < count) throw (await settled).find((r) => r.status === "rejected")!.reason;
      const capture = await parent.vm.snapshot(snap.dir, { tees, disk: disk?.disk });
      await this.snaps.finish(snap, capture);
      const results = await settled;
      const failed = results.find((r) => r.status === "rejected");
      if (failed) {
        await Promise.all(results.map((r) => (r.status === "fulfilled" ? r.value.destroy() : null)));
        throw failed.reason;
      }
      const sandboxes: Sandbox[] = [];
      for (const [i, r] of results.entries()) sandboxes.push(await this.admit(rows[i], (r as PromiseFulfilledResult<Vm>).value, image, "fork"));
      this.events.emit("sandbox.forked", id, { children: rows.map((r) => r.id), pause_ms: capture.pauseMs });
      return { sandboxes, pauseMs: capture.pauseMs, totalMs: Math.round(performance.now() - started), snapshotBytes: capture.bytes };
    } catch (e) {
      for (const r of rows) this.recordFailure(r.id, e);
      if (this.snapshotRows.get(snap.id)?.state === "creating") await this.snaps.abort(snap);
      else await this.snaps.collect();
      throw e;
    }
  }

  /** Starts `count` sandboxes from a snapshot, each as the sandbox was when it was taken. */
  async restore(idOrName: string, opts: ForkOptions = {}): Promise<Sandbox[]> {
    const snap = this.getSnapshot(idOrName);
    if (snap.state !== "ready") throw conflict(`snapshot ${snap.id} is ${snap.state}`);
    const count = opts.count ?? 1;
    if (!Number.isInteger(count) || count < 1 || count > MAX_FORK) throw badRequest(`count must be an integer from 1 to ${MAX_FORK}`);
    const image = await resolveImage(this.paths, snap.image).catch(() => null);
    const source = snap.source_id ? this.sandboxes.get(snap.source_id)?.network : null;
    const network =
      opts.network !== undefined || opts.allow !== undefined
        ? this.networks.plan({ mode: opts.network, allow: opts.allow })
        : source
          ? { ...source, ports: [] }
          : this.networks.plan({ mode: snap.nic ? "full" : undefined });
    // The network device is part of the saved machine: a copy has one exactly when the snapshot did.
    if ((network.mode === "full") !== !!snap.nic) {
      throw badRequest(`network: snapshot ${snap.id} was taken ${snap.nic ? "with" : "without"} a network device; its copies must use network ${snap.nic ? '"full"' : '"none" or "allowlist"'}`);
    }
    return Promise.all(
      Array.from({ length: count }, async () => {
        const row = this.rowOf({ ...snap, network }, { ttlMs: opts.ttlMs ?? this.defaults.ttlMs, ownerId: opts.ownerId, metadata: opts.metadata, snapshotId: snap.id });
        this.sandboxes.insert(row);
        this.events.emit("sandbox.created", row.id, { image: row.image, snapshot_id: snap.id });
        try {
          const vm = await this.provider.spawn({ id: row.id, memoryMb: snap.memory_mb, vcpus: snap.vcpus, hostname: row.id, restore: { files: Snapshots.files(snap) }, nic: !!snap.nic });
          return await this.admit(row, vm, image, "snapshot");
        } catch (e) {
          this.recordFailure(row.id, e);
          throw e instanceof BootError ? new ForgevmError("UNAVAILABLE", `snapshot ${snap.id} could not be restored: ${e.message.split("\n")[0]}`) : e;
        }
      }),
    );
  }

  /** Pulls an image from its registry (verifying every byte) and installs it; concurrent pulls of one image share the work. */
  pullImage(reference: string, log?: (m: string) => void, onLayerBytes?: RegistryOptions["onLayerBytes"]): Promise<LocalImage> {
    return this.images.pull(reference, log, onLayerBytes);
  }

  /** Imports an image from an OCI layout directory, an OCI archive or a `docker save` tarball. */
  importImage(source: string, name?: string, tag?: string, log?: (m: string) => void): Promise<LocalImage> {
    return this.images.import(source, name, tag, log);
  }

  /** Removes a local image; refused while a sandbox or a kept snapshot uses it. */
  removeImage(name: string): Promise<void> {
    return this.images.remove(name);
  }

  /** Deletes blobs that no local image refers to; returns how many. */
  pruneBlobs(): Promise<number> {
    return this.images.pruneBlobs();
  }

  /** The stored record of any sandbox ever seen (history included). */
  get(id: string): SandboxRow {
    const row = this.sandboxes.get(id);
    if (!row) throw notFound(`sandbox ${id} not found`);
    return row;
  }

  /** Live sandboxes (creating or running), newest first. */
  list(ownerId?: string): SandboxRow[] {
    return this.sandboxes.list(["creating", "running"], ownerId);
  }

  /** The running sandbox with this id, ready for exec and file operations. */
  sandbox(id: string): Sandbox {
    const sb = this.live.get(id);
    if (sb) return sb;
    const row = this.sandboxes.get(id);
    if (!row) throw notFound(`sandbox ${id} not found`);
    if (row.state === "creating") throw conflict(`sandbox ${id} is still starting`);
    throw notFound(`sandbox ${id} is ${row.state}${row.error ? ` (${row.error.split("\n")[0]})` : ""}`);
  }

  /** A running sandbox's network mode, allowlist and published ports. */
  network(id: string): NetworkRecord {
    this.sandbox(id);
    return this.networks.get(id);
  }

  /** Replaces a running sandbox's egress allowlist; effective on its next request. */
  setAllowlist(id: string, allow: string[]): NetworkRecord {
    this.sandbox(id);
    return this.networks.setAllow(id, allow);
  }

  /** Publishes a port of a running sandbox ("8080:80"); 409 if the host port is taken. */
  async publishPort(id: string, spec: string): Promise<PortMapping> {
    this.sandbox(id);
    return this.networks.addPort(id, spec);
  }

  /** Stops publishing a host port of a running sandbox. */
  async unpublishPort(id: string, hostPort: number): Promise<void> {
    this.sandbox(id);
    await this.networks.removePort(id, hostPort);
  }

  /** The last `lines` egress decisions of a sandbox (kept with its history after it is destroyed). */
  egressLog(id: string, lines = 100): Promise<EgressEntry[]> {
    this.get(id);
    return this.networks.egressLog(id, lines);
  }

  /** Sets a new expiry `ttlMs` from now. */
  extend(id: string, ttlMs: number): SandboxRow {
    const row = this.get(id);
    if (row.state !== "running" && row.state !== "creating") throw notFound(`sandbox ${id} is ${row.state}`);
    this.sandboxes.update(id, { expires_at: new Date(Date.now() + ttlMs).toISOString() });
    return this.get(id);
  }

  /** Stops a sandbox and removes its files; idempotent for sandboxes that existed. */
  destroy(id: string, reason: "destroyed" | "expired" = "destroyed"): Promise<void> {
    const pending = this.destroying.get(id);
    if (pending) return pending;
    const row = this.get(id);
    if (row.state === "destroyed" || row.state === "error") return Promise.resolve();
    const p = (async () => {
      // Mark first so concurrent spawn completion and the reaper see it at once.
      this.sandboxes.update(id, { state: "destroyed", destroyed_at: new Date().toISOString() });
      const sb = this.live.get(id);
      this.live.delete(id);
      // The console log outlives the VM directory, until the row's history is pruned.
      if (row.vm_dir) await this.keepConsoleLog(id, row.vm_dir);
      await this.networks.detach(id);
      this.secrets.delete(id);
      if (row.vm_id) await this.tenants?.leave(id);
      else if (sb) await sb.vm.destroy();
      this.events.emit(reason === "expired" ? "sandbox.expired" : "sandbox.destroyed", id);
      if (row.snapshot_id) await this.snaps.collect().catch(() => {});
    })().finally(() => this.destroying.delete(id));
    this.destroying.set(id, p);
    return p;
  }

  /** Destroys every live sandbox whose expiry has passed; returns how many. */
  async prune(): Promise<number> {
    const expired = this.sandboxes.expired(new Date().toISOString());
    await Promise.all(expired.map((r) => this.destroy(r.id, "expired")));
    return expired.length;
  }

  /** The last `lines` lines of a sandbox's serial console (kept after destroy, with its history). */
  async logs(id: string, lines = 100): Promise<string[]> {
    const row = this.get(id);
    const live = row.vm_dir && (row.state === "running" || row.state === "creating");
    const file = live ? join(row.vm_dir!, "console.log") : this.keptLogPath(id);
    const text = await readFile(file, "utf8").catch(() => "");
    return text.replace(/\r/g, "").split("\n").filter((l) => l.length).slice(-lines);
  }

  private keptLogPath(id: string): string {
    return join(this.paths.dataDir, "logs", `${id}.console.log`);
  }

  private async keepConsoleLog(id: string, vmDir: string): Promise<void> {
    await mkdir(join(this.paths.dataDir, "logs"), { recursive: true });
    await copyFile(join(vmDir, "console.log"), this.keptLogPath(id)).catch(() => {});
  }

  /** Stops the reaper and destroys every sandbox this process runs. */
  async close(): Promise<void> {
    this.closed = true;
    if (this.reaper) clearInterval(this.reaper);
    await this.warm.close();
    await this.tenants?.close();
    await Promise.all([...this.live.keys()].map((id) => this.destroy(id)));
    await this.provider.destroyAll();
    this.egress.close();
    this.db.close();
  }

  private async reap(): Promise<void> {
    try {
      await this.prune();
      const cutoff = new Date(Date.now() - (this.opts.historyRetentionMs ?? 7 * 86_400_000)).toISOString();
      for (const id of this.sandboxes.pruneHistory(cutoff)) {
        await rm(this.keptLogPath(id), { force: true });
        await this.egress.removeLog(id);
      }
      this.eventStore.trim(cutoff);
    } catch {
      // the next tick tries again
    }
  }

  /** A re-attached sandbox's network; a published port taken meanwhile is dropped and reported. */
  private async reattachNetwork(row: SandboxRow, vm: Vm): Promise<NetworkRecord> {
    const want = row.network ?? NO_NETWORK;
    try {
      return await this.networks.attach(row.id, vm, want);
    } catch (e) {
      this.events.emit("sandbox.error", row.id, { error: `after restart: ${(e as Error).message}; its published ports were dropped` });
      const net = await this.networks.attach(row.id, vm, { ...want, ports: [] });
      this.sandboxes.setNetwork(row.id, net);
      return net;
    }
  }

  // A previous ForgeVM process may have died with VMs running: QEMU runs detached and its
  // sockets survive, so each such VM is re-attached and serves again. One that cannot be (QEMU
  // gone, agent silent) is stopped — only a QEMU whose command line names the VM's own directory,
  // so an unrelated process that reused the pid is never touched — and marked `error`. VMs of
  // another ForgeVM process still alive on this data directory are left alone.
  private async reconcile(): Promise<void> {
    for (const row of this.sandboxes.list(["creating", "running"])) {
      if (this.live.has(row.id)) continue;
      if (row.manager_pid && row.manager_pid !== process.pid && (await isForgevmProcess(row.manager_pid))) continue;
      if (row.state === "running" && row.vm_pid && row.vm_dir) {
        try {
          const vm = await this.provider.attach({ id: row.id, pid: row.vm_pid, dir: row.vm_dir, memoryMb: row.memory_mb, vcpus: row.vcpus });
          const image = await resolveImage(this.paths, row.image).catch(() => null);
          const network = await this.reattachNetwork(row, vm);
          this.live.set(row.id, new Sandbox(row.id, row.image, vm, (s) => this.destroy(s.id), this.events.emit, execDefaults(image, row.env, row.exec_user, network)));
          this.sandboxes.update(row.id, { manager_pid: process.pid });
          this.events.emit("sandbox.reattached", row.id, { pid: row.vm_pid });
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
        : `the server restarted and could not re-attach to this VM${row.error ? `: ${row.error}` : ""}`;
      this.sandboxes.update(row.id, { state: "error", error: reason, destroyed_at: new Date().toISOString() });
      this.events.emit("sandbox.error", row.id, { error: reason });
    }
    // VMs without a sandbox row (warm pool, pool mode, base snapshot builds) of a server that is gone.
    const keep = new Set([...this.live.values()].map((sb) => sb.vm.info.id));
    await this.provider.sweepOrphans(keep, isForgevmProcess);
  }
}

/** Exec defaults of a sandbox: the image's env and working directory, then the sandbox's env. */
function execDefaults(image: LocalImage | null, env: Record<string, string> | null, user: string | null, network?: NetworkRecord): ExecDefaults {
  // The proxy's address comes first so that an image or sandbox may point elsewhere (to no avail).
  const fromImage: Record<string, string> = network?.mode === "allowlist" ? proxyEnv() : {};
  for (const kv of image?.config?.Env ?? []) {
    const i = kv.indexOf("=");
    if (i > 0) fromImage[kv.slice(0, i)] = kv.slice(i + 1);
  }
  const merged = { ...fromImage, ...env };
  return { env: Object.keys(merged).length ? merged : undefined, cwd: image?.config?.WorkingDir || undefined, user: user ?? undefined };
}

async function isForgevmProcess(pid: number): Promise<boolean> {
  const cmd = await readFile(`/proc/${pid}/cmdline`, "utf8").catch(() => "");
  return cmd.includes("node");
}
