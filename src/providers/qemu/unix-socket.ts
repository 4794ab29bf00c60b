// Connecting to the unix sockets QEMU serves (agent, console, QMP).
import type { ChildProcess } from "node:child_process";
import { stat } from "node:fs/promises";
import { createConnection, type Socket } from "node:net";
import { setTimeout as sleep } from "node:timers/promises";

function connectOnce(path: string): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = createConnection(path);
    s.once("connect", () => resolve(s));
    s.once("error", reject);
  });
}

/**
 * Connects to a socket QEMU serves. The socket file appears at bind(), a moment before QEMU
 * listens, so a refused connection is retried briefly.
 */
export async function connectQemuSocket(path: string, timeoutMs = 5000): Promise<Socket> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    try {
      return await connectOnce(path);
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if ((code !== "ECONNREFUSED" && code !== "ENOENT") || Date.now() > end) throw e;
      await sleep(10);
    }
  }
}

/** Waits for the sockets a starting QEMU binds (`paths`), failing when it exits or takes longer than `timeoutMs`. */
export async function waitForSockets(paths: string[], proc: ChildProcess, timeoutMs: number): Promise<void> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    if (proc.exitCode !== null || proc.signalCode !== null) throw new Error(`QEMU exited with ${proc.exitCode ?? proc.signalCode}`);
    const ok = await Promise.all(
      paths.map((p) =>
        stat(p).then(
          () => true,
          () => false,
        ),
      ),
    );
    if (ok.every(Boolean)) return;
    if (Date.now() > end) throw new Error(`its sockets did not appear within ${timeoutMs} ms`);
    await sleep(5);
  }
}
