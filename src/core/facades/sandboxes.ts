// The sandbox operations every interface calls: spawn and create, the stored records, the
// lifecycle (stop, start, pause, resume, destroy), the main process and the access tokens. Each
// method checks what the call needs (room on disk, the sandbox's state) and hands the work to the
// operation modules (spawn.ts, create.ts, lifecycle.ts, stop-start.ts, pause.ts, reaper.ts).
import { expiryAfter } from "../../schemas/durations.js";
import { badRequest, ForgevmError, notFound, sandboxGone } from "../../http/errors.js";
import { defaultAccount, GuestSession, type RelativePaths } from "../guest/session.js";
import { ignore } from "../../util/ignore.js";
import { checkMetadata } from "../../schemas/checks.js";
import type { SandboxRow, SandboxState } from "../../store/sandboxes.js";
import type { Core } from "../core.js";
import { create, startCreated } from "../sandboxes/create.js";
import { guestProcesses, type GuestProcess } from "../guest/guest-processes.js";
import { destroy, logs, type EndReason } from "../sandboxes/lifecycle.js";
import { readMainLog, type LogLine } from "../sandboxes/main-process.js";
import type { SpawnOptions } from "../options.js";
import { lifeAfterWake, pause, resume, wake } from "../sandboxes/pause.js";
import { prune } from "../sandboxes/reaper.js";
import type { Sandbox } from "../guest/sandbox.js";
import { spawn } from "../sandboxes/spawn.js";
import { requireState } from "../sandboxes/states.js";
import * as stopStart from "../sandboxes/stop-start.js";
import type { Tokens } from "../sandboxes/tokens.js";
import type { Pull } from "../sandboxes/spawn-setup.js";

/** The cluster node this server is, once it joined one: it names itself in every sandbox's JSON. */
export interface ClusterLink {
  member: { readonly id: string; mirrorTemplates(): Promise<void> } | null;
}

/** What the sandbox operations need from outside the core context. */
export interface SandboxHooks {
  pull: Pull;
  tokens: Tokens;
  cluster: ClusterLink;
}

export class SandboxesFacade {
  // Creates in progress by idempotency key: a retry that comes meanwhile waits for the same one.
  private readonly creatingByKey = new Map<string, { id: Promise<string>; fingerprint?: string }>();

  constructor(
    private readonly core: Core,
    private readonly hooks: SandboxHooks,
  ) {}

  /**
   * Starts a sandbox and returns once its agent answers: restored from its image's (or
   * template's) base snapshot when one exists or can be made, else booted. A failed start is
   * recorded as `error`.
   */
  async spawn(opts: SpawnOptions = {}): Promise<Sandbox> {
    this.core.disk.require("a spawn");
    const started = performance.now();
    try {
      // A template made through another front may not have reached this node's mirror yet.
      const member = this.hooks.cluster.member;
      if (member && opts.template && !this.core.templates.get(opts.template)) await member.mirrorTemplates();
      const sb = await spawn(this.core, opts, this.hooks.pull);
      this.core.prom.spawned((performance.now() - started) / 1000, this.core.sandboxes.get(sb.id)?.origin ?? "boot");
      return sb;
    } catch (e) {
      this.core.prom.spawnFailed();
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
    const made = this.core.sandboxes.byIdempotencyKey(key);
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
      if (!this.core.sandboxes.get(id)?.idempotency_key) this.core.sandboxes.update(id, { idempotency_key: key });
      if (fingerprint) this.core.sandboxes.update(id, { idempotency_fingerprint: fingerprint });
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
    if (this.core.sandboxes.get(idOrName)) return idOrName;
    return this.core.sandboxes.byName(idOrName)?.id ?? idOrName;
  }

  /** The stored record of any sandbox ever seen (history included), by id or name. */
  get(idOrName: string): SandboxRow {
    const id = this.idOf(idOrName);
    const row = this.core.sandboxes.get(id);
    if (!row) throw sandboxGone(id, `sandbox ${id} not found`);
    return this.onNode(row);
  }

  /** The stored record of a sandbox, or null when there is none. */
  find(id: string): SandboxRow | null {
    return this.core.sandboxes.get(id) ?? null;
  }

  /** Live sandboxes (creating or running), newest first. */
  list(ownerId?: string, states: SandboxState[] = ["creating", "running"]): SandboxRow[] {
    return this.core.sandboxes.list(states, ownerId).map((r) => this.onNode(r));
  }

  private onNode(row: SandboxRow): SandboxRow {
    const member = this.hooks.cluster.member;
    return member ? { ...row, node: member.id } : row;
  }

  /** How many sandboxes are live, and how many rows the store holds. */
  counts(): { live: number; total: number } {
    return this.core.sandboxes.count();
  }

  /** Whether the data directory's disk is full, and which sandboxes wait for room. */
  storage(): { full: boolean; waiting_sandboxes: string[] } {
    return { full: this.core.disk.full, waiting_sandboxes: [...this.core.disk.waiting] };
  }

  /** The running sandbox with this id (or name), ready for exec and file operations. */
  running(idOrName: string): Sandbox {
    const id = this.idOf(idOrName);
    const sb = this.core.table.live.get(id);
    if (sb) {
      this.core.disk.requireAnswering(id);
      return sb;
    }
    const row = this.core.sandboxes.get(id);
    if (!row) throw sandboxGone(id, `sandbox ${id} not found`);
    requireState(row, "exec");
    throw new ForgevmError("CONFLICT", `sandbox ${id} is run by another ForgeVM process`);
  }

  /** The running sandbox with this id (or name), resumed first when it is paused (`by` names the call in its sandbox.resumed event). */
  async use(idOrName: string, by: string): Promise<Sandbox> {
    const id = this.idOf(idOrName);
    await wake(this.core, id, by, true);
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
    const name = o.user ?? this.core.sandboxes.get(sandbox.id)?.exec_user ?? undefined;
    const user = o.user !== undefined ? await sandbox.guestUser(o.user) : await defaultAccount(sandbox, name);
    if (!user) throw notFound(`user "${o.user}" does not exist in sandbox ${sandbox.id}`);
    const workDir = o.workDir === "home" ? user.home : await sandbox.workDir();
    return new GuestSession(sandbox, user, workDir, o.relative);
  }

  /** Sets a new expiry `ttlMs` from now. */
  extend(id: string, ttlMs: number): SandboxRow {
    const row = this.get(id);
    requireState(row, "extend");
    this.core.sandboxes.update(row.id, { expires_at: expiryAfter(ttlMs) });
    return this.get(row.id);
  }

  /** Replaces a sandbox's metadata (keys and values are strings, checked as at spawn). */
  setMetadata(id: string, metadata: Record<string, string>): SandboxRow {
    const row = this.get(id);
    checkMetadata(metadata);
    this.core.sandboxes.setMetadata(row.id, Object.keys(metadata).length ? metadata : null);
    return this.get(row.id);
  }

  /** Sets what a sandbox does once idle `ms` (null: nothing), from its next idle spell on. */
  setIdle(id: string, policy: { ms: number; action: "pause" | "stop" } | null): SandboxRow {
    const row = this.get(id);
    this.core.sandboxes.update(row.id, { idle_ms: policy?.ms ?? null, idle_action: policy?.action ?? null });
    return this.get(row.id);
  }

  /** Stops a sandbox and removes its files; idempotent for sandboxes that existed. */
  async destroy(id: string, by = "api", reason: EndReason = "request"): Promise<void> {
    return destroy(this.core, this.idOf(id), { reason, by });
  }

  /** Stops a running sandbox: its main process gets SIGTERM, then SIGKILL after `graceMs`; its disk is kept and it costs no memory. */
  async stop(id: string, graceMs?: number): Promise<SandboxRow> {
    this.core.disk.require("a stop (its memory is saved)");
    await stopStart.stop(this.core, this.idOf(id), graceMs);
    return this.get(id);
  }

  /** Defines a sandbox without starting it (Docker's create): checked, its image pulled, its name taken; `start` boots it. */
  async create(opts: SpawnOptions = {}): Promise<SandboxRow> {
    this.core.disk.require("a create");
    return create(this.core, opts, this.hooks.pull);
  }

  /** Starts a created sandbox, or a stopped one again (files as they were, its main process run anew); it lives `ttlMs` from now. */
  async start(id: string, ttlMs?: number): Promise<Sandbox> {
    const row = this.get(id);
    if (row.state === "created") return startCreated(this.core, row.id, ttlMs, this.hooks.pull);
    return stopStart.start(this.core, row.id, stopStart.lifeOf(this.core, row, ttlMs));
  }

  /** Stops (when running) and starts a sandbox. */
  async restart(id: string, ttlMs?: number, graceMs?: number): Promise<Sandbox> {
    const row = this.get(id);
    if (row.state === "created") return this.start(id, ttlMs);
    return stopStart.restart(this.core, row.id, stopStart.lifeOf(this.core, row, ttlMs), graceMs);
  }

  /** Sends a signal (a number) to a sandbox's main process. */
  async kill(id: string, signal: number): Promise<void> {
    return stopStart.kill(this.core, this.idOf(id), signal);
  }

  /** A sandbox's main process output: the last `tail` lines, or those since `sinceMs` (kept after it is gone). */
  async mainLogs(id: string, opts: { tail?: number; sinceMs?: number } = {}): Promise<LogLine[]> {
    const row = this.get(id);
    await this.core.table.mains.get(row.id)?.flushed();
    return readMainLog(this.core, row.id, opts);
  }

  /** Calls `onLine` for each line the main process writes from now on, and `onEnd` when it has ended for good or the sandbox stops running; returns the unsubscribe function. */
  followMain(id: string, onLine: (l: LogLine) => void, onEnd: () => void): () => void {
    const row = this.get(id);
    const runner = this.core.table.mains.get(row.id);
    if (!runner || runner.finished) {
      onEnd();
      return () => {};
    }
    // A pause that carried the sandbox's streams over (pause.ts) leaves the main process running.
    const off = this.core.events.subscribe((e) => {
      if (e.sandbox_id !== row.id) return;
      if (["sandbox.stopped", "sandbox.destroyed", "sandbox.expired", "sandbox.error"].includes(e.type) || (e.type === "sandbox.paused" && !e.data?.streams_kept)) onEnd();
    });
    const done = () => onEnd();
    // A client following the logs: the sandbox does not idle meanwhile, but the follower wakes no pause.
    const end = (this.core.table.live.get(row.id) ?? this.core.table.sleeping.get(row.id))?.follow() ?? (() => {});
    runner.lines.on("line", onLine);
    runner.lines.once("done", done);
    return () => {
      end();
      off();
      runner.lines.off("line", onLine);
      runner.lines.off("done", done);
    };
  }

  /** The processes running in a sandbox (its cgroup), read from the guest's /proc. */
  async processes(id: string): Promise<GuestProcess[]> {
    return guestProcesses(await this.use(id, "processes"));
  }

  /** Saves a running sandbox's whole state (with `memory: false`, its disk only) and stops its VM (no memory or CPU while paused). */
  async pause(id: string, opts: { memory?: boolean } = {}): Promise<void> {
    this.core.disk.require("a pause (its memory is saved)");
    return pause(this.core, this.running(id), "paused", "request", opts.memory !== false);
  }

  /** Brings a paused sandbox back under its id, processes and files as they were, to live `ttlMs` from now (default: what it had left). */
  async resume(id: string, ttlMs?: number, opts: { reboot?: boolean } = {}): Promise<Sandbox> {
    const row = this.get(id);
    if (this.core.table.waking.has(row.id)) await this.core.table.waking.get(row.id);
    if (this.core.table.live.has(row.id) && ttlMs === undefined) return this.running(row.id);
    return resume(this.core, row.id, ttlMs ?? lifeAfterWake(this.core, row), "paused", "request", opts);
  }

  /** Resumes a sandbox paused with auto-resume (its lifecycle) before a call `by` is served; nothing for any other. */
  wake(id: string, by: string): Promise<void> {
    return wake(this.core, this.idOf(id), by);
  }

  /** Destroys every live sandbox whose expiry has passed; returns how many. */
  async prune(): Promise<number> {
    return prune(this.core);
  }

  /** The last `lines` lines of a sandbox's serial console (kept after destroy, with its history). */
  async logs(id: string, lines = 100): Promise<string[]> {
    return logs(this.core, this.get(id), lines);
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
