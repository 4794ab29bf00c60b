// Benchmark of data and images; prints one JSON document. On one server, in one run:
// sequential write and read throughput (dd, 64 MiB, flushed, caches dropped before reading) on a
// named volume against the same on the sandbox's root disk; a build of a small Dockerfile cold
// (--no-cache) against the same build again (every step from the cache); and a commit of a
// sandbox of the built image against a spawn of it. Usage: node dist/bench/data.js [--rounds 3]
import { rmSync } from "node:fs";
import { mkdtemp, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { startServer } from "../src/compose/serve.js";
import type { BuildReport } from "../src/core/builder/builder.js";
import { benchConfig } from "./data-dir.js";
import { pct, machine } from "./stats.js";

const { values } = parseArgs({ options: { rounds: { type: "string", default: "3" } } });
const ROUNDS = Number(values.rounds);
const MB = 64;

const stats = (xs: number[]) => ({ p50: pct(xs, 50), p90: pct(xs, 90), n: xs.length });
const time = async (fn: () => Promise<unknown>) => {
  const t = performance.now();
  await fn();
  return Math.round((performance.now() - t) * 10) / 10;
};
const quiet: BuildReport = { steps: () => {}, step: () => {}, log: () => {} };

async function main() {
  const cfg = await benchConfig();
  const server = await startServer(cfg, "bench");
  const forge = server.forge;
  await (await forge.sandboxes.spawn({})).destroy(); // the base snapshot exists before anything is timed

  // Throughput: MiB/s of dd with the guest's caches dropped, the volume against the root disk.
  const sb = await forge.sandboxes.spawn({ volumes: ["bench-vol:/vol"], diskMb: 2048 });
  const mibps: Record<"volume" | "root", { write: number[]; read: number[] }> = { volume: { write: [], read: [] }, root: { write: [], read: [] } };
  for (let i = 0; i < ROUNDS; i++) {
    for (const [where, dir] of [
      ["root", "/var/tmp"],
      ["volume", "/vol"],
    ] as const) {
      const file = `${dir}/bench-${i}`;
      const w = await time(() => sb.exec(`dd if=/dev/zero of=${file} bs=1M count=${MB} conv=fsync status=none`));
      await sb.exec("sync; echo 3 > /proc/sys/vm/drop_caches");
      const r = await time(() => sb.exec(`dd if=${file} of=/dev/null bs=1M status=none`));
      await sb.exec(`rm -f ${file}`);
      mibps[where].write.push(Math.round((MB / w) * 1000));
      mibps[where].read.push(Math.round((MB / r) * 1000));
    }
  }
  await sb.destroy();
  await forge.volumes.remove("bench-vol");

  // Builds: a small Dockerfile (a file copied in, two RUN steps) cold, then from the cache.
  const ctx = await mkdtemp(join(tmpdir(), "fvm-bench-build-"));
  process.once("exit", () => rmSync(ctx, { recursive: true, force: true }));
  await writeFile(
    join(ctx, "Dockerfile"),
    'FROM forgevm/debian:bookworm\nWORKDIR /app\nCOPY app.py .\nRUN python3 -m py_compile app.py\nRUN echo built > /app/stamp\nCMD ["python3", "/app/app.py"]\n',
  );
  await writeFile(join(ctx, "app.py"), "print('hello')\n");
  // The built-in image's own layer is made once, before anything is timed.
  await forge.builds.run(ctx, { tag: "bench/warm:v1" }, quiet);
  const coldMs: number[] = [];
  const cachedMs: number[] = [];
  for (let i = 0; i < ROUNDS; i++) {
    coldMs.push(await time(() => forge.builds.run(ctx, { tag: "bench/app:v1", noCache: true }, quiet)));
    cachedMs.push(await time(() => forge.builds.run(ctx, { tag: "bench/app:v1" }, quiet)));
  }

  // Commit of a sandbox with one file changed, against a spawn of the same image.
  const spawnMs: number[] = [];
  const commitMs: number[] = [];
  const frozenMs: number[] = [];
  for (let i = 0; i < ROUNDS; i++) {
    let s: Awaited<ReturnType<typeof forge.sandboxes.spawn>> | null = null;
    spawnMs.push(await time(async () => (s = await forge.sandboxes.spawn({ image: "bench/app:v1" }))));
    await s!.exec("echo changed > /app/new");
    const r = await forge.images.commit(s!.id, { image: `bench/commit:${i}` });
    commitMs.push(r.durationMs);
    frozenMs.push(r.frozenMs);
    await s!.destroy();
    await forge.images.remove(`bench/commit:${i}`);
  }
  const accel = (await forge.providers.health()).accel;
  for (const n of ["bench/app:v1", "bench/warm:v1"]) await forge.images.remove(n).catch(() => {});
  await server.close();

  const ratio = (xs: number[], base: number[]) => Math.round((pct(xs, 50) / pct(base, 50)) * 100) / 100;
  console.log(
    JSON.stringify(
      {
        benchmark: "data",
        date: new Date().toISOString(),
        machine: machine(),
        accel,
        dd_64MiB_MiB_per_s: {
          root_write: stats(mibps.root.write),
          volume_write: stats(mibps.volume.write),
          root_read: stats(mibps.root.read),
          volume_read: stats(mibps.volume.read),
          ratio_volume_to_root_write_p50: ratio(mibps.volume.write, mibps.root.write),
          ratio_volume_to_root_read_p50: ratio(mibps.volume.read, mibps.root.read),
        },
        build_ms: { cold: stats(coldMs), cached: stats(cachedMs), ratio_cold_to_cached_p50: ratio(coldMs, cachedMs) },
        commit_ms: { spawn: stats(spawnMs), commit: stats(commitMs), processes_stopped: stats(frozenMs), ratio_commit_to_spawn_p50: ratio(commitMs, spawnMs) },
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
