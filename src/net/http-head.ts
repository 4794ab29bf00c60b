// The two pieces of HTTP/1.x the egress proxy speaks itself: reading a request head off a
// stream, and answering with a short error of its own.
import type { Duplex } from "node:stream";

const MAX_HEAD = 64 * 1024;
const HEAD_TIMEOUT_MS = 30_000;

/** Reads up to the end of the request head; null if the client leaves, stalls or sends too much (then answered 431). */
export function readHead(client: Duplex): Promise<{ head: string; rest: Buffer } | null> {
  return new Promise((resolve) => {
    let buf = Buffer.alloc(0);
    const done = (v: { head: string; rest: Buffer } | null) => {
      clearTimeout(timer);
      client.off("data", onData);
      client.off("end", onEnd);
      client.off("close", onEnd);
      if (v) client.pause();
      resolve(v);
    };
    const onData = (c: Buffer) => {
      buf = Buffer.concat([buf, c]);
      const end = buf.indexOf("\r\n\r\n");
      if (end >= 0) done({ head: buf.subarray(0, end + 4).toString("latin1"), rest: buf.subarray(end + 4) });
      else if (buf.length > MAX_HEAD) {
        reply(client, 431, "request head too large");
        done(null);
      }
    };
    const onEnd = () => done(null);
    const timer = setTimeout(() => done(null), HEAD_TIMEOUT_MS);
    client.on("data", onData);
    client.on("end", onEnd);
    client.on("close", onEnd);
  });
}

const REASONS: Record<number, string> = { 400: "Bad Request", 403: "Forbidden", 421: "Misdirected Request", 431: "Request Header Fields Too Large", 502: "Bad Gateway" };

/** Ends the connection with the proxy's own plain-text answer; X-Forgevm-Egress says whether it was a refusal. */
export function reply(client: Duplex, status: number, message: string): void {
  const text = `forgevm egress proxy: ${message}\n`;
  client.end(
    `HTTP/1.1 ${status} ${REASONS[status] ?? "Error"}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(text)}\r\n` +
      `X-Forgevm-Egress: ${status === 403 ? "denied" : "error"}\r\nConnection: close\r\n\r\n${text}`,
  );
}
