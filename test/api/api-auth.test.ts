// Authentication: every route in the OpenAPI document rejects a missing and a wrong API key,
// and reveals nothing; CORS preflight is answered before authentication.
import assert from "node:assert/strict";
import { after, before, it } from "node:test";
import type { FastifyInstance } from "fastify";
import { buildApp } from "../../src/compose/app.js";
import { defaultConfig } from "../../src/config/config.js";
import { policyFromConfig } from "../../src/interfaces/mcp/policy.js";
import type { Forge } from "../../src/index.js";
import { openForge } from "../helpers.js";

let app: FastifyInstance;
let forge: Forge;

before(async () => {
  forge = await openForge({ reapIntervalMs: 0 });
  app = await buildApp({ forge, version: "test", apiKey: "s3cret-key", allowedOrigins: ["http://example.test"] });
  await app.ready();
});

after(async () => {
  await app.close();
  await forge.close();
});

it("every documented route rejects a missing and a wrong key with 401", async () => {
  const doc = (await app.inject({ method: "GET", url: "/api/v1/openapi.json", headers: { "x-api-key": "s3cret-key" } })).json();
  const routes: [string, string][] = [];
  for (const [path, ops] of Object.entries(doc.paths as Record<string, Record<string, unknown>>)) {
    for (const method of Object.keys(ops)) routes.push([method.toUpperCase(), path.replace(/\{[^}]+\}/g, "sb-12345678")]);
  }
  assert.ok(routes.length >= 20, `only ${routes.length} routes documented`);
  for (const [method, url] of routes) {
    for (const headers of [{}, { "x-api-key": "wrong" }, { "x-api-key": "s3cret-ke" }]) {
      const r = await app.inject({ method: method as any, url, headers, payload: method === "GET" || method === "DELETE" ? undefined : {} });
      assert.equal(r.statusCode, 401, `${method} ${url} with ${JSON.stringify(headers)} gave ${r.statusCode}`);
      assert.deepEqual(Object.keys(r.json()).sort(), ["code", "message", "retryable"]);
      assert.equal(r.json().code, "UNAUTHORIZED");
      assert.doesNotMatch(r.body, /sb-[0-9a-f]{8}/);
    }
  }
  // Unknown routes also learn nothing without the key.
  assert.equal((await app.inject({ method: "GET", url: "/api/v1/whatever" })).statusCode, 401);
});

it("accepts the right key", async () => {
  const r = await app.inject({ method: "GET", url: "/api/v1/health", headers: { "x-api-key": "s3cret-key" } });
  assert.equal(r.statusCode, 200);
  assert.equal(r.json().status, "ok");
});

it("answers CORS preflight from an allowed origin before authentication", async () => {
  const r = await app.inject({ method: "OPTIONS", url: "/api/v1/sandboxes", headers: { origin: "http://example.test", "access-control-request-method": "POST" } });
  assert.equal(r.statusCode, 204);
  assert.match(String(r.headers["access-control-allow-headers"]), /X-API-Key/);
});

it("takes the key as a query parameter or cookie on the event stream only", async () => {
  await app.listen({ port: 0, host: "127.0.0.1" });
  const addr = app.server.address() as { port: number };
  const url = `http://127.0.0.1:${addr.port}/api/v1`;
  for (const [path, init] of [
    ["/events?api_key=s3cret-key", {}],
    ["/events", { headers: { cookie: "forgevm_api_key=s3cret-key" } }],
  ] as const) {
    const ctl = new AbortController();
    const r = await fetch(url + path, { ...init, signal: ctl.signal });
    assert.equal(r.status, 200, path);
    ctl.abort();
  }
  assert.equal((await fetch(`${url}/events?api_key=wrong`)).status, 401);
  assert.equal((await fetch(`${url}/health?api_key=s3cret-key`)).status, 401, "query keys are refused outside streams");
  assert.equal((await fetch(`${url}/health`, { headers: { cookie: "forgevm_api_key=s3cret-key" } })).status, 401);
});

it("a desktop's live view path admits only its own token: a made-up, malformed or expired one is a 401, a path that does not decode a 400, and a page's Origin null passes no other route", async () => {
  const view = "/api/v1/sandboxes/sb-12345678/desktop/stream/view";
  for (const token of ["9999999999999.AAAAAAAAAAAAAAAA", "1000000000000.AAAAAAAAAAAAAAAA", "not-a-token"]) {
    assert.equal((await app.inject({ method: "GET", url: `${view}/${token}/vnc_lite.html` })).statusCode, 401, token);
  }
  // A path that does not decode is the server's 400, never a crash of the token check.
  assert.equal((await app.inject({ method: "GET", url: "/api/v1/sandboxes/%E0%A4%A/desktop/stream/view/9999999999999.AAAAAAAAAAAAAAAA/x" })).statusCode, 400);
  // A page in an opaque origin (the view's CSP sandbox) reaches nothing else, even with the key.
  const r = await app.inject({ method: "GET", url: "/api/v1/health", headers: { origin: "null", "x-api-key": "s3cret-key" } });
  assert.equal(r.statusCode, 403);
});

it("refuses bodies over the size limit with 413 and gives every response a request id", async () => {
  const small = await buildApp({ forge, version: "test", bodyLimitBytes: 1024 });
  const r = await small.inject({ method: "POST", url: "/api/v1/sandboxes", payload: { metadata: { pad: "x".repeat(4096) } } });
  assert.equal(r.statusCode, 413);
  assert.equal(r.json().code, "PAYLOAD_TOO_LARGE");
  assert.match(r.json().message, /larger than the 1 KiB this route takes \(server\.body_limit_mb\)/);
  assert.ok(r.headers["x-request-id"]);
  const echoed = await small.inject({ method: "GET", url: "/api/v1/health", headers: { "x-request-id": "req-42" } });
  assert.equal(echoed.headers["x-request-id"], "req-42");
  await small.close();
});

it("a body too large for /mcp names MCP's own limit, not server.body_limit_mb, which does not govern it", async () => {
  const withMcp = await buildApp({ forge, version: "test", mcp: policyFromConfig(defaultConfig({}).mcp) });
  const r = await withMcp.inject({
    method: "POST",
    url: "/mcp",
    headers: { "content-type": "application/json", accept: "application/json, text/event-stream" },
    payload: `{"pad":"${"x".repeat(49 * 1024 * 1024)}"}`,
  });
  assert.equal(r.statusCode, 413);
  assert.equal(r.json().code, "PAYLOAD_TOO_LARGE");
  assert.match(r.json().message, /48 MiB this route takes, a limit of its own/);
  assert.doesNotMatch(r.json().message, /body_limit_mb/);
  await withMcp.close();
});
