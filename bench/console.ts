// Benchmark of what people look at; prints one JSON document. On one server, in one run: the
// metrics sampler's CPU cost with 10 idle sandboxes (the server's own CPU and the VMs', in
// windows with the sampler on against windows with it off, alternating), and the web console's
// time to interactive (the dashboard drawn with its data) against a plain document from the same
// server. Usage: node dist/bench/console.js [--rounds 3] [--window 20]
import { parseArgs } from "node:util";
import { chromium } from "playwright-core";
import { startServer } from "../src/compose/serve.js";
import { benchConfig } from "./data-dir.js";
import { pct, machine } from "./stats.js";

const { values } = parseArgs({ options: { rounds: { type: "string", default: "3" }, window: { type: "string", default: "20" }, sandboxes: { type: "string", default: "10" } } });
const ROUNDS = Number(values.rounds);
const WINDOW_MS = Number(values.window) * 1000;
const SANDBOXES = Number(values.sandboxes);
const KEY = "bench-key";

const stats = (xs: number[]) => ({ p50: pct(xs, 50), p90: pct(xs, 90), n: xs.length });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function main() {
  // The sampler's timer is off: the windows that sample tick it by hand at its interval.
  const cfg = await benchConfig((c) => {
    c.metrics.enabled = false;
    c.auth.api_key = KEY;
  });
  const server = await startServer(cfg, "bench");
  const forge = server.forge;
  await (await forge.sandboxes.spawn({})).destroy(); // the base snapshot exists before anything is timed
  const boxes: Awaited<ReturnType<typeof forge.sandboxes.spawn>>[] = [];
  for (let i = 0; i < SANDBOXES; i++) boxes.push(await forge.sandboxes.spawn({ memoryMb: 256 }));
  await sleep(5000);
  const intervalMs = forge.metrics.intervalMs;

  const vmmCpuMs = async () => {
    let ms = 0;
    for (const sb of boxes) ms += (await sb.vm.usage())?.cpuMs ?? 0;
    return ms;
  };
  /** CPU per second of wall time in a window: the server process's and the VMMs'. */
  const window = async (sampling: boolean) => {
    const c0 = process.cpuUsage();
    const v0 = await vmmCpuMs();
    const t0 = performance.now();
    while (performance.now() - t0 < WINDOW_MS) {
      if (sampling) await forge.metrics.sample();
      await sleep(Math.max(0, Math.min(intervalMs, WINDOW_MS - (performance.now() - t0))));
    }
    const wall = (performance.now() - t0) / 1000;
    const c = process.cpuUsage(c0);
    return { server: (c.user + c.system) / 1000 / wall, vmm: ((await vmmCpuMs()) - v0) / wall };
  };
  const off = { server: [] as number[], vmm: [] as number[] };
  const on = { server: [] as number[], vmm: [] as number[] };
  for (let i = 0; i < ROUNDS; i++) {
    const a = await window(false);
    const b = await window(true);
    off.server.push(Math.round(a.server * 10) / 10);
    off.vmm.push(Math.round(a.vmm * 10) / 10);
    on.server.push(Math.round(b.server * 10) / 10);
    on.vmm.push(Math.round(b.vmm * 10) / 10);
  }
  const samples = forge.metrics.history(boxes[0].id, Date.now() - 3600_000, intervalMs).samples.length;

  // Time to interactive: from navigation to the dashboard showing the host's numbers and the sandboxes.
  const browser = await chromium.launch({ executablePath: "/usr/bin/chromium", args: ["--headless", "--no-sandbox", "--disable-gpu"] });
  const context = await browser.newContext({ extraHTTPHeaders: { "X-API-Key": KEY } });
  await context.addInitScript(`localStorage.setItem("forgevm_api_key", ${JSON.stringify(KEY)})`);
  const ttiMs: number[] = [];
  const baselineMs: number[] = [];
  await forge.metrics.sample();
  for (let i = 0; i < ROUNDS + 1; i++) {
    const page = await context.newPage();
    let t = performance.now();
    await page.goto(`${server.url}/api/v1/openapi.json`);
    const base = performance.now() - t;
    t = performance.now();
    await page.goto(server.url);
    await page.getByRole("heading", { name: "Dashboard" }).waitFor();
    await page.locator(".tile .value").first().filter({ hasNotText: "–" }).waitFor();
    await page.locator(`a[href="#/sandboxes/${boxes[0].id}"]`).first().waitFor();
    const tti = performance.now() - t;
    await page.close();
    if (i === 0) continue; // the first load fills the browser's cache of the bundle
    ttiMs.push(Math.round(tti));
    baselineMs.push(Math.round(base));
  }
  await browser.close();
  const accel = (await forge.providers.health()).accel;
  for (const sb of boxes) await sb.destroy();
  await server.close();

  const ratio = (xs: number[], b: number[]) => Math.round((pct(xs, 50) / pct(b, 50)) * 100) / 100;
  console.log(
    JSON.stringify(
      {
        benchmark: "console",
        date: new Date().toISOString(),
        machine: machine(),
        accel,
        sampler: {
          sandboxes: SANDBOXES,
          interval_ms: intervalMs,
          window_s: WINDOW_MS / 1000,
          samples_kept_per_sandbox: samples,
          server_cpu_ms_per_s: { off: stats(off.server), on: stats(on.server), added_p50: Math.round((pct(on.server, 50) - pct(off.server, 50)) * 10) / 10 },
          vmm_cpu_ms_per_s: { off: stats(off.vmm), on: stats(on.vmm), added_p50: Math.round((pct(on.vmm, 50) - pct(off.vmm, 50)) * 10) / 10 },
        },
        console_ms: { time_to_interactive: stats(ttiMs), plain_document: stats(baselineMs), ratio_tti_to_document_p50: ratio(ttiMs, baselineMs) },
      },
      null,
      2,
    ),
  );
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
