// The core: sandbox lifecycle over a provider, recorded in the store, announced as events.
// Every interface (library, CLI, REST) calls these functions; none of them knows about HTTP.
import { randomBytes } from "node:crypto";
import { copyFile, mkdir, readFile, readdir, rm, stat } from "node:fs/promises";
import { join } from "node:path";
import { defaultDataDir, pathsFor, type Paths } from "../config/paths.js";
import { importArchive } from "../images/archive.js";
import { BlobStore, DigestMismatchError } from "../images/blobs.js";
import { LayerError } from "../images/flatten.js";
import { installImage } from "../images/install.js";
import { ImageFormatError } from "../images/oci.js";
import { parseReference, type ImageReference } from "../images/reference.js";
import { PullError, RegistryClient, dockerConfigCredentials, type Credentials, type RegistryOptions } from "../images/registry.js";
import { TarError } from "../images/tar.js";
import { importOciLayout } from "../images/oci-layout.js";
import { DEFAULT_IMAGE, ImageNotFoundError, canonicalName, listImages, resolveImage, type LocalImage } from "../images/store.js";
import type { AccelMode } from "../providers/qemu/accel.js";
import { QemuProvider } from "../providers/qemu/qemu-provider.js";
import { openDb, type Db } from "../store/db.js";
import { EventStore } from "../store/events.js";
import { SandboxStore, type SandboxRow } from "../store/sandboxes.js";
import { TemplateStore } from "../store/templates.js";
import { badRequest, conflict, ForgevmError, notFound } from "./errors.js";
import { EventBus } from "./events.js";
import { Sandbox, type ExecDefaults } from "./sandbox.js";

export interface ForgeOptions {
  /** Data directory (default: $FORGEVM_DATA_DIR or the XDG data directory). */
  dataDir?: string;
  accel?: AccelMode;
  /** SQLite file; default `<dataDir>/forgevm.db`. */
  dbPath?: string;
  /** Defaults for spawns that leave fields out. */
  defaults?: Partial<SpawnDefaults>;
  /** Check expiries every this many ms (0 disables the reaper; default 1000). */
  reapIntervalMs?: number;
  /** How long rows of destroyed sandboxes are kept (default 7 days). */
  historyRetentionMs?: number;
  /** Registry logins from the config, by registry host; ~/.docker/config.json is the fallback. */
  registryAuth?: Record<string, Credentials>;
}

export interface SpawnDefaults {
  image: string;
  memoryMb: number;
  vcpus: number;
  diskMb: number;
  ttlMs: number;
}

export interface SpawnOptions {
  /** Image name; default DEFAULT_IMAGE. */
  image?: string;
  memoryMb?: number;
  vcpus?: number;
  /** Writable disk size; the guest's root filesystem grows to fill it. */
  diskMb?: number;
  hostname?: string;
  bootTimeoutMs?: number;
  /** Lifetime; the reaper destroys the sandbox when it passes. */
  ttlMs?: number;
  ownerId?: string;
  metadata?: Record<string, string>;
  /** Environment every exec in this sandbox gets (an exec's own env wins). */
  env?: Record<string, string>;
  /** A stored template whose fields fill in what these options leave out. */
  template?: string;
  /** Who execs run as by default: a user name or uid, or "image" for the image's USER (default root). */
  user?: string;
}

export const SPAWN_DEFAULTS: SpawnDefaults = { image: DEFAULT_IMAGE, memoryMb: 512, vcpus: 1, diskMb: 2048, ttlMs: 30 * 60_000 };

export class Forge {
  private readonly live = new Map<string, Sandbox>();
  private readonly destroying = new Map<string, Promise<void>>();
  private readonly pulls = new Map<string, Promise<LocalImage>>();
  private readonly registryCredentials = async (registry: string) => this.opts.registryAuth?.[registry] ?? dockerConfigCredentials(registry);
  private reaper: NodeJS.Timeout | null = null;
  readonly sandboxes: SandboxStore;
  readonly templates: TemplateStore;
  readonly blobs: BlobStore;
  readonly events: EventBus;
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
    this.blobs = new BlobStore(paths.blobsDir);
    this.eventStore = new EventStore(db);
    this.events = new EventBus(this.eventStore);
    this.defaults = { ...SPAWN_DEFAULTS, ...opts.defaults };
  }

  /** Opens ForgeVM on a data directory that ./setup.sh has prepared. */
  static async open(opts: ForgeOptions = {}): Promise<Forge> {
    const paths = pathsFor(opts.dataDir ?? defaultDataDir());
    const db = openDb(opts.dbPath ?? join(paths.dataDir, "forgevm.db"));
    const forge = new Forge(paths, new QemuProvider({ paths, accel: opts.accel ?? envAccel() }), db, opts);
    await forge.reconcile();
    const every = opts.reapIntervalMs ?? 1000;
    if (every > 0) {
      forge.reaper = setInterval(() => void forge.reap(), every);
      forge.reaper.unref();
    }
    return forge;
  }

  /** Boots a sandbox and returns once its agent answers; a failed boot is recorded as `error`. */
  async spawn(opts: SpawnOptions = {}): Promise<Sandbox> {
    if (this.closed) throw new ForgevmError("UNAVAILABLE", "the server is shutting down");
    const tpl = opts.template !== undefined ? this.templates.get(opts.template) : undefined;
    if (opts.template !== undefined && !tpl) throw notFound(`template "${opts.template}" not found`);
    if (tpl) {
      opts = {
        ...opts,
        image: opts.image ?? tpl.image,
        memoryMb: opts.memoryMb ?? tpl.memory_mb,
        vcpus: opts.vcpus ?? tpl.cpu_cores,
        ttlMs: opts.ttlMs ?? (tpl.ttl_seconds ? tpl.ttl_seconds * 1000 : undefined),
        env: tpl.env || opts.env ? { ...tpl.env, ...opts.env } : undefined,
      };
    }
    const d = this.defaults;
    const imageName = opts.image ?? d.image;
    // An image that is not local is pulled first when its name is a registry reference.
    const image = await resolveImage(this.paths, imageName).catch((e) => {
      if (!(e instanceof ImageNotFoundError)) throw e;
      if (imageName.startsWith("forgevm/")) throw badRequest(`image: ${e.message}`);
      return this.pullImage(imageName);
    });
    const id = `sb-${randomBytes(4).toString("hex")}`;
    const now = Date.now();
    const row: SandboxRow = {
      id,
      state: "creating",
      provider: this.provider.name,
      image: image.name,
      memory_mb: opts.memoryMb ?? d.memoryMb,
      vcpus: opts.vcpus ?? d.vcpus,
      disk_mb: opts.diskMb ?? d.diskMb,
      owner_id: opts.ownerId ?? null,
      metadata: opts.metadata ?? null,
      created_at: new Date(now).toISOString(),
      expires_at: new Date(now + (opts.ttlMs ?? d.ttlMs)).toISOString(),
      destroyed_at: null,
      error: null,
      vm_pid: null,
      vm_dir: null,
      manager_pid: process.pid,
      env: opts.env ?? null,
      template: tpl?.name ?? null,
      exec_user: null,
    };
    if (opts.user === "image") {
      // USER may be "name", "uid" or "name:group"; the agent takes the user part.
      row.exec_user = image.config?.User?.split(":")[0] || null;
    } else if (opts.user) {
      row.exec_user = opts.user;
    }
    this.sandboxes.insert(row);
    this.events.emit("sandbox.created", id, { image: row.image, memory_mb: row.memory_mb, vcpus: row.vcpus });
    try {
      const vm = await this.provider.spawn({
        id,
        rootfs: image.rootfs,
        memoryMb: row.memory_mb,
        vcpus: row.vcpus,
        diskMb: row.disk_mb,
        hostname: opts.hostname ?? id,
        bootTimeoutMs: opts.bootTimeoutMs,
      });
      // Destroyed while booting (a DELETE, or shutdown): stop the VM instead of handing it out.
      if (this.sandboxes.get(id)?.state !== "creating" || this.closed) {
        await vm.destroy();
        throw new ForgevmError("CONFLICT", `sandbox ${id} was destroyed while it was starting`);
      }
      const sb = new Sandbox(id, image.name, vm, (s) => this.destroy(s.id), this.events.emit, execDefaults(image, row.env, row.exec_user));
      this.live.set(id, sb);
      this.sandboxes.update(id, { state: "running", vm_pid: vm.info.pid, vm_dir: vm.info.dir });
      this.events.emit("sandbox.running", id, { boot_ms: vm.info.bootMs, accel: vm.info.accel });
      for (const [i, cmd] of (tpl?.setup ?? []).entries()) {
        const r = await sb.exec(cmd, { timeoutMs: 10 * 60_000 }).catch((e: Error) => ({ exitCode: -1, stderr: e.message }));
        if (r.exitCode !== 0) {
          const reason = `template setup command ${i + 1} (${cmd}) failed with exit code ${r.exitCode}: ${r.stderr.trim().split("\n").slice(-3).join(" / ")}`;
          await this.destroy(id);
          this.sandboxes.update(id, { state: "error", error: reason });
          this.events.emit("sandbox.error", id, { error: reason });
          throw badRequest(reason);
        }
      }
      return sb;
    } catch (e) {
      if (this.sandboxes.get(id)?.state === "creating" && !(e instanceof ForgevmError)) {
        const reason = (e as Error).message;
        this.sandboxes.update(id, { state: "error", error: reason, destroyed_at: new Date().toISOString() });
        this.events.emit("sandbox.error", id, { error: reason.split("\n")[0] });
      }
      throw e;
    }
  }

  /** Pulls an image from its registry (verifying every byte) and installs it; concurrent pulls of one image share the work. */
  pullImage(reference: string, log?: (m: string) => void, onLayerBytes?: RegistryOptions["onLayerBytes"]): Promise<LocalImage> {
    let ref: ImageReference;
    try {
      ref = parseReference(reference);
    } catch (e) {
      return Promise.reject(badRequest(`image: ${(e as Error).message}`));
    }
    const running = this.pulls.get(ref.canonical);
    if (running) return running;
    const p = (async () => {
      this.events.emit("image.pulling", null, { image: ref.canonical });
      // Progress goes to the caller and out as events, so an API client waiting on a spawn sees it.
      const progress = (m: string) => {
        log?.(m);
        this.events.emit("image.progress", null, { image: ref.canonical, message: m });
      };
      try {
        const r = await new RegistryClient({ log: progress, onLayerBytes, credentials: this.registryCredentials }).pull(ref, this.blobs);
        await installImage(this.paths, this.blobs, { name: ref.canonical, source: ref.canonical, ...r }, progress);
      } catch (e) {
        throw pullFailure(e, ref);
      }
      this.events.emit("image.pulled", null, { image: ref.canonical });
      return resolveImage(this.paths, ref.canonical);
    })().finally(() => this.pulls.delete(ref.canonical));
    this.pulls.set(ref.canonical, p);
    return p;
  }

  /**
   * Imports an image from an OCI layout directory, an OCI archive or a `docker save` tarball.
   * `name` may be left out for a docker save tarball, which carries its own tag.
   */
  async importImage(source: string, name?: string, tag?: string, log?: (m: string) => void): Promise<LocalImage> {
    const st = await stat(source).catch(() => null);
    if (!st) throw badRequest(`${source} does not exist`);
    try {
      if (st.isDirectory()) {
        if (!name) throw badRequest("importing an OCI layout directory needs a name");
        const meta = await importOciLayout(this.paths, this.blobs, source, canonicalName(name), tag, log);
        return await resolveImage(this.paths, meta.name);
      }
      const meta = await importArchive(this.paths, this.blobs, source, canonicalName, name, tag, log);
      return await resolveImage(this.paths, meta.name);
    } catch (e) {
      if (e instanceof ForgevmError || e instanceof DigestMismatchError || e instanceof LayerError) throw e;
      if (e instanceof ImageFormatError || e instanceof TarError) throw badRequest(e.message);
      throw e;
    }
  }

  /** Removes a local image; refused while a live sandbox uses it. */
  async removeImage(name: string): Promise<void> {
    const image = await resolveImage(this.paths, name).catch((e) => {
      throw e instanceof ImageNotFoundError ? notFound(e.message) : e;
    });
    if (image.name === DEFAULT_IMAGE) throw conflict(`${DEFAULT_IMAGE} is the built-in default image; ./setup.sh builds it`);
    const users = this.list().filter((r) => r.image === image.name).map((r) => r.id);
    if (users.length) throw conflict(`image ${image.name} is in use by ${users.join(", ")}`);
    await rm(image.dir, { recursive: true, force: true });
  }

  /** Deletes blobs that no local image refers to; returns how many. */
  async pruneBlobs(): Promise<number> {
    const used = new Set((await listImages(this.paths)).flatMap((i) => i.layers ?? []).map((d) => d.slice(7)));
    let removed = 0;
    for (const f of await readdir(join(this.paths.blobsDir, "sha256")).catch(() => [])) {
      if (used.has(f)) continue;
      await rm(join(this.paths.blobsDir, "sha256", f), { force: true });
      removed++;
    }
    return removed;
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
      if (sb) await sb.vm.destroy();
      this.events.emit(reason === "expired" ? "sandbox.expired" : "sandbox.destroyed", id);
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
    await Promise.all([...this.live.keys()].map((id) => this.destroy(id)));
    await this.provider.destroyAll();
    this.db.close();
  }

  private async reap(): Promise<void> {
    try {
      await this.prune();
      const cutoff = new Date(Date.now() - (this.opts.historyRetentionMs ?? 7 * 86_400_000)).toISOString();
      for (const id of this.sandboxes.pruneHistory(cutoff)) await rm(this.keptLogPath(id), { force: true });
      this.eventStore.trim(cutoff);
    } catch {
      // the next tick tries again
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
          this.live.set(row.id, new Sandbox(row.id, row.image, vm, (s) => this.destroy(s.id), this.events.emit, execDefaults(image, row.env, row.exec_user)));
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
      await rm(row.vm_dir ?? join(this.paths.vmsDir, row.id), { recursive: true, force: true });
      const reason = `the server restarted and could not re-attach to this VM${row.error ? `: ${row.error}` : ""}`;
      this.sandboxes.update(row.id, { state: "error", error: reason, destroyed_at: new Date().toISOString() });
      this.events.emit("sandbox.error", row.id, { error: reason });
    }
  }
}

function pullFailure(e: unknown, ref: ImageReference): Error {
  if (e instanceof ForgevmError) return e;
  const msg = `image ${ref.canonical}: ${(e as Error).message}`;
  if (e instanceof PullError) {
    if (e.kind === "unreachable") return new ForgevmError("UNAVAILABLE", msg);
    if (e.kind === "not_found") return notFound(msg);
  }
  if (e instanceof PullError || e instanceof DigestMismatchError || e instanceof ImageFormatError || e instanceof LayerError || e instanceof TarError) return badRequest(msg);
  return e as Error;
}

/** Exec defaults of a sandbox: the image's env and working directory, then the sandbox's env. */
function execDefaults(image: LocalImage | null, env: Record<string, string> | null, user: string | null): ExecDefaults {
  const fromImage: Record<string, string> = {};
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

function envAccel(): AccelMode | undefined {
  const v = process.env.FORGEVM_ACCEL;
  if (v === undefined || v === "") return undefined;
  if (v === "auto" || v === "kvm" || v === "tcg") return v;
  throw new RangeError(`FORGEVM_ACCEL must be auto, kvm or tcg, got "${v}"`);
}
