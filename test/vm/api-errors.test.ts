// Client errors are 4xx with {code, message}, whoever produces them: the routes, the guest, the
// agent channel, Fastify itself, or Node's HTTP parser. Found by a corpus of malformed requests.
import assert from "node:assert/strict";
import { connect } from "node:net";
import { after, before, describe, it } from "node:test";
import type { FastifyInstance } from "fastify";
import { buildApp } from "../../src/compose/app.js";
import type { Forge, Sandbox } from "../../src/index.js";
import { apiRequest, openForge } from "../helpers.js";

let forge: Forge;
let app: FastifyInstance;
let base: string;
let port: number;
let sb: Sandbox;

before(async () => {
  forge = await openForge({ reapIntervalMs: 0 });
  app = await buildApp({ forge, version: "test", apiKey: "k" });
  base = await app.listen({ host: "127.0.0.1", port: 0 });
  port = Number(new URL(base).port);
  sb = await forge.sandboxes.spawn();
});

after(async () => {
  await app?.close();
  await forge?.close();
});

const api = (method: string, path: string, body?: string, headers: Record<string, string> = {}) => apiRequest(base, method, path, body, { "X-API-Key": "k", ...headers });

/** Sends raw bytes as a request and returns the status code and body of the answer. */
function raw(request: Buffer | string): Promise<{ status: number; body: any }> {
  return new Promise((resolve, reject) => {
    const s = connect(port, "127.0.0.1");
    let buf = Buffer.alloc(0);
    s.on("data", (d) => (buf = Buffer.concat([buf, d])));
    s.on("error", reject);
    s.on("close", () => {
      const text = buf.toString("latin1");
      const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? 0);
      const bodyText = text.slice(text.indexOf("\r\n\r\n") + 4);
      let body: any = bodyText;
      try {
        body = JSON.parse(bodyText);
      } catch {
        // not JSON
      }
      resolve({ status, body });
    });
    s.end(request);
  });
}

function assertClientError(r: { status: number; body: any }, status: number, code: string, message?: RegExp) {
  assert.equal(r.status, status, JSON.stringify(r.body));
  assert.equal(typeof r.body, "object", `a JSON body, got ${JSON.stringify(r.body)}`);
  assert.equal(r.body.code, code, JSON.stringify(r.body));
  assert.equal(typeof r.body.message, "string");
  if (message) assert.match(r.body.message, message);
}

describe("errors from the guest and the agent channel", () => {
  it("a command too large for one agent frame is a 413 that says what to do", async () => {
    const big = JSON.stringify({ command: `echo ${"x".repeat(1024 * 1024)}` });
    assertClientError(await api("POST", `/sandboxes/${sb.id}/exec`, big, { "Content-Type": "application/json" }), 413, "PAYLOAD_TOO_LARGE", /command.*file/);
    // the sandbox still answers
    assert.equal((await sb.exec("echo ok")).stdout, "ok\n");
  });

  it("moves a file across filesystems, and refuses a directory with a 4xx", async () => {
    await sb.exec("echo moved > /dev/shm/f; mkdir -p /dev/shm/d");
    const r = await api("POST", `/sandboxes/${sb.id}/files/move`, JSON.stringify({ old_path: "/dev/shm/f", new_path: "/root/f" }), { "Content-Type": "application/json" });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.equal((await sb.exec("cat /root/f; test -e /dev/shm/f || echo gone")).stdout, "moved\ngone\n");
    assertClientError(
      await api("POST", `/sandboxes/${sb.id}/files/move`, JSON.stringify({ old_path: "/dev/shm/d", new_path: "/root/d" }), { "Content-Type": "application/json" }),
      400,
      "BAD_REQUEST",
      /filesystem/,
    );
  });

  it("reading a file the guest cannot read (/proc/self/mem) is a 4xx", async () => {
    const r = await api("GET", `/sandboxes/${sb.id}/files?path=/proc/self/mem`);
    assert.ok(r.status >= 400 && r.status < 500, `status ${r.status}: ${JSON.stringify(r.body)}`);
    assert.equal(typeof r.body.code, "string");
  });
});

describe("uploads the guest refuses half-way", () => {
  it("a raw upload bigger than the guest's disk is a 507 naming ENOSPC, and the client reads it (no reset)", async () => {
    assert.equal((await sb.exec("mkdir -p /mnt/small && mount -t tmpfs -o size=1m tmpfs /mnt/small")).exitCode, 0);
    const res = await fetch(`${base}/api/v1/sandboxes/${sb.id}/files?path=/mnt/small/big.bin`, {
      method: "POST",
      headers: { "X-API-Key": "k", "Content-Type": "application/octet-stream" },
      body: new Uint8Array(4 * 1024 * 1024),
    });
    const body = (await res.json()) as { code: string; errno?: string };
    assert.equal(res.status, 507, JSON.stringify(body));
    assert.equal(body.code, "INSUFFICIENT_STORAGE");
    assert.equal(body.errno, "ENOSPC");
    await sb.exec("umount /mnt/small");
  });
});

describe("errors before a route runs", () => {
  it("a malformed forgevm_api_key cookie is a 401, not a 500", async () => {
    assertClientError(await api("GET", "/events", undefined, { "X-API-Key": "", Cookie: "forgevm_api_key=%E0%A4%A" }), 401, "UNAUTHORIZED");
  });

  it("a malformed URL is a 400 with {code, message}", async () => {
    assertClientError(await raw("GET /api/v1/sandboxes/%E0%A4%A HTTP/1.1\r\nHost: x\r\nX-API-Key: k\r\nConnection: close\r\n\r\n"), 400, "BAD_REQUEST");
  });

  it("a path parameter longer than any id is a 4xx with {code, message}", async () => {
    const r = await api("GET", `/sandboxes/${"a".repeat(500)}`);
    assert.ok(r.status >= 400 && r.status < 500, String(r.status));
    assert.equal(typeof r.body.code, "string");
  });

  it("a header with bytes HTTP does not allow is a 400 with {code, message}", async () => {
    assertClientError(
      await raw(Buffer.concat([Buffer.from("GET /api/v1/health HTTP/1.1\r\nHost: x\r\nX-Bad: a"), Buffer.from([1]), Buffer.from("b\r\n\r\n")])),
      400,
      "BAD_REQUEST",
    );
  });

  it("headers larger than the server accepts are a 431 with {code, message}", async () => {
    assertClientError(await raw(`GET /api/v1/health HTTP/1.1\r\nHost: x\r\nX-Big: ${"a".repeat(20000)}\r\n\r\n`), 431, "HEADERS_TOO_LARGE");
  });
});

describe("optional bodies", () => {
  it("Content-Type: application/json with an empty body is accepted wherever the body is optional", async () => {
    const json = { "Content-Type": "application/json" };
    const made = await api("POST", "/sandboxes", "", json);
    assert.equal(made.status, 201, JSON.stringify(made.body));
    assert.equal((await api("POST", `/sandboxes/${made.body.id}/snapshot`, "", json)).status, 201);
    assert.equal((await api("POST", `/snapshots/${(await forge.snapshots.list()).find((s) => s.source_id === made.body.id)!.id}/spawn`, "", json)).status, 201);
    assert.equal((await api("DELETE", `/sandboxes/${made.body.id}`, "", json)).status, 200);
    assert.equal((await api("DELETE", "/sandboxes", "", json)).status, 200);
    // and a route that needs fields names the first one missing
    assertClientError(await api("POST", `/sandboxes/${sb.id}/exec`, "", json), 400, "BAD_REQUEST", /command is required/);
  });
});
