// Connecting to the unix sockets QEMU serves (agent, console, QMP).
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
