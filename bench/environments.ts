// Benchmark of environment builds; prints one JSON document. On one Forge, against a local
// package index (test/package-index.ts: a .deb and a wheel, no internet), in one run: the
// Dockerfile an environment generates, built cold (--no-cache) by the Dockerfile builder
// directly (the baseline), against the environment build of the same spec cold; then an
// environment rebuild (every step from the cache); and how long a cancel of a running build
// takes to answer. Usage: node dist/bench/environments.js [--rounds 2]
import { rmSync } from "node:fs";
import { mkdtemp, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import type { BuildReport } from "../src/core/builder/builder.js";
import { cleanSpec } from "../src/core/environments/spec.js";
import { environmentDockerfile } from "../src/core/environments/steps.js";
import { startPackageIndex } from "../test/package-index.js";
import { benchForge } from "./data-dir.js";
import { pct, machine } from "./stats.js";

const { values } = parseArgs({ options: { rounds: { type: "string", default: "2" } } });
const ROUNDS = Number(values.rounds);
const quiet: BuildReport = { steps: () => {}, step: () => {}, log: () => {} };
const stats = (xs: number[]) => ({ p50: pct(xs, 50), p90: pct(xs, 90), n: xs.length });
const time = async (fn: () => Promise<unknown>) => {
  const t = performance.now();
  await fn();
  return Math.round(performance.now() - t);
};

async function main() {
  const work = await mkdtemp(join(tmpdir(), "fvm-bench-env-"));
  process.once("exit", () => rmSync(work, { recursive: true, force: true }));
  const index = await startPackageIndex(work);
  const input = { owner_id: "bench", base_image: "forgevm/debian:bookworm", python_packages: ["demo-env-pkg"], apt_packages: ["forgevm-hello"] };
  const { dockerfile, allow } = environmentDockerfile(cleanSpec({ ...input, name: "x" }), { ...index.sources, allow: [] });
  const ctx = await mkdtemp(join(work, "ctx-"));
  await writeFile(join(ctx, "Dockerfile"), dockerfile);
  const direct: number[] = [];
  const envCold: number[] = [];
  const envCached: number[] = [];
  const cancelMs: number[] = [];
  let accel = "";
  // Each round on a data directory of its own, so its build cache starts empty.
  for (let i = 0; i < ROUNDS; i++) {
    const forge = await benchForge({ reapIntervalMs: 0, network: { hostsOverride: index.hostsOverride }, environments: { ...index.sources, memoryMb: 512 } });
    const env = forge.environments;
    const until = async (id: string) => {
      for (;;) {
        const b = env.builds.view(id);
        if (["ready", "failed", "canceled"].includes(b.status)) return b;
        await new Promise((r) => setTimeout(r, 50));
      }
    };
    await (await forge.sandboxes.spawn({})).destroy(); // the base snapshot exists before anything is timed
    // ... and so does the built-in image's own layer, which the first build of it makes once.
    const warm = await mkdtemp(join(work, "warm-"));
    await writeFile(join(warm, "Dockerfile"), "FROM forgevm/debian:bookworm\nRUN true\n");
    await forge.builds.run(warm, { tag: "bench/warm:v1" }, quiet);
    const spec = env.createSpec({ ...input, name: "demo" });
    const t0 = performance.now();
    const b = await until(env.builds.create(spec.id, undefined, undefined).id);
    envCold.push(Math.round(performance.now() - t0));
    if (b.status !== "ready") throw new Error(`environment build failed: ${b.error}\n${b.log}`);
    const t1 = performance.now();
    const again = await until(env.builds.create(spec.id, undefined, undefined).id);
    envCached.push(Math.round(performance.now() - t1));
    if (again.steps.some((s) => s.status === "done" && !s.instruction.startsWith("FROM"))) throw new Error("the rebuild ran a step");
    // The baseline: the same Dockerfile through the builder, nothing read from the cache.
    direct.push(await time(() => forge.builds.run(ctx, { tag: "bench/env-direct:v1", noCache: true, network: "allowlist", allow, memoryMb: 512 }, quiet)));
    // Cancel: a build waiting on a package index that never answers.
    const slow = env.createSpec({ ...input, name: "slow", apt_packages: [], python_packages: ["slow-pkg"] });
    const before = index.hits.slow;
    const s = env.builds.create(slow.id, undefined, undefined);
    while (index.hits.slow === before) await new Promise((r) => setTimeout(r, 50));
    cancelMs.push(await time(() => env.builds.cancel(s.id)));
    accel = (await forge.providers.health()).accel ?? "";
    await forge.close();
  }
  index.close();

  const ratio = (xs: number[], base: number[]) => Math.round((pct(xs, 50) / pct(base, 50)) * 100) / 100;
  console.log(
    JSON.stringify(
      {
        benchmark: "environments",
        date: new Date().toISOString(),
        machine: machine(),
        accel,
        spec: { apt: input.apt_packages, pip: input.python_packages, base: input.base_image },
        build_ms: {
          dockerfile_direct_cold: stats(direct),
          environment_cold: stats(envCold),
          environment_cached: stats(envCached),
          ratio_environment_to_direct_cold_p50: ratio(envCold, direct),
        },
        cancel_ms: stats(cancelMs),
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
