// A minimal QMP client: one unix socket, JSON lines, commands answered in order, events
// dispatched to waiters. Used for snapshots (stop, migrate, cont) and for nothing the guest
// can influence: QMP talks to QEMU itself, never to the guest.
import type { Socket } from "node:net";
import { connectQemuSocket } from "./unix-socket.js";
import { ignore } from "../../util/ignore.js";

export class QmpError extends Error {
  override name = "QmpError";
  constructor(
    message: string,
    readonly errorClass: string,
  ) {
    super(message);
  }
}

interface Pending {
  resolve: (v: unknown) => void;
  reject: (e: Error) => void;
}

export interface QmpEvent {
  event: string;
  data?: Record<string, unknown>;
  timestamp: { seconds: number; microseconds: number };
}

const MAX_LINE = 16 * 1024 * 1024;

export class Qmp {
  private buf = "";
  private readonly pending: Pending[] = [];
  private readonly waiters = new Set<{ match: (e: QmpEvent) => boolean; resolve: (e: QmpEvent) => void }>();
  private closedError: Error | null = null;

  private constructor(private readonly sock: Socket) {
    sock.setEncoding("utf8");
    sock.on("data", (d: string) => this.onData(d));
    sock.on("close", () => this.fail(new Error("QMP connection closed")));
    sock.on("error", (e) => this.fail(e));
  }

  /** Connects, reads the greeting and leaves capabilities negotiation done. */
  static async connect(path: string, timeoutMs = 5000): Promise<Qmp> {
    const sock = await connectQemuSocket(path, timeoutMs);
    const q = new Qmp(sock);
    // The greeting takes the place of the first answer.
    await new Promise<unknown>((resolve, reject) => q.pending.push({ resolve, reject }));
    await q.execute("qmp_capabilities");
    return q;
  }

  /** Runs one command and resolves with its `return` value. */
  execute<T = unknown>(command: string, args?: Record<string, unknown>): Promise<T> {
    if (this.closedError) return Promise.reject(this.closedError);
    return new Promise<T>((resolve, reject) => {
      this.pending.push({ resolve: resolve as (v: unknown) => void, reject });
      this.sock.write(`${JSON.stringify(args ? { execute: command, arguments: args } : { execute: command })}\n`);
    });
  }

  /**
   * Resolves with the next event that matches (events before this call are not seen). A wait
   * its caller gave up on (the step before it failed) is dropped, not left to reject unheard:
   * it fails only for whoever awaits it.
   */
  waitEvent(match: (e: QmpEvent) => boolean, timeoutMs: number): Promise<QmpEvent> {
    const wait = new Promise<QmpEvent>((resolve, reject) => {
      const w = {
        match,
        resolve: (e: QmpEvent) => {
          clearTimeout(t);
          this.waiters.delete(w);
          resolve(e);
        },
      };
      const t = setTimeout(() => {
        this.waiters.delete(w);
        reject(new Error(`no matching QMP event within ${timeoutMs} ms`));
      }, timeoutMs);
      this.waiters.add(w);
    });
    wait.catch(ignore("the caller awaits it; this only keeps it from going unhandled"));
    return wait;
  }

  close(): void {
    this.sock.destroy();
  }

  private onData(d: string): void {
    this.buf += d;
    if (this.buf.length > MAX_LINE) {
      this.fail(new Error("QMP line too long"));
      return;
    }
    let nl: number;
    while ((nl = this.buf.indexOf("\n")) >= 0) {
      const line = this.buf.slice(0, nl).trim();
      this.buf = this.buf.slice(nl + 1);
      if (!line) continue;
      let msg: Record<string, unknown>;
      try {
        msg = JSON.parse(line);
      } catch {
        continue;
      }
      if (typeof msg.event === "string") {
        for (const w of [...this.waiters]) if (w.match(msg as unknown as QmpEvent)) w.resolve(msg as unknown as QmpEvent);
        continue;
      }
      const p = this.pending.shift();
      if (!p) continue;
      if (msg.error) {
        const err = msg.error as { class?: string; desc?: string };
        p.reject(new QmpError(err.desc ?? "QMP error", err.class ?? "GenericError"));
      } else p.resolve(msg.return ?? msg.QMP);
    }
  }

  private fail(e: Error): void {
    if (this.closedError) return;
    this.closedError = e;
    for (const p of this.pending.splice(0)) p.reject(e);
  }
}
