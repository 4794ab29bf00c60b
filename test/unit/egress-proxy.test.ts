// The egress proxy against hostile and malformed requests, over real sockets (no VM: what a guest
// sends arrives as bytes on a stream either way).
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { createServer, connect, type Server, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { loadPresets, parseAllowlist } from "../../src/net/allowlist.js";
import { EgressProxy } from "../../src/net/egress-proxy.js";

let dir: string;
let proxy: EgressProxy;
let front: Server; // accepts "guest" connections and hands them to the proxy as sandbox sb-test
let frontPort: number;
let upstream: Server; // the allowed destination
let upPort: number;
const received: string[] = [];

before(async () => {
  dir = await mkdtemp(join(tmpdir(), "forgevm-proxy-"));
  upstream = createServer((s) => {
    let data = "";
    s.on("data", (d) => {
      data += d.toString("latin1");
      if (data.includes("\r\n\r\n")) {
        received.push(data);
        s.end("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
      }
    });
    s.on("error", () => {});
  });
  await new Promise<void>((r) => upstream.listen(0, "127.0.0.1", r));
  upPort = (upstream.address() as { port: number }).port;
  proxy = new EgressProxy({
    logDir: dir,
    allowPrivate: ["127.0.0.1"], // the operator lets this test's upstream be reached
    resolve: async (host) => {
      if (host === "up.test") return ["127.0.0.1"];
      if (host === "private.test") return ["10.1.2.3", "192.168.0.9"];
      throw Object.assign(new Error("not found"), { code: "ENOTFOUND" });
    },
  });
  proxy.setPolicy("sb-test", parseAllowlist([`up.test:${upPort}`, "private.test", "nxdomain.test", `up.test:1`], loadPresets()));
  front = createServer((s) => proxy.handle("sb-test", s));
  await new Promise<void>((r) => front.listen(0, "127.0.0.1", r));
  frontPort = (front.address() as { port: number }).port;
});

after(async () => {
  proxy.close();
  front.close();
  upstream.close();
  await rm(dir, { recursive: true, force: true });
});

/** Sends raw bytes as a guest would and returns everything the proxy answers before closing. */
function send(raw: string | Buffer, opts: { end?: boolean } = {}): Promise<string> {
  return new Promise((resolve) => {
    const s: Socket = connect(frontPort, "127.0.0.1", () => {
      s.write(raw);
      if (opts.end) s.end();
    });
    let out = "";
    s.on("data", (d) => (out += d.toString("latin1")));
    s.on("close", () => resolve(out));
    s.on("error", () => resolve(out));
    s.setTimeout(10_000, () => s.destroy());
  });
}

describe("egress proxy", () => {
  it("forwards an allowed request in origin form with Connection: close, without proxy headers", async () => {
    const reply = await send(
      `GET http://up.test:${upPort}/a?b=1 HTTP/1.1\r\nHost: up.test:${upPort}\r\nProxy-Authorization: Basic eA==\r\nProxy-Connection: keep-alive\r\nConnection: keep-alive\r\n\r\n`,
    );
    assert.match(reply, /^HTTP\/1\.1 200 OK/);
    const head = received.at(-1)!;
    assert.match(head, /^GET \/a\?b=1 HTTP\/1\.1\r\n/);
    assert.match(head, /\r\nConnection: close\r\n/);
    assert.doesNotMatch(head, /Proxy-|keep-alive/i);
  });

  it("a second request on the same connection reaches only the first, approved destination", async () => {
    const before = received.length;
    await send(`GET http://up.test:${upPort}/one HTTP/1.1\r\nHost: up.test\r\n\r\nGET http://evil.test/two HTTP/1.1\r\nHost: evil.test\r\n\r\n`);
    const log = await proxy.entries("sb-test", 100);
    assert.equal(log.filter((e) => e.host === "evil.test").length, 0, "never decided on, never connected");
    assert.equal(received.length, before + 1);
  });

  it("tunnels CONNECT to an allowed host:port", async () => {
    const reply = await send(`CONNECT up.test:${upPort} HTTP/1.1\r\nHost: up.test\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n`);
    assert.match(reply, /^HTTP\/1\.1 200 Connection Established\r\n\r\nHTTP\/1\.1 200 OK/);
  });

  it("answers malformed and unsupported requests with a 4xx, and logs them", async () => {
    for (const [raw, re] of [
      ["hello\r\n\r\n", /^HTTP\/1\.1 400 [\s\S]*not an HTTP\/1\.x request/],
      ["GET /local HTTP/1.1\r\nHost: x\r\n\r\n", /^HTTP\/1\.1 400 [\s\S]*absolute form/],
      ["GET https://up.test/ HTTP/1.1\r\n\r\n", /^HTTP\/1\.1 400 [\s\S]*use CONNECT for https/],
      [`GET http://user:pw@up.test:${upPort}/ HTTP/1.1\r\n\r\n`, /^HTTP\/1\.1 400 [\s\S]*credentials/],
      ["CONNECT up.test HTTP/1.1\r\n\r\n", /^HTTP\/1\.1 400 [\s\S]*host:port/],
      ["CONNECT up.test:99999 HTTP/1.1\r\n\r\n", /^HTTP\/1\.1 400 [\s\S]*out of range/],
      ["CONNECT bad_name.test:443 HTTP/1.1\r\n\r\n", /^HTTP\/1\.1 400 [\s\S]*not a valid hostname/],
      ["CONNECT [::1]:443 HTTP/1.1\r\n\r\n", /^HTTP\/1\.1 403 [\s\S]*IP address not on this sandbox's allowlist/],
      ["CONNECT private.test:443 HTTP/1.1\r\n\r\n", /^HTTP\/1\.1 403 [\s\S]*resolves to a private, local or reserved address \(10\.1\.2\.3, 192\.168\.0\.9\)/],
      ["CONNECT nxdomain.test:443 HTTP/1.1\r\n\r\n", /^HTTP\/1\.1 502 [\s\S]*cannot resolve nxdomain\.test: ENOTFOUND/],
      ["CONNECT up.test:1 HTTP/1.1\r\n\r\n", /^HTTP\/1\.1 502 [\s\S]*cannot connect to up\.test:1/],
    ] as const) {
      assert.match(await send(raw), re, raw);
    }
    const log = await proxy.entries("sb-test", 100);
    assert.ok(log.some((e) => e.host === "private.test" && e.decision === "deny"));
    assert.ok(
      log.some((e) => e.host === "up.test" && e.port === 1 && e.decision === "allow" && e.error),
      "a failed upstream is logged with its error",
    );
  });

  it("refuses a request head over 64 KiB, and connections from a sandbox it does not know", async () => {
    assert.match(await send(`GET http://up.test/ HTTP/1.1\r\nX: ${"a".repeat(70 * 1024)}`), /^HTTP\/1\.1 431 /);
    const other = createServer((s) => proxy.handle("sb-unknown", s));
    await new Promise<void>((r) => other.listen(0, "127.0.0.1", r));
    const reply = await new Promise<string>((resolve) => {
      const s = connect((other.address() as { port: number }).port, "127.0.0.1", () => s.write(`GET http://up.test:${upPort}/ HTTP/1.1\r\n\r\n`));
      let out = "";
      s.on("data", (d) => (out += d));
      s.on("close", () => resolve(out));
    });
    other.close();
    assert.match(reply, /^HTTP\/1\.1 403 [\s\S]*no egress allowlist/);
  });

  it("drops a connection that ends before its head is complete", async () => {
    assert.equal(await send("GET http://up.test/ HTTP/1.1\r\nHost:", { end: true }), "");
  });
});
