// The sandbox operations every interface calls: spawn and create, the stored records, the
// lifecycle (stop, start, pause, resume, destroy), the main process and the access tokens. Each
// method checks what the call needs (room on disk, the sandbox's state) and hands the work to the
// operation modules (spawn.ts, create.ts, lifecycle.ts, stop-start.ts, pause.ts, reaper.ts).
import { expiryAfter } from "../../schemas/durations.js";
import { badRequest, ForgevmError, notFound, sandboxGone } from "../../http/errors.js";
import { defaultAccount, GuestSession, type RelativePaths } from "../guest/session.js";
import { ignore } from "../../util/ignore.js";
import { checkMetadata } from "../../schemas/checks.js";
import type { Paths } from "../../config/paths.js";
import type { SandboxRow, SandboxState, SandboxStore } from "../../store/sandboxes.js";
import type { SnapshotStore } from "../../store/snapshots.js";
import type { TemplateStore } from "../../store/templates.js";
import type { EventBus } from "../events.js";
import type { DiskSpace } from "../host/disk-space.js";
import type { ServerMetrics } from "../metrics/prometheus.js";
import type { SandboxTable } from "../sandboxes/table.js";
import type { Lifecycle } from "../sandboxes/lifecycle.js";
import type { Pauses } from "../sandboxes/pause.js";
import type { StopStart } from "../sandboxes/stop-start.js";
import type { Spawner } from "../sandboxes/spawn.js";
import type { Creates } from "../sandboxes/create.js";
import type { Reaper } from "../sandboxes/reaper.js";
import { guestProcesses, type GuestProcess } from "../guest/guest-processes.js";
import { logs, type EndReason } from "../sandboxes/lifecycle.js";
import { followMainLog, readMainLog, type LogLine } from "../sandboxes/main-process.js";
import type { SpawnOptions } from "../options.js";
import { lifeAfterWake } from "../sandboxes/pause.js";
import type { Sandbox } from "../guest/sandbox.js";
import { requireState } from "../sandboxes/states.js";
import { balloonState, setBalloon, type BalloonState } from "../sandboxes/balloon.js";
import type { Tokens } from "../sandboxes/tokens.js";
import { setScreen } from "../guest/desktop/screen.js";

/** The cluster node this server is, once it joined one: it names itself in every sandbox's JSON. */
export interface ClusterLink {
  member: { readonly id: string; mirrorTemplates(): Promise<void> } | null;
}

/** What the sandbox calls read and hand over to: the rows and run-time state, the disk's room, the counters, and the operations. */
export interface SandboxesDeps {
  readonly paths: Paths;
  readonly sandboxes: SandboxStore;
  readonly snapshotRows: Pick<SnapshotStore, "get">;
  readonly templates: Pick<TemplateStore, "get">;
  readonly table: SandboxTable;
  readonly events: Pick<EventBus, "subscribe">;
  readonly disk: Pick<DiskSpace, "require" | "requireAnswering" | "full" | "waiting">;
  readonly prom: Pick<ServerMetrics, "spawned" | "spawnFailed">;
  readonly spawner: Pick<Spawner, "spawn">;
  readonly creates: Pick<Creates, "create" | "startCreated">;
  readonly lifecycle: Pick<Lifecycle, "destroy">;
  readonly pauses: Pick<Pauses, "pause" | "resume" | "wake">;
  readonly stopStart: Pick<StopStart, "stop" | "start" | "restart" | "kill" | "lifeOf">;
  readonly reaper: Pick<Reaper, "prune">;
}

/** What the sandbox operations need from outside the core: the access tokens and the cluster node. */
export interface SandboxHooks {
  tokens: Tokens;
  cluster: ClusterLink;
}

export class SandboxesFacade {
  // Creates in progress by idempotency key: a retry that comes meanwhile waits for the same one.
  private readonly creatingByKey = new Map<string, { id: Promise<string>; fingerprint?: string }>();

  constructor(
    private readonly d: SandboxesDeps,
    private readonly hooks: SandboxHooks,
  ) {}

  /**
   * Starts a sandbox and returns once its agent answers: restored from its image's (or
   * template's) base snapshot when one exists or can be made, else booted. A failed start is
   * recorded as `error`.
   */
  async spawn(opts: SpawnOptions = {}): Promise<Sandbox> {
    this.d.disk.require("a spawn");
    const started = performance.now();
    try {
      // A template made through another front may not have reached this node's mirror yet.
      const member = this.hooks.cluster.member;
      if (member && opts.template && !this.d.templates.get(opts.template)) await member.mirrorTemplates();
      const sb = await this.d.spawner.spawn(opts);
      // A desktop's screen is a mode of its running X server: set once it runs (the base snapshot holds the default one).
      if (opts.screen) {
        await setScreen(sb, opts.screen).catch(async (e) => {
          await this.destroy(sb.id, "spawn", "failed").catch(ignore("the sandbox may be gone already; the screen's error is the one reported"));
          throw e;
        });
      }
      this.d.prom.spawned((performance.now() - started) / 1000, this.d.sandboxes.get(sb.id)?.origin ?? "boot");
      return sb;
    } catch (e) {
      this.d.prom.spawnFailed();
      throw e;
    }
  }

  /**
   * Gives a new sandbox the guest account an interface runs its commands as (E2B's `user`,
   * Daytona's), made where the image lacks it. One that cannot be made ends the sandbox, named as
   * ended by `by`, and fails with a 400 naming the account: the caller never gets a sandbox its
   * own commands cannot run in.
   */
  async withAccount(sb: Sandbox, account: { name: string; home: string }, by: string): Promise<void> {
    try {
      await sb.ensureUser(account.name, account.home);
    } catch (e) {
      await this.destroy(sb.id, by, "failed").catch(ignore("the sandbox may be gone already; the account's error is the one reported"));
      throw badRequest(`user "${account.name}": ${(e as Error).message}`);
    }
  }

  /**
   * Runs `make` (a spawn or create given `key`) once per idempotency key: a retry gets the
   * sandbox the first try made (waiting for it while it starts); a sandbox that ended since is a
   * 409 naming it, and so is a retry whose create differs from the first (`fingerprint`, a digest of
   * what it asked for). Resolves with its id and whether it was made before.
   */
  async once(key: string, make: () => Promise<string>, fingerprint?: string): Promise<{ id: string; replayed: boolean }> {
    const differs = (fp: string | null | undefined) => {
      if (fingerprint && fp && fp !== fingerprint)
        throw new ForgevmError("CONFLICT", "Idempotency-Key: this key was sent before with a different create; a retry sends the same body, another create another key");
    };
    const pending = this.creatingByKey.get(key);
    if (pending) {
      differs(pending.fingerprint);
      return { id: await pending.id, replayed: true };
    }
    const made = this.d.sandboxes.byIdempotencyKey(key);
    if (made) {
      differs(made.idempotency_fingerprint);
      if (made.state === "destroyed" || made.state === "error")
        throw new ForgevmError(
          "CONFLICT",
          `Idempotency-Key: the sandbox this key made (${made.id}) is ${made.state}${made.error ? `: ${made.error.split("\n")[0]}` : ""}; send another key to make another`,
        );
      return { id: made.id, replayed: true };
    }
    const p = make().then((id) => {
      // A sandbox claimed from a warm pool was made before the key came: it takes it now.
      if (!this.d.sandboxes.get(id)?.idempotency_key) this.d.sandboxes.update(id, { idempotency_key: key });
      if (fingerprint) this.d.sandboxes.update(id, { idempotency_fingerprint: fingerprint });
      return id;
    });
    this.creatingByKey.set(key, { id: p, fingerprint });
    try {
      return { id: await p, replayed: false };
    } finally {
      this.creatingByKey.delete(key);
    }
  }

  /** The id of a sandbox named by its id or its name. */
  idOf(idOrName: string): string {
    if (this.d.sandboxes.get(idOrName)) return idOrName;
    return this.d.sandboxes.byName(idOrName)?.id ?? idOrName;
  }

  /** The stored record of any sandbox ever seen (history included), by id or name. */
  get(idOrName: string): SandboxRow {
    const id = this.idOf(idOrName);
    const row = this.d.sandboxes.get(id);
    if (!row) throw sandboxGone(id, `sandbox ${id} not found`);
    return this.onNode(row);
  }

  /** The stored record of a sandbox, or null when there is none. */
  find(id: string): SandboxRow | null {
    return this.d.sandboxes.get(id) ?? null;
  }

  /** Live sandboxes (creating or running), newest first. */
  list(ownerId?: string, states: SandboxState[] = ["creating", "running"]): SandboxRow[] {
    return this.d.sandboxes.list(states, ownerId).map((r) => this.onNode(r));
  }

  private onNode(row: SandboxRow): SandboxRow {
    const member = this.hooks.cluster.member;
    return member ? { ...row, node: member.id } : row;
  }

  /** How many sandboxes are live, and how many rows the store holds. */
  counts(): { live: number; total: number } {
    return this.d.sandboxes.count();
  }

  /** Whether the data directory's disk is full, and which sandboxes wait for room. */
  storage(): { full: boolean; waiting_sandboxes: string[] } {
    return { full: this.d.disk.full, waiting_sandboxes: [...this.d.disk.waiting] };
  }

  /** The running sandbox with this id (or name), ready for exec and file operations. */
  running(idOrName: string): Sandbox {
    const id = this.idOf(idOrName);
    const sb = this.d.table.live.get(id);
    if (sb) {
      this.d.disk.requireAnswering(id);
      return sb;
    }
    const row = this.d.sandboxes.get(id);
    if (!row) throw sandboxGone(id, `sandbox ${id} not found`);
    requireState(row, "exec");
    throw new ForgevmError("CONFLICT", `sandbox ${id} is run by another ForgeVM process`);
  }

  /** The running sandbox with this id (or name), resumed first when it is paused (`by` names the call in its sandbox.resumed event). */
  async use(idOrName: string, by: string): Promise<Sandbox> {
    const id = this.idOf(idOrName);
    await this.d.pauses.wake(id, by, true);
    return this.running(id);
  }

  /**
   * A caller's session on a running sandbox (guest/session.ts), the one every interface's calls go
   * through: found by id or name and woken as `use` does; its account `user` (default: the
   * sandbox's default user, else root; a name the guest does not have is a 404); commands starting
   * in the sandbox's working directory, or the account's home with `workDir: "home"`.
   */
  async session(idOrName: string, by: string, o: { user?: string; relative: RelativePaths; workDir?: "sandbox" | "home" }): Promise<GuestSession> {
    const sandbox = await this.use(idOrName, by);
    const name = o.user ?? this.d.sandboxes.get(sandbox.id)?.exec_user ?? undefined;
    const user = o.user !== undefined ? await sandbox.guestUser(o.user) : await defaultAccount(sandbox, name);
    if (!user) throw notFound(`user "${o.user}" does not exist in sandbox ${sandbox.id}`);
    const workDir = o.workDir === "home" ? user.home : await sandbox.workDir();
    return new GuestSession(sandbox, user, workDir, o.relative);
  }

  /** Sets a new expiry `ttlMs` from now. */
  extend(id: string, ttlMs: number): SandboxRow {
    const row = this.get(id);
    requireState(row, "extend");
    this.d.sandboxes.update(row.id, { expires_at: expiryAfter(ttlMs) });
    return this.get(row.id);
  }

  /** Replaces a sandbox's metadata (keys and values are strings, checked as at spawn). */
  setMetadata(id: string, metadata: Record<string, string>): SandboxRow {
    const row = this.get(id);
    checkMetadata(metadata);
    this.d.sandboxes.setMetadata(row.id, Object.keys(metadata).length ? metadata : null);
    return this.get(row.id);
  }

  /** Sets what a sandbox does once idle `ms` (null: nothing), from its next idle spell on. */
  setIdle(id: string, policy: { ms: number; action: "pause" | "stop" } | null): SandboxRow {
    const row = this.get(id);
    this.d.sandboxes.update(row.id, { idle_ms: policy?.ms ?? null, idle_action: policy?.action ?? null });
    return this.get(row.id);
  }

  /** Stops a sandbox and removes its files; idempotent for sandboxes that existed. */
  async destroy(id: string, by = "api", reason: EndReason = "request"): Promise<void> {
    return this.d.lifecycle.destroy(this.idOf(id), { reason, by });
  }

  /** Stops a running sandbox: its main process gets SIGTERM, then SIGKILL after `graceMs`; its disk is kept and it costs no memory. */
  async stop(id: string, graceMs?: number): Promise<SandboxRow> {
    this.d.disk.require("a stop (its memory is saved)");
    await this.d.stopStart.stop(this.idOf(id), graceMs);
    return this.get(id);
  }

  /** Defines a sandbox without starting it (Docker's create): checked, its image pulled, its name taken; `start` boots it. */
  async create(opts: SpawnOptions = {}): Promise<SandboxRow> {
    this.d.disk.require("a create");
    return this.d.creates.create(opts);
  }

  /** Starts a created sandbox, or a stopped one again (files as they were, its main process run anew); it lives `ttlMs` from now. */
  async start(id: string, ttlMs?: number): Promise<Sandbox> {
    const row = this.get(id);
    if (row.state === "created") return this.d.creates.startCreated(row.id, ttlMs);
    return this.d.stopStart.start(row.id, this.d.stopStart.lifeOf(row, ttlMs));
  }

  /** Stops (when running) and starts a sandbox. */
  async restart(id: string, ttlMs?: number, graceMs?: number): Promise<Sandbox> {
    const row = this.get(id);
    if (row.state === "created") return this.start(id, ttlMs);
    return this.d.stopStart.restart(row.id, this.d.stopStart.lifeOf(row, ttlMs), graceMs);
  }

  /** Sends a signal (a number) to a sandbox's main process. */
  async kill(id: string, signal: number): Promise<void> {
    return this.d.stopStart.kill(this.idOf(id), signal);
  }

  /** A sandbox's main process output: the last `tail` lines, or those since `sinceMs` (kept after it is gone). */
  async mainLogs(id: string, opts: { tail?: number; sinceMs?: number } = {}): Promise<LogLine[]> {
    const row = this.get(id);
    const read = () => readMainLog(this.d, row.id, opts);
    const runner = this.d.table.mains.get(row.id);
    return runner ? (await runner.between(read)).value : read();
  }

  /**
   * A sandbox's main process output, the past first (the last `tail` lines, or those since
   * `sinceMs`) and then each line it writes, every line once (main-process.ts `followMainLog`);
   * `onEnd` once it has ended for good or the sandbox stops running. Returns the unsubscribe function.
   */
  followMain(id: string, opts: { tail?: number; sinceMs?: number }, onLine: (l: LogLine) => void, onEnd: () => void): () => void {
    const row = this.get(id);
    const runner = this.d.table.mains.get(row.id);
    const follower = followMainLog(this.d, row.id, runner, opts, onLine, onEnd);
    if (!runner || runner.finished) {
      follower.end();
      return follower.off;
    }
    // A pause that carried the sandbox's streams over (pause.ts) leaves the main process running.
    const offEvents = this.d.events.subscribe((e) => {
      if (e.sandbox_id !== row.id) return;
      if (["sandbox.stopped", "sandbox.destroyed", "sandbox.expired", "sandbox.error"].includes(e.type) || (e.type === "sandbox.paused" && !e.data?.streams_kept)) follower.end();
    });
    // A client following the logs: the sandbox does not idle meanwhile, but the follower wakes no pause.
    const offIdle = (this.d.table.live.get(row.id) ?? this.d.table.sleeping.get(row.id))?.follow() ?? (() => {});
    return () => {
      offIdle();
      offEvents();
      follower.off();
    };
  }

  /** The processes running in a sandbox (its cgroup), read from the guest's /proc. */
  async processes(id: string): Promise<GuestProcess[]> {
    return guestProcesses(await this.use(id, "processes"));
  }

  /**
   * A running sandbox's balloon (sandboxes/balloon.ts); with `sizeMb`, first leaves the sandbox that
   * much of the memory it was given, without a restart. Not a paused one: it holds no memory to give.
   */
  async balloon(idOrName: string, sizeMb?: number): Promise<BalloonState> {
    const sb = this.running(idOrName);
    const { memory_mb } = this.get(sb.id);
    return sizeMb === undefined ? balloonState(sb, memory_mb) : setBalloon(sb, memory_mb, sizeMb);
  }

  /** Saves a running sandbox's whole state (with `memory: false`, its disk only) and stops its VM (no memory or CPU while paused). */
  async pause(id: string, opts: { memory?: boolean } = {}): Promise<void> {
    this.d.disk.require("a pause (its memory is saved)");
    return this.d.pauses.pause(this.running(id), "paused", "request", opts.memory !== false);
  }

  /** Brings a paused sandbox back under its id, processes and files as they were, to live `ttlMs` from now (default: what it had left). */
  async resume(id: string, ttlMs?: number, opts: { reboot?: boolean } = {}): Promise<Sandbox> {
    const row = this.get(id);
    if (this.d.table.waking.has(row.id)) await this.d.table.waking.get(row.id);
    if (this.d.table.live.has(row.id) && ttlMs === undefined) return this.running(row.id);
    return this.d.pauses.resume(row.id, ttlMs ?? lifeAfterWake(this.d.snapshotRows, row), "paused", "request", opts);
  }

  /** Resumes a sandbox paused with auto-resume (its lifecycle) before a call `by` is served; nothing for any other. */
  wake(id: string, by: string): Promise<void> {
    return this.d.pauses.wake(this.idOf(id), by);
  }

  /** Destroys every live sandbox whose expiry has passed; returns how many. */
  async prune(): Promise<number> {
    return this.d.reaper.prune();
  }

  /** The last `lines` lines of a sandbox's serial console (kept after destroy, with its history). */
  async logs(id: string, lines = 100): Promise<string[]> {
    return logs(this.d.paths, this.get(id), lines);
  }

  /** The access token for `purpose` on a sandbox (derived from this data directory's secret). */
  accessToken(id: string, purpose: string): string {
    return this.hooks.tokens.token(id, purpose);
  }

  /** Whether `given` is the access token for `purpose` on a sandbox. */
  checkAccessToken(id: string, purpose: string, given: string): boolean {
    return this.hooks.tokens.check(id, purpose, given);
  }
}
