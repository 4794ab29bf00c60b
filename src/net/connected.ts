// Waiting for an outgoing connection, plain or TLS, to be made: settled once, within a deadline.
import type { Socket } from "node:net";

/** Resolves with `s` once it emits `event` ("connect", or "secureConnect" for TLS); rejects on its error or after `timeoutMs`. */
export function whenConnected<T extends Socket>(s: T, event: "connect" | "secureConnect", timeoutMs: number): Promise<T> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => s.destroy(new Error("timed out")), timeoutMs);
    s.once(event, () => {
      clearTimeout(timer);
      s.off("error", reject);
      resolve(s);
    });
    s.once("error", (e) => {
      clearTimeout(timer);
      reject(e);
    });
  });
}
