// Validation that agrees with itself: what one route or interface accepts, no later step
// refuses; what no step could use is refused at once, with a 400 that names the field. Its
// sandboxes run on the local provider (a snapshot's on QEMU), so the file takes seconds.
import assert from "node:assert/strict";
import { availableParallelism, totalmem } from "node:os";
import { after, before, describe, it } from "node:test";
import type { FastifyInstance } from "fastify";
import { buildApp } from "../../src/compose/app.js";
import type { Forge, Sandbox } from "../../src/index.js";
import { openForge } from "../helpers.js";

let forge: Forge;
let app: FastifyInstance;
let sb: Sandbox;

before(async () => {
  // What is checked here is the answers of the API, not the VM: sandboxes run on the local
  // provider (namespaces, no VM) unless a test names QEMU for what only a VM does (a snapshot).
  forge = await openForge({ reapIntervalMs: 0, extraProviders: { local: true }, defaultProvider: "local" });
  app = await buildApp({ forge, version: "test" });
  sb = await forge.sandboxes.spawn();
});

after(async () => {
  await app?.close();
  await forge?.close();
});

async function api(method: "GET" | "POST" | "PUT" | "DELETE", url: string, body?: unknown, headers: Record<string, string> = {}) {
  const r = await app.inject({
    method,
    url: `/api/v1${url}`,
    payload: typeof body === "string" ? body : (body as object),
    headers: { "content-type": "application/json", ...headers },
  });
  return { status: r.statusCode, body: r.json() };
}

function assertBad(r: { status: number; body: any }, field: RegExp) {
  assert.equal(r.status, 400, JSON.stringify(r.body));
  assert.equal(r.body.code, "BAD_REQUEST");
  assert.match(r.body.message, field);
}

describe("one rule for each field, wherever it comes in", () => {
  it("an env name refused by exec is refused by spawn and by templates too, with the same words", async () => {
    const spawn = await api("POST", "/sandboxes", { env: { "A=B": "x" } });
    assertBad(spawn, /env: "A=B" is not a valid variable name/);
    const exec = await api("POST", `/sandboxes/${sb.id}/exec`, { command: "true", env: { "A=B": "x" } });
    assertBad(exec, /env: "A=B" is not a valid variable name/);
    assertBad(await api("POST", "/templates", { name: "bad-env", env: { "": "x" } }), /env: "" is not a valid variable name/);
    // and a name spawn takes works in exec
    const ok = await api("POST", `/sandboxes/${sb.id}/exec`, { command: 'printf %s "$odd_Name1"', env: { odd_Name1: "v" } });
    assert.equal(ok.body.stdout, "v");
  });

  it("env, metadata and owner that would break the sandbox later are refused at spawn: sizes an exec cannot take, NUL, bytes that are not text", async () => {
    assertBad(await api("POST", "/sandboxes", { env: { ["N".repeat(1024 * 1024)]: "x" } }), /env: the name "N{40}…" is longer than 256 bytes/);
    assertBad(await api("POST", "/sandboxes", { env: { BIG: "v".repeat(200 * 1024) } }), /env: BIG is \d+ bytes; a variable may have at most 131071/);
    const many = Object.fromEntries(Array.from({ length: 20 }, (_, i) => [`V${i}`, "v".repeat(100 * 1024)]));
    assertBad(await api("POST", "/sandboxes", { env: many }), /env: the variables take \d+ bytes; at most 1048576 in all/);
    assertBad(await api("POST", "/sandboxes", { metadata: { "a\u0000b": "x" } }), /metadata: the key "a.b" holds NUL/);
    assertBad(await api("POST", "/sandboxes", { metadata: { k: "\ufffd" } }), /metadata\.k holds NUL or bytes that are not UTF-8/);
    assertBad(await api("POST", "/sandboxes", { metadata: Object.fromEntries(Array.from({ length: 65 }, (_, i) => [`k${i}`, "v"])) }), /metadata: at most 64 entries/);
    assertBad(await api("POST", "/sandboxes", { owner_id: "a\u0000b" }), /owner_id must be 1-256 printable characters/);
    // What a spawn takes, every later exec takes: the largest variable allowed still runs.
    // biome-ignore lint/suspicious/noTemplateCurlyInString: the shell's ${#VAR}, not a template
    const ok = await api("POST", `/sandboxes/${sb.id}/exec`, { command: 'printf %s "${#BIG}"', env: { BIG: "v".repeat(128 * 1024 - 5) } });
    assert.equal(ok.body.stdout, String(128 * 1024 - 5));
  });

  it("a template naming an image that is no reference is refused when it is made", async () => {
    assertBad(await api("POST", "/templates", { name: "bad-image", image: "Not A Reference!" }), /image: /);
    assert.equal((await api("GET", "/templates/bad-image")).status, 404);
  });

  it("a pull of a reference that is no reference is refused, not started as a job", async () => {
    assertBad(await api("POST", "/images/pull", { image: "Not A Reference!" }), /image: /);
  });

  it("JSON in another charset than UTF-8 is refused", async () => {
    assertBad(await api("POST", "/sandboxes", "{}", { "content-type": "application/json; charset=latin1" }), /UTF-8/);
    assert.notEqual((await api("POST", `/sandboxes/${sb.id}/exec`, { command: "true" }, { "content-type": "application/json; charset=utf-8" })).status, 400);
  });

  it("more vCPUs than the host has is refused at once, for spawns and templates", async () => {
    const many = availableParallelism() + 1;
    const t0 = Date.now();
    assertBad(await api("POST", "/sandboxes", { vcpus: many }), new RegExp(`vcpus: ${many} vCPUs`));
    assert.ok(Date.now() - t0 < 2000, "refused without booting anything");
    assertBad(await api("POST", "/templates", { name: "too-many", cpu_cores: many }), /cpu_cores/);
  });

  it("more memory than the host has is refused at once, with the figures, for spawns and templates", async () => {
    const hostMb = Math.floor(totalmem() / 1048576);
    const big = Math.min(65536, hostMb + 1024);
    const t0 = Date.now();
    const r = await api("POST", "/sandboxes", { memory_mb: big });
    assert.ok(Date.now() - t0 < 2000, "refused without booting anything");
    assert.equal(r.status, 400);
    if (big > hostMb)
      assert.match(r.body.message, new RegExp(`memory_mb: ${big} MiB asked for, but one VM on this host can have at most \\d+ MiB \\(it has ${hostMb} MiB of RAM\\)`));
    assert.equal((await api("POST", "/templates", { name: "too-big", memory_mb: big })).status, 400);
  });
});

describe("TTLs", () => {
  it('"0" is none, a service has none unless one is given, and one check bounds them everywhere', async () => {
    const forever = await api("POST", "/sandboxes", { ttl: "0" });
    assert.equal(forever.status, 201, JSON.stringify(forever.body));
    assert.equal(forever.body.expires_at, null);
    const id = forever.body.id;
    assert.match((await api("POST", `/sandboxes/${id}/extend`, { ttl: "10m" })).body.expires_at, /^\d{4}-/);
    assert.equal((await api("POST", `/sandboxes/${id}/extend`, { ttl: "0" })).body.expires_at, null);
    assert.equal((await api("DELETE", `/sandboxes/${id}`)).status, 200);
    const service = await api("POST", "/sandboxes", { main: { command: ["sleep", "600"], restart: "unless-stopped" } });
    assert.equal(service.body.expires_at, null, JSON.stringify(service.body));
    const bounded = await api("POST", "/sandboxes", { ttl: "5m", main: { command: ["sleep", "600"], restart: "always" } });
    assert.match(bounded.body.expires_at, /^\d{4}-/);
    for (const s of [service, bounded]) await api("DELETE", `/sandboxes/${s.body.id}`);
    const tpl = await api("POST", "/templates", { name: "forever", ttl_seconds: 0 });
    assert.equal(tpl.status, 201, JSON.stringify(tpl.body));
    assert.equal(tpl.body.ttl, "0");
    const spawned = await api("POST", "/templates/forever/spawn", {});
    assert.equal(spawned.body.expires_at, null);
    await api("DELETE", `/sandboxes/${spawned.body.id}`);
    for (const t of [{ ttl_seconds: 2 ** 63 }, { ttl: "2000000h" }, { ttl: 2 ** 40 }]) {
      const r = await api("POST", "/templates", { name: "too-long", ...t });
      assert.equal(r.status, 400, JSON.stringify(r.body));
      assert.match(r.body.message, /ttl/);
    }
    assertBad(await api("POST", "/sandboxes", { ttl: "9000h" }), /ttl "9000h" is longer than a year/);
  });
});

describe("Idempotency-Key on create", () => {
  it("a retry with the same key gets the sandbox the first try made, at once or while it starts; a bad key is a 400", async () => {
    const create = (key: string, payload: Record<string, unknown> = { metadata: { a: "1", b: "2" } }) =>
      app.inject({ method: "POST", url: "/api/v1/sandboxes", payload, headers: { "content-type": "application/json", "idempotency-key": key } });
    const [a, b] = await Promise.all([create("try-1"), create("try-1", { metadata: { b: "2", a: "1" } })]);
    assert.equal(a.statusCode, 201, a.body);
    assert.equal(b.statusCode, 201, b.body);
    assert.equal(a.json().id, b.json().id, "two tries at once made one sandbox");
    const again = await create("try-1");
    assert.equal(again.json().id, a.json().id);
    assert.equal(again.headers["idempotent-replayed"], "true");
    // The same key with another create is a mistake the client must hear about, not the first sandbox.
    const changed = await create("try-1", { metadata: { a: "other" } });
    assert.equal(changed.statusCode, 409, changed.body);
    assert.match(changed.json().message, /Idempotency-Key: this key was sent before with a different create/);
    const other = await create("try-2");
    assert.notEqual(other.json().id, a.json().id);
    for (const r of [a, other]) assert.equal((await api("DELETE", `/sandboxes/${r.json().id}`)).status, 200);
    const ended = await create("try-1");
    assert.equal(ended.statusCode, 409);
    assert.match(ended.json().message, /Idempotency-Key: the sandbox this key made .* is destroyed/);
    assertBad({ status: (await create("has space")).statusCode, body: (await create("has space")).json() }, /Idempotency-Key/);
  });
});

describe("bodies that may be left out", () => {
  it("a POST with no body and no Content-Type (the original Python SDK's spawn_template) is an empty body", async () => {
    assert.equal((await api("POST", "/templates", { name: "no-body", provider: "qemu" })).status, 201);
    const bare = (url: string, headers: Record<string, string> = {}) => app.inject({ method: "POST", url: `/api/v1${url}`, headers });
    for (const headers of [{}, { "content-type": "application/json" }] as Record<string, string>[]) {
      const spawned = await bare("/templates/no-body/spawn", headers);
      assert.equal(spawned.statusCode, 201, spawned.body);
      const snap = await bare(`/sandboxes/${spawned.json().id}/snapshot`, headers);
      assert.equal(snap.statusCode, 201, snap.body);
      assert.equal((await api("DELETE", `/snapshots/${snap.json().id}`)).status, 200);
      assert.equal((await api("DELETE", `/sandboxes/${spawned.json().id}`)).status, 200);
    }
    // A body that needs fields names the first one missing, not "body must be object".
    const exec = await bare(`/sandboxes/${sb.id}/exec`);
    assert.equal(exec.statusCode, 400);
    assert.match(exec.json().message, /command/);
  });
});

describe("unknown fields", () => {
  it("are refused with a 400 that names them and the field meant", async () => {
    assertBad(await api("POST", "/sandboxes", { imgae: "forgevm/debian:bookworm" }), /imgae is not a field of this request; did you mean "image"\?/);
    assertBad(await api("POST", `/sandboxes/${sb.id}/exec`, { command: "true", timout: "5s" }), /timout .*did you mean "timeout"/);
    assertBad(await api("POST", `/sandboxes/${sb.id}/files`, { path: "/tmp/x", content: "x", mdoe: "0600" }), /mdoe .*did you mean "mode"/);
    assertBad(await api("POST", "/templates", { name: "typo", setpu: ["true"] }), /setpu .*did you mean "setup"/);
    assertBad(await api("POST", `/sandboxes/${sb.id}/fork`, { cuont: 2 }), /cuont .*did you mean "count"/);
    assertBad(await api("POST", `/sandboxes/${sb.id}/extend`, { ttl: "1m", forever: true }), /forever is not a field/);
  });

  it("every field the contract names is accepted and has its effect (the original SDKs' template fields)", async () => {
    // The original Python SDK sends provider "" and metadata {}, and the aliases vcpus and ttl.
    const t = await api("POST", "/templates", { name: "contract-fields", provider: "", metadata: {}, vcpus: 1, ttl: "20m", memory_mb: 256 });
    assert.equal(t.status, 201, JSON.stringify(t.body));
    assert.equal(t.body.vcpus, 1);
    assert.equal(t.body.cpu_cores, 1);
    assert.equal(t.body.ttl_seconds, 1200);
    assert.equal(t.body.ttl, "20m0s"); // as Go prints durations
    assert.equal(t.body.provider, "local", 'provider "" is the server\'s default provider');
    // metadata reaches the sandboxes spawned from it
    const u = await api("PUT", "/templates/contract-fields", { metadata: { team: "blue" }, memory_mb: 256, created_at: t.body.created_at });
    assert.equal(u.status, 200, JSON.stringify(u.body));
    const s = await api("POST", "/templates/contract-fields/spawn", { metadata: { run: "7" } });
    assert.equal(s.status, 201, JSON.stringify(s.body));
    assert.deepEqual(s.body.metadata, { team: "blue", run: "7" });
    await api("DELETE", `/sandboxes/${s.body.id}`);
    assertBad(await api("POST", "/templates", { name: "other-provider", provider: "no-such-provider" }), /provider: provider "no-such-provider" is not available/);
    await api("DELETE", "/templates/contract-fields");
  });
});
