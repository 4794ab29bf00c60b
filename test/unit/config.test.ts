import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, describe, it } from "node:test";
import { DEFAULT_PORT, loadConfig } from "../../src/config/config.js";
import { forgeOptions } from "../../src/core/forge-options.js";
import { formatDuration, parseDuration } from "../../src/schemas/durations.js";

let dir: string;
before(async () => {
  dir = await mkdtemp(join(tmpdir(), "fvm-cfg-"));
});
after(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe("config", () => {
  it("has sane defaults", () => {
    const c = loadConfig({ env: {}, cwd: dir, home: dir });
    assert.equal(c.server.port, DEFAULT_PORT);
    assert.equal(c.server.host, "127.0.0.1");
    assert.equal(c.auth.api_key, "");
  });

  it("reads forgevm.yaml from the working directory, and env overrides it", async () => {
    await writeFile(join(dir, "forgevm.yaml"), "server:\n  port: 8000\ndefaults:\n  memory_mb: 256\n");
    const c = loadConfig({ env: { FORGEVM_SERVER_PORT: "9000", FORGEVM_AUTH_API_KEY: "k" }, cwd: dir, home: dir });
    assert.equal(c.server.port, 9000);
    assert.equal(c.defaults.memory_mb, 256);
    assert.equal(c.auth.api_key, "k");
  });

  it("takes registry logins by host", async () => {
    await writeFile(join(dir, "reg.yaml"), "registries:\n  ghcr.io: { username: u, password: p }\n");
    assert.deepEqual(loadConfig({ file: join(dir, "reg.yaml"), env: {} }).registries, { "ghcr.io": { username: "u", password: "p" } });
    await writeFile(join(dir, "reg2.yaml"), "registries:\n  ghcr.io: { user: u }\n");
    assert.throws(() => loadConfig({ file: join(dir, "reg2.yaml"), env: {} }), /config key "registries.ghcr.io/);
  });

  it("names the bad key", async () => {
    await writeFile(join(dir, "bad.yaml"), "server:\n  prot: 1\n");
    assert.throws(() => loadConfig({ file: join(dir, "bad.yaml"), env: {} }), /unknown config key "server.prot"/);
    await writeFile(join(dir, "bad2.yaml"), "defaults:\n  memory_mb: lots\n");
    assert.throws(() => loadConfig({ file: join(dir, "bad2.yaml"), env: {} }), /config key "defaults.memory_mb"/);
    assert.throws(() => loadConfig({ env: { FORGEVM_SERVER_PORT: "99999" }, cwd: dir, home: dir }), /config key "server.port"/);
    assert.throws(() => loadConfig({ env: { FORGEVM_SNAPSHOTS_PRESTART: "9" }, cwd: dir, home: dir }), /config key "snapshots.prestart" must be <= 8/);
    assert.equal(loadConfig({ env: { FORGEVM_SNAPSHOTS_PRESTART: "0" }, cwd: dir, home: dir }).snapshots.prestart, 0);
    await writeFile(join(dir, "bad3.yaml"), "server: [\n");
    assert.throws(() => loadConfig({ file: join(dir, "bad3.yaml"), env: {} }), /not valid YAML/);
  });
});

describe("a configuration written for a Firecracker-based ForgeVM API server", () => {
  it("its forgevm.yaml loads: Firecracker's keys, auth.enabled, pool and defaults", () => {
    const c = loadConfig({ file: fileURLToPath(new URL("../../../test/fixtures/forgevm-api.yaml", import.meta.url)), env: {} });
    assert.equal(c.providers.default, "qemu");
    assert.equal(c.providers.firecracker.kernel_path, "/var/lib/forgevm/vmlinux.bin");
    assert.equal(c.auth.api_key, "", "auth.enabled: false turns the key off");
    assert.equal(c.defaults.image, "alpine:latest");
    assert.equal(c.pool.max_users_per_vm, 5);
    assert.ok(c.notes.some((n) => n.startsWith("providers.firecracker: QEMU microVMs serve its sandboxes")));
  });

  it('"mock" is the local provider, with its warning; "custom" needs its backend\'s address, and runs under its name; unknown keys stay errors', async () => {
    await writeFile(join(dir, "mock.yaml"), 'providers:\n  default: "mock"\n');
    const m = loadConfig({ file: join(dir, "mock.yaml"), env: {} });
    assert.equal(m.providers.default, "local");
    assert.equal(m.providers.local.enabled, true);
    assert.ok(m.notes.some((n) => /"mock": the local provider .*not a security boundary/.test(n)));
    await writeFile(join(dir, "custom.yaml"), 'providers:\n  default: "custom"\n');
    assert.throws(() => loadConfig({ file: join(dir, "custom.yaml"), env: {} }), /providers\.default "custom": the Custom HTTP provider needs providers\.custom\.base_url/);
    // The ForgeVM API's own example block, as its documentation writes it.
    await writeFile(
      join(dir, "custom-ok.yaml"),
      'providers:\n  default: "custom"\n  custom:\n    base_url: "http://10.0.0.9:9000"\n    api_key: "k"\n    timeout: "90s"\n    name: "mybackend"\n',
    );
    const c = loadConfig({ file: join(dir, "custom-ok.yaml"), env: {} });
    assert.equal(c.providers.default, "mybackend");
    assert.deepEqual(forgeOptions(c).extraProviders?.custom, { baseUrl: "http://10.0.0.9:9000", apiKey: "k", timeoutMs: 90_000, name: "mybackend" });
    await writeFile(join(dir, "fc.yaml"), "providers:\n  firecracker:\n    enabled: true\n    socket: /x\n");
    assert.throws(() => loadConfig({ file: join(dir, "fc.yaml"), env: {} }), /unknown config key "providers\.firecracker\.socket"/);
    await writeFile(join(dir, "key.yaml"), "auth:\n  api_key: k\n");
    assert.equal(loadConfig({ file: join(dir, "key.yaml"), env: {} }).auth.api_key, "k", "a key without enabled is required");
  });
});

describe("durations", () => {
  it("parses Go-style durations and rejects bad ones naming the field", () => {
    assert.equal(parseDuration("90s", "ttl"), 90_000);
    assert.equal(parseDuration("1h30m", "ttl"), 5_400_000);
    assert.equal(parseDuration("250ms", "ttl"), 250);
    for (const bad of ["", "0s", "-1m", "10", "1x", "m", "1h 30m", 5, null]) {
      assert.throws(() => parseDuration(bad, "ttl"), /ttl/, String(bad));
    }
    assert.equal(formatDuration(15), "15ms");
    assert.equal(formatDuration(1234), "1.234s");
    assert.equal(formatDuration(123_000), "2m3s");
  });
});

describe("event log", () => {
  it("keeps at most the newest N events and drops old ones", async () => {
    const { openDb } = await import("../../src/store/db.js");
    const { EventStore } = await import("../../src/store/events.js");
    const db = openDb(":memory:");
    const ev = new EventStore(db);
    for (let i = 0; i < 50; i++) ev.append("exec.started", "sb-1", { i });
    assert.equal(ev.trim(new Date(0).toISOString(), 10), 40);
    const left = ev.after(0);
    assert.equal(left.length, 10);
    assert.equal(left[0].data?.i, 40);
    assert.equal(ev.trim(new Date(Date.now() + 1000).toISOString(), 10), 10);
    db.close();
  });
});

describe("templates in the config file", () => {
  it("are checked like any config key", async () => {
    await writeFile(join(dir, "tpl-bad.yaml"), "templates:\n  py:\n    imgae: python\n");
    assert.throws(() => loadConfig({ file: join(dir, "tpl-bad.yaml"), env: {} }), /config key "templates\/py"|templates\.py/);
    await writeFile(join(dir, "tpl-ok.yaml"), 'templates:\n  py:\n    image: forgevm/debian:bookworm\n    memory_mb: 256\n    setup: ["true"]\n');
    assert.equal(loadConfig({ file: join(dir, "tpl-ok.yaml"), env: {} }).templates.py.memory_mb, 256);
  });

  it("a server makes them, replaces one that changed, and leaves the rest alone", async () => {
    const { startServer } = await import("../../src/compose/serve.js");
    const { testConfig, removeAtExit } = await import("../helpers.js");
    const cfg = await testConfig((c) => {
      c.templates = { small: { memory_mb: 256, description: "v1", ttl: "20m" }, other: { description: "kept" } };
    });
    removeAtExit(cfg.data_dir);
    const get = async (url: string, name: string) =>
      (await (await fetch(`${url}/api/v1/templates/${name}`)).json()) as { description: string; memory_mb: number; ttl_seconds: number; updated_at: string };
    let server = await startServer(cfg, "test");
    const first = await get(server.url, "small");
    assert.deepEqual([first.description, first.memory_mb, first.ttl_seconds], ["v1", 256, 1200]);
    const kept = await get(server.url, "other");
    await server.close();
    cfg.templates.small.description = "v2";
    server = await startServer(cfg, "test");
    try {
      assert.equal((await get(server.url, "small")).description, "v2");
      assert.notEqual((await get(server.url, "small")).updated_at, first.updated_at);
      assert.equal((await get(server.url, "other")).updated_at, kept.updated_at, "an unchanged template is not rewritten");
    } finally {
      await server.close();
    }
    cfg.templates = { broken: { image: "Not A Reference!" } };
    await assert.rejects(startServer(cfg, "test"), /templates in the config: template broken: image:/);
  });
});
