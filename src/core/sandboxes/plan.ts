// Spawn planning: a request with its template and defaults applied, checked against what this
// host and provider can do, its image resolved (pulled when it is not local); and the `creating`
// row a new sandbox starts as.
import { constants as osConstants } from "node:os";
import { randomBytes } from "node:crypto";
import type { Provider } from "../../providers/provider.js";
import { ImageNotFoundError, imageInit, resolveImage, type LocalImage } from "../../images/store.js";
import { ext4Has } from "../../images/ext4.js";
import type { HostDirMount, LifecycleRecord, MainRecord, NetworkRecord, RestartPolicy, SandboxRow, VolumeMount } from "../../store/sandboxes.js";
import { isHostDirSpec } from "../host-dirs/host-dirs.js";
import type { TemplateRow } from "../../store/templates.js";
import type { Paths } from "../../config/paths.js";
import type { SandboxStore } from "../../store/sandboxes.js";
import type { TemplateStore } from "../../store/templates.js";
import type { Providers } from "../providers.js";
import type { Networks } from "../network.js";
import type { Volumes } from "../volumes.js";
import type { HostDirs } from "../host-dirs/host-dirs.js";
import { checkForward, forwardEnv, type Forwards } from "../guest/forwards.js";
import type { ForgeOptions, SpawnDefaults } from "../options.js";
import { badRequest, conflict, notFound } from "../../http/errors.js";
import type { IdlePolicy, SpawnOptions } from "../options.js";
import { healthSpec } from "./health.js";
import { planSecrets, type PlannedSecrets } from "./secrets.js";
import { checkFullNetwork, checkMemory, checkVcpus } from "./validate.js";
import { checkEnv, checkMetadata, checkOwner } from "../../schemas/checks.js";
import { expiryAfter, NO_TTL, noneIfZero, parseIdle } from "../../schemas/durations.js";

/** A spawn request with its template and defaults applied and its image resolved. */
export interface SpawnPlan {
  /** What it runs on. */
  provider: Provider;
  /** What it forwards from the host (guest/forwards.ts). */
  forward: string[];
  image: LocalImage;
  /** "systemd": it boots its image's systemd as init (a system image, or `system: true`). */
  init: "systemd" | null;
  template?: TemplateRow;
  memoryMb: number;
  vcpus: number;
  diskMb: number;
  ttlMs: number;
  env: Record<string, string> | null;
  execUser: string | null;
  network: NetworkRecord;
  secrets: PlannedSecrets | null;
  /** The template's metadata under the spawn's own. */
  metadata: Record<string, string> | null;
  /** A network device (network "full"): part of the machine, so of its base snapshot too. */
  nic: boolean;
  name: string | null;
  main: MainRecord | null;
  idle: (IdlePolicy & { action: "pause" | "stop" }) | null;
  lifecycle: LifecycleRecord | null;
  /** Named volumes to mount (a VM with volumes boots cold: base snapshots have no such disks). */
  volumes: VolumeMount[];
  /** Host directories to mount once it runs. */
  hostDirs: HostDirMount[];
  /** Its RAM is a file of its own (SpawnOptions.forkable). */
  forkable: boolean;
}

/** Pulls an image that a spawn names but that is not local. */
export type Pull = (ref: string) => Promise<LocalImage>;
/** Builds an image of the server's own, or says it cannot (null). */
export type Build = (name: string) => Promise<LocalImage> | null;

/** What planning a spawn reads: the providers, the defaults, the names taken, the templates, and the services that check a network or a mount. */
export interface PlannerDeps {
  readonly paths: Paths;
  readonly opts: Pick<ForgeOptions, "defaults" | "hostSecrets">;
  readonly defaults: SpawnDefaults;
  readonly providers: Providers;
  readonly sandboxes: Pick<SandboxStore, "byName">;
  readonly templates: Pick<TemplateStore, "get">;
  readonly networks: Pick<Networks, "plan">;
  readonly volumes: Pick<Volumes, "plan">;
  readonly hostDirs: Pick<HostDirs, "check">;
  readonly forwards: Pick<Forwards, "require">;
  /** Pulls an image a spawn names that is not local. */
  readonly pull: Pull;
  /** Builds one of the server's own images (a system image) a spawn names before it exists; null where it cannot. */
  readonly build: Build;
}

const NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$/;

/** Turns spawn requests into plans and plans into the rows of new sandboxes. */
export class Planner {
  constructor(private readonly d: PlannerDeps) {}

  /** A name a sandbox may take: well formed, not an id, not held by another sandbox. */
  checkName(name: string | undefined): string | null {
    if (name === undefined) return null;
    if (!NAME.test(name)) throw badRequest(`name "${name}" must be 1-63 letters, digits, "_", "." or "-", starting with a letter or digit`);
    if (/^sb-[0-9a-f]{8}$/.test(name)) throw badRequest(`name "${name}" looks like a sandbox id; pick another`);
    const holder = this.d.sandboxes.byName(name);
    if (holder) throw conflict(`name "${name}" is taken by sandbox ${holder.id} (${holder.state})`);
    return name;
  }

  /** Names for copies of a sandbox named `name`: NAME-1, NAME-2, … skipping those taken (none for an unnamed one). */
  copyNames(name: string | null, count: number): (string | null)[] {
    if (!name) return Array.from({ length: count }, () => null);
    const out: string[] = [];
    for (let i = 1; out.length < count; i++) {
      const candidate = `${name.slice(0, 56)}-${i}`;
      if (!this.d.sandboxes.byName(candidate)) out.push(candidate);
    }
    return out;
  }

  /** What a sandbox's expiry does; a pause keeps its memory on disk, so secrets (which would be in it) rule it out. */
  planLifecycle(opts: Pick<SpawnOptions, "lifecycle">, secrets: PlannedSecrets | null, provider: Provider): LifecycleRecord | null {
    const l = opts.lifecycle;
    if (!l || (l.onExpiry === "destroy" && !l.autoResume)) return null;
    if (l.onExpiry === "pause") this.d.providers.require(provider, "snapshots", "lifecycle: a pause at the timeout");
    if (l.onExpiry === "pause" && secrets) throw badRequest("lifecycle: a sandbox with secrets cannot be paused at its timeout (its memory image would hold them on disk)");
    if (l.pauseMemory === false && l.autoResume) throw badRequest("lifecycle: a pause that keeps the disk only cannot be auto-resumed (it boots cold)");
    return { on_expiry: l.onExpiry, auto_resume: !!l.autoResume, resume_ttl_ms: l.resumeTtlMs ?? 300_000, ...(l.pauseMemory === false ? { pause_memory: false } : {}) };
  }

  /** What the sandbox does once idle: asked for (`idle`, or `idle_stop` as the older name), its template's, the config's, or nothing. */
  private planIdle(opts: SpawnOptions, tpl: TemplateRow | null, secrets: PlannedSecrets | null, provider: Provider): (IdlePolicy & { action: "pause" | "stop" }) | null {
    const asked = opts.idle ?? (opts.idleStopMs !== undefined ? { afterMs: opts.idleStopMs, action: "stop" as const } : undefined);
    const field = opts.idle ? "idle" : "idle_stop";
    const own = asked ?? (tpl?.idle ? parseIdle(tpl.idle, `template ${tpl.name}: idle`) : undefined);
    const policy = own ?? this.d.opts.defaults?.idle;
    if (!policy || policy.action === "none") return null;
    // The config's default applies where it can: a sandbox it cannot pause simply stays up.
    if (!own && (secrets || !provider.features.snapshots)) return null;
    const name = asked ? field : `template ${tpl!.name}: idle`;
    if (!Number.isFinite(policy.afterMs) || policy.afterMs < 1000) throw badRequest(`${name} must be at least 1s`);
    this.d.providers.require(provider, "snapshots", `${name}: a ${policy.action} when idle`);
    if (secrets) throw badRequest(`${name}: a sandbox with secrets cannot be ${policy.action === "pause" ? "paused" : "stopped"} (its memory image would hold them on disk)`);
    return policy as IdlePolicy & { action: "pause" | "stop" };
  }

  /** What a spawn will make: its template's fields filled in, the image resolved (pulled if need be). */
  async plan(opts: SpawnOptions, self?: string): Promise<SpawnPlan> {
    const tpl = opts.template !== undefined ? this.d.templates.get(opts.template) : undefined;
    if (opts.template !== undefined && !tpl) throw notFound(`template "${opts.template}" not found`);
    const provider = this.d.providers.pick(opts.provider || tpl?.provider || undefined, opts.provider ? "provider" : `template ${tpl?.name}: provider`);
    checkEnv(opts.env, "env");
    checkMetadata(opts.metadata);
    checkOwner(opts.ownerId);
    const name = this.checkName(opts.name);
    const network = this.d.networks.plan(
      { mode: opts.network, allow: opts.allow, ports: opts.ports, cache: opts.cache, rules: opts.egressRules ?? tpl?.egress_rules, deny: opts.deny, portAccess: opts.portAccess },
      { allow: tpl?.allowed_hosts },
    );
    const secrets = planSecrets(opts.secrets, tpl?.secrets, this.d.opts.hostSecrets);
    if (network.mode === "full") await checkFullNetwork(provider);
    const d = this.d.defaults;
    const imageName = opts.image ?? tpl?.image ?? d.image;
    // An image that is not local is pulled first when its name is a registry reference, and
    // built first when it is one of the server's own that it can build (the system images).
    const image = await resolveImage(this.d.paths, imageName).catch((e) => {
      if (!(e instanceof ImageNotFoundError)) throw e;
      if (imageName.startsWith("forgevm/")) return this.d.build(imageName) ?? Promise.reject(badRequest(`image: ${e.message}`));
      return this.d.pull(imageName);
    });
    // The spawn's size, else its template's, else what the image says it needs, else the defaults.
    const own = image.sandboxSize ? `image ${image.name}'s size` : null;
    const vcpus = opts.vcpus ?? tpl?.cpu_cores ?? image.sandboxSize?.vcpus ?? d.vcpus;
    checkVcpus(provider, vcpus, opts.vcpus !== undefined ? "vcpus" : tpl?.cpu_cores !== undefined ? `template ${tpl.name}: cpu_cores` : (own ?? "defaults.vcpus"));
    const memoryMb = opts.memoryMb ?? tpl?.memory_mb ?? image.sandboxSize?.memoryMb ?? d.memoryMb;
    checkMemory(provider, memoryMb, opts.memoryMb !== undefined ? "memory_mb" : tpl?.memory_mb !== undefined ? `template ${tpl.name}: memory_mb` : (own ?? "defaults.memory_mb"));
    const forward = checkForward(opts.forward ?? tpl?.forward);
    this.d.forwards.require(forward);
    // Where ssh and git look for what is forwarded.
    const agentEnv = forwardEnv(forward);
    const env = tpl?.env || opts.env || agentEnv ? { ...tpl?.env, ...agentEnv, ...opts.env } : null;
    const metadata = tpl?.metadata || opts.metadata ? { ...tpl?.metadata, ...opts.metadata } : null;
    let execUser: string | null = null;
    if (opts.user === "image") {
      // USER may be "name", "uid" or "name:group"; the agent takes the user part.
      execUser = image.config?.User?.split(":")[0] || null;
    } else if (opts.user) {
      execUser = opts.user;
    }
    const mounts = await this.planMounts(opts.volumes, self);
    if (mounts.volumes.length || mounts.hostDirs.length) this.d.providers.require(provider, "volumes", "volumes");
    return {
      provider,
      forward,
      image,
      init: await this.planInit(opts.system ?? tpl?.system, image, provider, opts.system === undefined && tpl ? `template ${tpl.name}: system` : "system"),
      template: tpl,
      memoryMb,
      vcpus,
      diskMb: opts.diskMb ?? d.diskMb,
      // A template's ttl_seconds of 0 is none; a service (a main process with a restart policy) lives until it is removed.
      ttlMs: opts.ttlMs ?? (tpl?.ttl_seconds !== undefined ? noneIfZero(tpl.ttl_seconds * 1000) : restarts(opts.main) ? NO_TTL : d.ttlMs),
      env,
      execUser,
      network,
      secrets,
      metadata,
      nic: network.mode === "full",
      name,
      main: planMain(image, opts.main),
      idle: this.planIdle(opts, tpl ?? null, secrets, provider),
      lifecycle: this.planLifecycle(opts, secrets, provider),
      forkable: this.planForkable(opts, tpl ?? null, provider),
      ...mounts,
    };
  }

  /**
   * Whether a sandbox boots systemd: `system` when given, else its image's own say (a system image,
   * or the label org.forgevm.init). Asked of an image without systemd, or of a provider that boots
   * no kernel of ours, it is refused before anything starts.
   */
  private async planInit(system: boolean | undefined, image: LocalImage, provider: Provider, field: string): Promise<"systemd" | null> {
    if (system === false) return null;
    if (system === undefined) return provider.features.init ? imageInit(image) : null;
    this.d.providers.require(provider, "init", field);
    if (imageInit(image)) return "systemd";
    if (!(await ext4Has(image.rootfs, SYSTEMD_PATHS)).size)
      throw badRequest(
        `${field}: image ${image.name} has no systemd (${SYSTEMD_PATHS.join(" or ")}); use a system image (forgevm image system debian-12) or one that installs systemd`,
      );
    return "systemd";
  }

  /** Whether its RAM is a file of its own: asked for, or its template's; only where the provider can snapshot. */
  private planForkable(opts: SpawnOptions, tpl: TemplateRow | null, provider: Provider): boolean {
    const forkable = opts.forkable ?? tpl?.forkable ?? false;
    if (forkable) this.d.providers.require(provider, "snapshots", opts.forkable !== undefined ? "forkable" : `template ${tpl!.name}: forkable`);
    return forkable;
  }

  /** The named volumes and host directories "-v" asks for, each checked; two at one path are refused. */
  private async planMounts(specs: string[] | undefined, self?: string): Promise<{ volumes: VolumeMount[]; hostDirs: HostDirMount[] }> {
    const hostSpecs = (specs ?? []).filter(isHostDirSpec);
    const volumes = await this.d.volumes.plan(
      (specs ?? []).filter((s) => !isHostDirSpec(s)),
      self,
    );
    const hostDirs: HostDirMount[] = [];
    for (const spec of hostSpecs) {
      const parts = spec.split(":");
      if (parts.length < 2 || parts.length > 3 || (parts[2] !== undefined && parts[2] !== "ro" && parts[2] !== "rw"))
        throw badRequest(`volumes: "${spec}" is not /host/dir:/path[:ro]`);
      hostDirs.push(await this.d.hostDirs.check(parts[0], parts[1], parts[2] === "ro"));
    }
    const paths = [...volumes.map((v) => v.path), ...hostDirs.map((h) => h.path)];
    const twice = paths.find((p, i) => paths.indexOf(p) !== i);
    if (twice) throw badRequest(`volumes: two mounts at ${twice}`);
    return { volumes, hostDirs };
  }

  /** The `creating` row of a new sandbox made from a plan. */
  newRow(plan: SpawnPlan, opts: { ownerId?: string; ttlMs?: number; idempotencyKey?: string }, id?: string): SandboxRow {
    const what = {
      image: plan.image.name,
      template: plan.template?.name ?? null,
      memory_mb: plan.memoryMb,
      vcpus: plan.vcpus,
      disk_mb: plan.diskMb,
      env: plan.env,
      exec_user: plan.execUser,
      network: plan.network,
      provider: plan.provider.name,
    };
    return {
      ...this.rowOf(what, { ttlMs: opts.ttlMs ?? plan.ttlMs, ownerId: opts.ownerId, metadata: plan.metadata ?? undefined }, id),
      name: plan.name,
      main: plan.main,
      idle_ms: plan.idle?.afterMs ?? null,
      idle_action: plan.idle?.action ?? null,
      forkable: plan.forkable ? 1 : 0,
      lifecycle: plan.lifecycle,
      idempotency_key: opts.idempotencyKey ?? null,
      volumes: plan.volumes.length ? plan.volumes : null,
      host_dirs: plan.hostDirs.length ? plan.hostDirs : null,
      forward: plan.forward.length ? plan.forward.join(",") : null,
      init: plan.init,
    };
  }

  /** A new `creating` row for a sandbox like `what` (a plan, a fork's parent, a snapshot). */
  rowOf(
    what: Pick<SandboxRow, "image" | "template" | "memory_mb" | "vcpus" | "disk_mb" | "env" | "exec_user"> & { network?: NetworkRecord | null; provider?: string },
    opts: { ttlMs: number; ownerId?: string | null; metadata?: Record<string, string> | null; snapshotId?: string },
    id = newSandboxId(),
  ): SandboxRow {
    const now = Date.now();
    return {
      id,
      state: "creating",
      provider: what.provider ?? this.d.providers.default.name,
      image: what.image,
      memory_mb: what.memory_mb,
      vcpus: what.vcpus,
      disk_mb: what.disk_mb,
      owner_id: opts.ownerId ?? null,
      metadata: opts.metadata ?? null,
      created_at: new Date(now).toISOString(),
      expires_at: expiryAfter(opts.ttlMs, now),
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
      name: null,
      main: null,
      idle_ms: null,
      idle_action: null,
      forkable: 0,
      paused_reason: null,
      paused_keep: null,
      volumes: null,
      host_dirs: null,
      spec: null,
      lifecycle: null,
      idempotency_key: null,
    };
  }
}

/** Whether a spawn's main process has a restart policy, which makes the sandbox a service. */
function restarts(main: SpawnOptions["main"]): boolean {
  return !!main?.restart && parseRestart(main.restart).policy !== "no";
}

/** An image's STOPSIGNAL ("SIGINT", "INT", "2") as a number; undefined when absent or unknown. */
function signalNumber(name: unknown): number | undefined {
  if (typeof name !== "string" || !name) return undefined;
  if (/^\d{1,2}$/.test(name)) return Number(name) >= 1 && Number(name) <= 64 ? Number(name) : undefined;
  const upper = name.toUpperCase();
  return (osConstants.signals as Record<string, number>)[upper.startsWith("SIG") ? upper : `SIG${upper}`];
}

/** The main process a spawn asks for: the image's ENTRYPOINT with the given command, else its CMD. */
export function planMain(image: LocalImage, main: SpawnOptions["main"]): MainRecord | null {
  if (!main) return null;
  const { policy, max } = parseRestart(main.restart ?? "no");
  const entry = image.config?.Entrypoint ?? [];
  const command = [...entry, ...(main.command ?? image.config?.Cmd ?? [])];
  if (!command.length) throw badRequest(`main.command: image ${image.name} has no ENTRYPOINT or CMD; give the command to run`);
  const user = image.config?.User?.split(":")[0] || undefined;
  const stopSignal = signalNumber(image.config?.StopSignal);
  const healthcheck = healthSpec(image.config?.Healthcheck);
  return {
    command,
    ...(user ? { user } : {}),
    ...(stopSignal !== undefined && stopSignal !== 15 ? { stop_signal: stopSignal } : {}),
    ...(healthcheck ? { healthcheck } : {}),
    restart: policy,
    ...(max !== undefined ? { max_restarts: max } : {}),
    restarts: 0,
    exit_code: null,
    started_at: null,
    finished_at: null,
    stopped_by_user: false,
  };
}

/** "no", "always", "unless-stopped", "on-failure" or "on-failure:N". */
export function parseRestart(text: string): { policy: RestartPolicy; max?: number } {
  const m = /^(no|always|unless-stopped|on-failure)(?::(\d{1,4}))?$/.exec(text);
  if (!m || (m[2] !== undefined && m[1] !== "on-failure")) throw badRequest(`main.restart must be no, always, unless-stopped or on-failure[:MAX], got "${text}"`);
  return { policy: m[1] as RestartPolicy, ...(m[2] !== undefined ? { max: Number(m[2]) } : {}) };
}

export function newSandboxId(): string {
  return `sb-${randomBytes(4).toString("hex")}`;
}

/** Where an image keeps systemd: merged /usr first, then a /lib of its own. */
const SYSTEMD_PATHS = ["/usr/lib/systemd/systemd", "/lib/systemd/systemd"];
