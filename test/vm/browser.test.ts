// The browser is an attack surface: any page the user opens can send requests to localhost. By
// default only the server's own origin gets in; CORS headers go to configured origins only;
// WebSocket and SSE check Origin too; a loopback server answers only to loopback host names.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { connect } from "node:net";
import { after, before, describe, it } from "node:test";
import type { FastifyInstance } from "fastify";
import { buildApp } from "../../src/compose/app.js";
import type { Forge } from "../../src/index.js";
import { openForge } from "../helpers.js";

let forge: Forge;
let app: FastifyInstance;
let port: number;
const CONSOLE = "http://console.test:8080";

before(async () => {
  forge = await openForge({ reapIntervalMs: 0 });
  app = await buildApp({ forge, version: "test", listenHost: "127.0.0.1", allowedOrigins: [CONSOLE] });
  port = Number(new URL(await app.listen({ host: "127.0.0.1", port: 0 })).port);
});

after(async () => {
  await app?.close();
  await forge?.close();
});

/** One raw HTTP request (so Host and Origin are exactly what a browser would send); status and headers of the answer. */
function raw(lines: string[], body = ""): Promise<{ status: number; headers: Record<string, string>; text: string }> {
  return new Promise((resolve, reject) => {
    const s = connect(port, "127.0.0.1");
    let buf = "";
    s.on("data", (d) => (buf += d));
    s.on("error", reject);
    s.on("close", () => {
      const [head, ...rest] = buf.split("\r\n\r\n");
      const [status, ...hs] = head.split("\r\n");
      const headers: Record<string, string> = {};
      for (const h of hs) headers[h.slice(0, h.indexOf(":")).toLowerCase()] = h.slice(h.indexOf(":") + 1).trim();
      resolve({ status: Number(status.split(" ")[1]), headers, text: rest.join("\r\n\r\n") });
    });
    s.end(`${lines.join("\r\n")}\r\nConnection: close\r\n${body ? `Content-Type: application/json\r\nContent-Length: ${body.length}\r\n` : ""}\r\n${body}`);
  });
}

const get = (path: string, headers: string[] = []) => raw([`GET /api/v1${path} HTTP/1.1`, `Host: 127.0.0.1:${port}`, ...headers]);

describe("origins", () => {
  it("sends no CORS header to anyone by default", async () => {
    const r = await get("/health");
    assert.equal(r.status, 200);
    assert.equal(r.headers["access-control-allow-origin"], undefined);
  });

  it("refuses requests from a foreign web page, preflight included", async () => {
    for (const [method, path] of [
      ["GET", "/sandboxes"],
      ["POST", "/sandboxes"],
      ["DELETE", "/sandboxes"],
      ["OPTIONS", "/sandboxes"],
    ]) {
      const r = await raw([`${method} /api/v1${path} HTTP/1.1`, `Host: 127.0.0.1:${port}`, "Origin: http://evil.test"], method === "POST" ? "{}" : "");
      assert.equal(r.status, 403, `${method} ${path}: ${r.text}`);
      assert.equal(JSON.parse(r.text).code, "FORBIDDEN");
      assert.equal(r.headers["access-control-allow-origin"], undefined);
    }
    assert.equal(forge.sandboxes.list().length, 0, "nothing was spawned");
  });

  it("lets the server's own origin in, and a configured origin with CORS headers", async () => {
    assert.equal((await get("/sandboxes", [`Origin: http://127.0.0.1:${port}`])).status, 200);
    const r = await get("/sandboxes", [`Origin: ${CONSOLE}`]);
    assert.equal(r.status, 200);
    assert.equal(r.headers["access-control-allow-origin"], CONSOLE);
    const pre = await raw(["OPTIONS /api/v1/sandboxes HTTP/1.1", `Host: 127.0.0.1:${port}`, `Origin: ${CONSOLE}`, "Access-Control-Request-Method: POST"]);
    assert.equal(pre.status, 204);
    assert.match(pre.headers["access-control-allow-methods"], /POST/);
  });

  it("checks Origin on the event stream and on WebSocket upgrades", async () => {
    const sse = await get("/events", ["Origin: http://evil.test"]);
    assert.equal(sse.status, 403);
    const ws = await get("/sandboxes/sb-00000000/exec/ws", [
      "Origin: http://evil.test",
      "Upgrade: websocket",
      "Connection: Upgrade",
      "Sec-WebSocket-Version: 13",
      `Sec-WebSocket-Key: ${randomBytes(16).toString("base64")}`,
    ]);
    assert.equal(ws.status, 403);
    const ok = await get("/sandboxes/sb-00000000/exec/ws", [
      `Origin: ${CONSOLE}`,
      "Upgrade: websocket",
      "Connection: Upgrade",
      "Sec-WebSocket-Version: 13",
      `Sec-WebSocket-Key: ${randomBytes(16).toString("base64")}`,
    ]);
    assert.equal(ok.status, 101);
  });
});

describe("host names", () => {
  it("a loopback server answers only to loopback names (no DNS rebinding)", async () => {
    const rebound = await raw(["GET /api/v1/health HTTP/1.1", `Host: attacker.test:${port}`]);
    assert.equal(rebound.status, 403);
    assert.match(JSON.parse(rebound.text).message, /allowed_hosts/);
    for (const host of [`localhost:${port}`, `127.0.0.1:${port}`, `[::1]:${port}`]) assert.equal((await raw(["GET /api/v1/health HTTP/1.1", `Host: ${host}`])).status, 200, host);
  });

  it("a server on another address, or a name the config allows, answers to it", async () => {
    const open = await buildApp({ forge, version: "test", listenHost: "0.0.0.0" });
    assert.equal((await open.inject({ method: "GET", url: "/api/v1/health", headers: { host: "sandbox-host.lan:8080" } })).statusCode, 200);
    await open.close();
    const named = await buildApp({ forge, version: "test", listenHost: "127.0.0.1", allowedHosts: ["forge.internal"] });
    assert.equal((await named.inject({ method: "GET", url: "/api/v1/health", headers: { host: "forge.internal:8080" } })).statusCode, 200);
    await named.close();
  });
});
