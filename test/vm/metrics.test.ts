// Metrics: the sampler's history of a real sandbox (host side from its VMM, guest side through
// its agent) over REST, `forgevm stats`, the Prometheus endpoint behind the API key and through
// a text-format parser, and a history that a server killed and restarted still has.
import assert from "node:assert/strict";
import { execFile, type ChildProcess } from "node:child_process";
import { createRequire } from "node:module";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { after, before, describe, it } from "node:test";
import { openDb } from "../../src/store/db.js";
import { MetricStore, MINUTE, RAW } from "../../src/store/metrics.js";
import { metricsRange } from "../../src/interfaces/rest/routes/metrics.js";
import { childEnv, freePort, removeAtExit, startServerProcess, testDataDir, waitFor } from "../helpers.js";

type Family = { name: string; type: string; metrics: { value?: string; labels?: Record<string, string>; count?: string; buckets?: Record<string, string> }[] };
const parsePrometheus = createRequire(import.meta.url)("parse-prometheus-text-format") as (text: string) => Family[];

const main = fileURLToPath(new URL("../../src/cli/main.js", import.meta.url));
const KEY = "metrics-test-key";
let root: string;
let base: string;
let dataDir: string;
let configFile: string;
let server: ChildProcess | null = null;

before(async () => {
  dataDir = await testDataDir();
  const port = await freePort();
  root = `http://127.0.0.1:${port}`;
  base = `${root}/api/v1`;
  configFile = join(dataDir, "forgevm.yaml");
  await writeFile(
    configFile,
    `data_dir: ${dataDir}\nserver:\n  port: ${port}\n  request_log: false\n  on_stop: destroy\nauth:\n  api_key: ${KEY}\nmetrics:\n  interval: 1s\n  guest_every: 1\n`,
  );
  server = await startServerProcess(configFile, base, KEY);
});

after(async () => {
  if (server && server.exitCode === null) {
    server.kill("SIGTERM");
    await new Promise((r) => server!.once("exit", r));
  }
  removeAtExit(dataDir);
});

async function api(method: string, path: string, body?: unknown): Promise<any> {
  const r = await fetch(`${base}${path}`, {
    method,
    headers: { "X-API-Key": KEY, ...(body ? { "Content-Type": "application/json" } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await r.text();
  return { status: r.status, body: text && r.headers.get("content-type")?.includes("json") ? JSON.parse(text) : text };
}

describe("the metric store", () => {
  it("keeps every sample for minutes and minute averages for a day, and answers in buckets", () => {
    const store = new MetricStore(openDb(":memory:"));
    const t0 = Date.UTC(2026, 0, 1, 12, 0, 0);
    // Three minutes of samples every 10 s: CPU 10, 20, 30 in each minute's halves.
    const rows = [];
    for (let t = t0; t < t0 + 180_000; t += 10_000)
      rows.push({ series: "sb", sample: { ts: t, cpu_pct: ((t - t0) % 60_000 < 30_000 ? 10 : 30) + Math.floor((t - t0) / 60_000) * 100, mem_used_bytes: 100 } });
    store.insert(rows);
    assert.equal(store.query("sb", t0, 10_000).length, 18, "every sample while raw");
    const perMinute = store.query("sb", t0, 60_000);
    assert.deepEqual(
      perMinute.map((s) => s.cpu_pct),
      [20, 120, 220],
      "averaged in minute buckets",
    );
    assert.equal(perMinute[0].guest_cpu_pct, null, "what was never sampled stays null");
    // Rolled up at 12:03:30 keeping raw rows 60 s: the first two minutes are only averages now.
    store.rollup(t0 + 210_000, 60_000, 24 * 3600_000);
    const mixed = store.query("sb", t0, 10_000);
    assert.deepEqual(
      mixed.slice(0, 2).map((s) => [s.ts, s.cpu_pct]),
      [
        [t0, 20],
        [t0 + 60_000, 120],
      ],
      "minute averages where raw rows are gone",
    );
    assert.equal(mixed.length, 2 + 6, "then the raw samples of the last minute");
    // A day later only averages of the last day remain, and a dropped series has nothing.
    store.rollup(t0 + 24 * 3600_000 + 90_000, 60_000, 24 * 3600_000);
    assert.deepEqual(
      store.query("sb", t0, 60_000).map((s) => s.ts),
      [t0 + 120_000],
    );
    store.drop("sb");
    assert.deepEqual(store.query("sb", 0, 60_000), []);
    assert.deepEqual([RAW, MINUTE], [0, 60]);
  });

  it("reads ranges as durations or times and refuses what it cannot use, naming the field", () => {
    const now = Date.UTC(2026, 0, 2);
    assert.deepEqual(metricsRange({}, 5000, now), { sinceMs: now - 600_000, stepMs: 5000 });
    assert.deepEqual(metricsRange({ since: "24h" }, 5000, now), { sinceMs: now - 86_400_000, stepMs: 288_000 });
    assert.equal(metricsRange({ since: "2026-01-01T23:00:00Z", step: "1m" }, 5000, now).sinceMs, now - 3600_000);
    assert.equal(metricsRange({ since: "48h" }, 5000, now).sinceMs, now - 86_400_000, "no further back than a day is kept");
    assert.throws(() => metricsRange({ since: "yesterday" }, 5000, now), /since "yesterday" is not a duration/);
    assert.throws(() => metricsRange({ since: "2026-13-45T00:00:00Z" }, 5000, now), /since .* is not an RFC 3339 time/);
    assert.throws(() => metricsRange({ since: "24h", step: "1ms" }, 5000, now), /step 1ms .* more than 5000 buckets/);
  });
});

describe("metrics of a running sandbox", () => {
  let id: string;

  it("fills a sandbox's history with host and guest samples, and the host's", async () => {
    const spawned = await api("POST", "/sandboxes", { ttl: "10m" });
    assert.equal(spawned.status, 201, JSON.stringify(spawned.body));
    id = spawned.body.id;
    let samples: any[] = [];
    await waitFor(
      async () => {
        samples = (await api("GET", `/sandboxes/${id}/metrics?since=5m&step=1s`)).body.samples;
        return samples.filter((s) => s.cpu_pct !== null && s.mem_used_bytes !== null).length >= 3;
      },
      60_000,
      "three full samples",
    );
    const s = samples.at(-1);
    assert.ok(s.rss_bytes > 16 * 1048576, `the VMM's RSS ${s.rss_bytes}`);
    assert.ok(s.pss_bytes > 0 && s.pss_bytes <= s.rss_bytes * 1.01, `PSS ${s.pss_bytes} of RSS ${s.rss_bytes}`);
    const g = samples.filter((x) => x.mem_total_bytes !== null).at(-1);
    assert.ok(g.mem_total_bytes > 256 * 1048576 && g.mem_total_bytes <= 512 * 1048576, `guest memory ${g.mem_total_bytes}`);
    assert.ok(g.mem_used_bytes > 0 && g.mem_used_bytes < g.mem_total_bytes);
    assert.ok(g.processes >= 1 && g.disk_total_bytes > g.disk_used_bytes);
    const host = (await api("GET", "/host/metrics?since=5m")).body;
    assert.ok(host.samples.length >= 1 && host.samples.at(-1).mem_total_bytes > 0 && host.samples.at(-1).disk_total_bytes > 0, JSON.stringify(host).slice(0, 300));
    const bad = await api("GET", `/sandboxes/${id}/metrics?since=tomorrow`);
    assert.equal(bad.status, 400);
    assert.match(bad.body.message, /since/);
  });

  it("sees the guest's CPU rise while it computes", async () => {
    const started = Date.now();
    const burn = api("POST", `/sandboxes/${id}/exec`, { command: "timeout 6 sh -c 'while :; do :; done'; true" });
    await waitFor(
      async () => {
        const { samples } = (await api("GET", `/sandboxes/${id}/metrics?since=${new Date(started).toISOString()}&step=1s`)).body;
        return samples.some((s: any) => s.guest_cpu_pct > 50);
      },
      30_000,
      "a sample with the guest's CPU over 50%",
    );
    await burn;
  });

  it("lists the newest samples for `forgevm stats`", async () => {
    const live = (await api("GET", "/stats")).body;
    assert.equal(live.interval_ms, 1000);
    assert.ok(live.sandboxes.some((s: any) => s.id === id && s.sample.rss_bytes > 0));
    const { stdout } = await promisify(execFile)(process.execPath, [main, "stats", "--no-stream", "--config", configFile], { env: childEnv(), timeout: 30_000 });
    const [header, ...rows] = stdout.trim().split("\n");
    assert.match(header, /^ID +NAME +CPU % +MEM USAGE \/ LIMIT +MEM % +HOST RSS +NET I\/O +DISK I\/O +PIDS$/);
    const row = rows.find((r) => r.startsWith(`${id} `));
    assert.ok(row, stdout);
    assert.match(row!, / \d+(\.\d)?% +[\d.]+ [KMG]iB \/ [\d.]+ [KMG]iB /);
    // The columns line up: each value starts where its header does.
    assert.equal(row!.indexOf(row!.split(/ {3,}/)[2]), header.indexOf("CPU %"));
  });

  it("serves Prometheus text behind the API key that a parser reads, with host, sandbox and server families", async () => {
    assert.equal((await fetch(`${root}/metrics`)).status, 401, "no key, no metrics");
    await api("GET", "/sandboxes/no-such-sandbox"); // an error to count
    const r = await fetch(`${root}/metrics`, { headers: { "X-API-Key": KEY } });
    assert.equal(r.status, 200);
    assert.match(r.headers.get("content-type") ?? "", /^text\/plain; version=0\.0\.4/);
    const families = new Map(parsePrometheus(await r.text()).map((f) => [f.name, f]));
    const one = (name: string, labels?: Record<string, string>) => {
      const f = families.get(name);
      assert.ok(f, `${name} is exposed`);
      const m = f.metrics.find((x) => Object.entries(labels ?? {}).every(([k, v]) => x.labels?.[k] === v));
      assert.ok(m, `${name} ${JSON.stringify(labels)}`);
      return m;
    };
    assert.ok(Number(one("forgevm_host_memory_total_bytes").value) > 0);
    assert.ok(Number(one("forgevm_sandbox_cpu_seconds_total", { sandbox: id }).value) > 0);
    assert.equal(families.get("forgevm_sandbox_cpu_seconds_total")!.type, "COUNTER");
    assert.ok(Number(one("forgevm_sandbox_memory_rss_bytes", { sandbox: id }).value) > 0);
    assert.ok(Number(one("forgevm_sandbox_guest_memory_total_bytes", { sandbox: id }).value) > 0);
    assert.equal(one("forgevm_sandboxes", { state: "running" }).value, "1");
    assert.equal(one("forgevm_sandboxes_active").value, "1");
    assert.equal(families.get("forgevm_spawn_duration_seconds")!.type, "HISTOGRAM");
    assert.equal(one("forgevm_spawn_duration_seconds").buckets?.["+Inf"], "1", "one spawn observed");
    assert.ok(Number(one("forgevm_execs_total").value) >= 1);
    assert.ok(Number(one("forgevm_api_errors_total", { code: "NOT_FOUND" }).value) >= 1);
    assert.ok(families.has("forgevm_server_process_cpu_seconds_total"), "the server process's own");
  });

  it("keeps the history across a server killed and restarted, and drops it with the sandbox", async () => {
    const before = (await api("GET", `/sandboxes/${id}/metrics?since=10m&step=1s`)).body.samples;
    const firstTs = before[0].ts;
    server!.kill("SIGKILL");
    await new Promise((r) => server!.once("exit", r));
    server = await startServerProcess(configFile, base, KEY);
    await waitFor(async () => (await api("GET", `/sandboxes/${id}`)).body.state === "running", 30_000, "the sandbox re-attached");
    const again = (await api("GET", `/sandboxes/${id}/metrics?since=10m&step=1s`)).body.samples;
    assert.equal(again[0].ts, firstTs, "the samples before the restart are still there");
    await waitFor(async () => (await api("GET", `/sandboxes/${id}/metrics?since=10m&step=1s`)).body.samples.at(-1).ts > before.at(-1).ts, 30_000, "new samples after it");
    assert.ok((await api("GET", "/host/metrics?since=10m&step=1s")).body.samples[0].ts <= firstTs, "and the host's");
    assert.equal((await api("DELETE", `/sandboxes/${id}`)).status, 200);
    assert.deepEqual((await api("GET", `/sandboxes/${id}/metrics?since=10m`)).body.samples, []);
  });
});
