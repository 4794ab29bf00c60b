// What a sandbox's idle policy and its pauses go by: when it was last used, the calls in flight
// (each waiting for an answer) and the clients following it (a process's output, logs, a watch,
// an open port connection). Polling its state, listing and health checks touch none of it.
export class Activity {
  /** When the sandbox was last used: an exec, a file call, published-port traffic (for its idle policy). */
  lastActive = Date.now();
  /** Calls in flight, each waiting for an answer (`busy`). */
  private inFlight = 0;
  /** Clients following the sandbox without waiting for an answer (`follow`). */
  private following = 0;

  /** Marks the sandbox as in use now. */
  touch(): void {
    this.lastActive = Date.now();
  }

  /**
   * Marks work in flight until the returned function is called (once; later calls do nothing):
   * a sandbox is idle only when nothing is, so an idle pause never lands in the middle of work.
   */
  busy(): () => void {
    this.inFlight++;
    this.touch();
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      this.inFlight--;
      this.touch();
    };
  }

  /**
   * Marks a client that follows the sandbox (a process's output, logs, a watch, an open port
   * connection) until the returned function is called: the sandbox does not idle meanwhile, but
   * a follower is not a call, so it never wakes a paused sandbox. It waits, silent, until
   * something that wants an answer resumes the sandbox (pause.ts).
   */
  follow(): () => void {
    this.following++;
    this.touch();
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      this.following--;
      this.touch();
    };
  }

  /** Whether a call is in flight that waits for an answer (one that came during a pause wakes the sandbox). */
  get calling(): boolean {
    return this.inFlight > 0;
  }

  /** How long nothing has been in flight or followed and nothing has touched it (0 meanwhile). */
  idleMs(now = Date.now()): number {
    return this.inFlight > 0 || this.following > 0 ? 0 : Math.max(0, now - this.lastActive);
  }
}
