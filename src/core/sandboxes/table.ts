// The run-time state of this process's sandboxes, and its one owner: which run (and on which
// Sandbox object), which are paused with their streams held for the resume, their main processes
// and in-guest secrets, and the destroys, pauses and wakes in progress. Everyone reads it through
// read-only maps; only the transitions below change it, so a reader finds every place a sandbox is
// admitted, put to sleep, woken or ended by following these names. It also says whether the core
// is closing, which every start checks.
import type { Sandbox } from "../guest/sandbox.js";
import type { MainRunner } from "./main-process.js";
import type { PlannedSecrets } from "./secrets.js";

export class SandboxTable {
  private readonly running = new Map<string, Sandbox>();
  private readonly asleep = new Map<string, Sandbox>();
  private readonly mainRunners = new Map<string, MainRunner>();
  private readonly guestSecrets = new Map<string, PlannedSecrets>();
  private readonly destroys = new Map<string, Promise<void>>();
  private readonly pauses = new Map<string, Promise<void>>();
  private readonly wakes = new Map<string, Promise<Sandbox>>();
  private shut = false;

  /** Set once the core began to close: nothing new starts, and what ends meanwhile is not mourned as a failure. */
  get closed(): boolean {
    return this.shut;
  }

  /** The core closes. */
  close(): void {
    this.shut = true;
  }

  /** Running sandboxes of this process, by id. */
  get live(): ReadonlyMap<string, Sandbox> {
    return this.running;
  }
  /** Sandboxes paused by this process whose every stream waits for their resume, by id: not running, so not in `live`. */
  get sleeping(): ReadonlyMap<string, Sandbox> {
    return this.asleep;
  }
  /** Main processes of running sandboxes, by id. */
  get mains(): ReadonlyMap<string, MainRunner> {
    return this.mainRunners;
  }
  /** In-guest secrets of running sandboxes, by id: in memory only. */
  get secrets(): ReadonlyMap<string, PlannedSecrets> {
    return this.guestSecrets;
  }
  /** Destroys in progress, by id (a second call waits for the first). */
  get destroying(): ReadonlyMap<string, Promise<void>> {
    return this.destroys;
  }
  /** Pauses and stops in progress, by id (a resume waits for the VM to be gone). */
  get pausing(): ReadonlyMap<string, Promise<void>> {
    return this.pauses;
  }
  /** Resumes a call woke, by id (calls that come meanwhile wait for the same one). */
  get waking(): ReadonlyMap<string, Promise<Sandbox>> {
    return this.wakes;
  }

  /** A sandbox runs on this process from now on (spawned, restored, taken over, or a tenant of a pool VM). */
  admit(sb: Sandbox, secrets?: PlannedSecrets | null): void {
    if (secrets) this.guestSecrets.set(sb.id, secrets);
    this.running.set(sb.id, sb);
  }

  /** Its main process runs under `runner`. */
  setMain(id: string, runner: MainRunner): void {
    this.mainRunners.set(id, runner);
  }

  /** Its main process is no longer supervised here. */
  dropMain(id: string): void {
    this.mainRunners.delete(id);
  }

  /** It paused: no longer running; with `carry`, its streams wait in `sleeping` for the resume. */
  sleep(sb: Sandbox, carry: boolean): void {
    this.running.delete(sb.id);
    if (carry) this.asleep.set(sb.id, sb);
  }

  /** A pause undone without the streams it held (they ended with an error): nothing sleeps under this id. */
  forgetSleep(id: string): void {
    this.asleep.delete(id);
  }

  /** It resumed on a VM again. */
  wake(sb: Sandbox): void {
    this.asleep.delete(sb.id);
    this.running.set(sb.id, sb);
  }

  /** It is no longer this process's: destroyed, stopped, or left to the next server. */
  end(id: string): void {
    this.running.delete(id);
    this.asleep.delete(id);
    this.mainRunners.delete(id);
    this.guestSecrets.delete(id);
  }

  /** Runs `work` as the one destroy of `id` in progress; calls meanwhile get the same promise. */
  destroyOnce(id: string, work: () => Promise<void>): Promise<void> {
    const found = this.destroys.get(id);
    if (found) return found;
    const p = work().finally(() => this.destroys.delete(id));
    this.destroys.set(id, p);
    return p;
  }

  /** Runs `work` as the pause (or stop) of `id` in progress. */
  pauseOnce(id: string, work: () => Promise<void>): Promise<void> {
    const p = work().finally(() => this.pauses.delete(id));
    this.pauses.set(id, p);
    return p;
  }

  /** Runs `work` as the one wake of `id` in progress; calls meanwhile get the same promise. */
  wakeOnce(id: string, work: () => Promise<Sandbox>): Promise<Sandbox> {
    const found = this.wakes.get(id);
    if (found) return found;
    const p = work().finally(() => this.wakes.delete(id));
    this.wakes.set(id, p);
    return p;
  }
}
