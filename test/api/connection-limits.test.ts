// Clients that take their time: many connections sending headers a byte at a time (slow
// loris), bodies that stop half-way (slow body), and bodies behind a wrong key. The server
// closes each within its limits and answers everyone else meanwhile.
import assert from "node:assert/strict";
import { once } from "node:events";
import { connect, type Socket } from "node:net";
import { after, before, it } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import type { FastifyInstance } from "fastify";
import { buildApp } from "../../src/compose/app.js";
import { testForge } from "../helpers.js";

const KEY = "limits-test-key";
const LIMITS = { headersTimeoutMs: 1500, bodyIdleMs: 1500, maxPending: 40 };
let app: FastifyInstance;
let port: number;

before(async () => {
  app = await buildApp({ forge: await testForge(), version: "test", apiKey: KEY, connectionLimits: LIMITS });
  port = Number(new URL(await app.listen({ host: "127.0.0.1", port: 0 })).port);
});

after(async () => {
  await app?.close();
  await (await testForge()).close();
});

/** A connection that has sent `head` (and maybe part of a body); `closed` settles when the server closes it. */
async function open(head: string, body = Buffer.alloc(0)): Promise<{ socket: Socket; closed: Promise<number>; answer: () => string }> {
  const socket = connect(port, "127.0.0.1");
  await once(socket, "connect");
  let answer = "";
  socket.on("data", (d) => (answer += d));
  socket.on("error", () => {});
  const t0 = Date.now();
  const closed = new Promise<number>((r) => socket.once("close", () => r(Date.now() - t0)));
  socket.write(head);
  if (body.length) socket.write(body);
  return { socket, closed, answer: () => answer };
}

/** The server answers a whole request from someone else, quickly. */
async function answersOthers(): Promise<void> {
  const t0 = Date.now();
  const r = await fetch(`http://127.0.0.1:${port}/api/v1/health`, { headers: { "X-API-Key": KEY } });
  assert.equal(r.status, 200);
  assert.ok(Date.now() - t0 < 1000, `answered in ${Date.now() - t0} ms`);
}

it("slow loris: at most max_pending connections wait for headers, the longest-waiting go first, the rest go at the headers deadline", async () => {
  const lorises: Awaited<ReturnType<typeof open>>[] = [];
  for (let i = 0; i < 100; i++) lorises.push(await open(`GET /api/v1/health HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nX-API-Key: ${KEY}\r\n`));
  await sleep(200);
  const openNow = () => lorises.filter((l) => !l.socket.destroyed && l.socket.readyState === "open").length;
  assert.ok(openNow() <= LIMITS.maxPending, `${openNow()} connections still wait for headers`);
  for (let i = 0; i < 5; i++) await answersOthers();
  const times = await Promise.all(lorises.map((l) => l.closed));
  assert.ok(Math.max(...times) < LIMITS.headersTimeoutMs + 2500, `the last closed after ${Math.max(...times)} ms`);
  await answersOthers();
});

it("slow body: a body that stops is cut off after body_idle_timeout, raw (an image import) or JSON", async () => {
  const raw = await open(
    `POST /api/v1/images/import?name=local/slow HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nX-API-Key: ${KEY}\r\nContent-Type: application/x-tar\r\nContent-Length: 1000000\r\n\r\n`,
    Buffer.alloc(1000),
  );
  const json = await open(
    `POST /api/v1/sandboxes HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nX-API-Key: ${KEY}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n`,
    Buffer.from('{"ima'),
  );
  await answersOthers();
  for (const c of [raw, json]) {
    const ms = await c.closed;
    assert.ok(ms >= LIMITS.bodyIdleMs - 200 && ms < LIMITS.bodyIdleMs + 2500, `closed after ${ms} ms`);
  }
  await answersOthers();
});

it("a request with a wrong key gets its 401 and its connection closes: the body behind it is not read", async () => {
  const c = await open(
    `POST /api/v1/images/import?name=local/x HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nX-API-Key: wrong\r\nContent-Type: application/x-tar\r\nContent-Length: 100000000\r\n\r\n`,
    Buffer.alloc(64 * 1024),
  );
  const ms = await c.closed;
  assert.match(c.answer(), /^HTTP\/1\.1 401/);
  assert.match(c.answer(), /connection: close/i);
  assert.ok(ms < 1000, `closed after ${ms} ms`);
  await answersOthers();
  // The same on the routes that check callers themselves: Daytona's control plane and toolbox,
  // E2B's volume content, and port traffic for a sandbox that is not there.
  const host = `Host: 127.0.0.1:${port}`;
  const big = "Content-Type: application/octet-stream\r\nContent-Length: 100000000";
  const heads: [string, RegExp][] = [
    [`POST /daytona/sandbox HTTP/1.1\r\n${host}\r\nAuthorization: Bearer wrong\r\n${big}\r\n\r\n`, /^HTTP\/1\.1 401/],
    [`POST /daytona/toolbox/sb-x/files/upload?path=/a HTTP/1.1\r\n${host}\r\n${big}\r\n\r\n`, /^HTTP\/1\.1 401/],
    [`PUT /volumecontent/00000000-0000-0000-0000-000000000000/file?path=/a HTTP/1.1\r\n${host}\r\nAuthorization: Bearer wrong\r\n${big}\r\n\r\n`, /^HTTP\/1\.1 401/],
    [`POST /upload HTTP/1.1\r\nHost: 8000-sb-nothere.localhost:${port}\r\n${big}\r\n\r\n`, /^HTTP\/1\.1 502/],
    [`POST /daytona/preview/sb-nothere/8000/x HTTP/1.1\r\n${host}\r\n${big}\r\n\r\n`, /^HTTP\/1\.1 401/],
  ];
  for (const [head, status] of heads) {
    const o = await open(head, Buffer.alloc(64 * 1024));
    const took = await o.closed;
    assert.match(o.answer(), status, head);
    assert.match(o.answer(), /connection: close/i, head);
    assert.ok(took < 1000, `${head.split("\r\n")[0]}: closed after ${took} ms`);
  }
  await answersOthers();
});
