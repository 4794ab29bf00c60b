// Benchmark of Docker's verbs on a sandbox; prints one JSON document. On one server, in one run:
// stop (SIGTERM to the main process, then the machine saved), start (restored, the main process
// run anew) and restart of a sandbox whose main process is `sleep`, against the baseline of a
// spawn (from the image's base snapshot) and a destroy of the same kind of sandbox.
// Also a tree copied in and out through the archive routes against single-file uploads and
// downloads of the same bytes. Usage: node dist/bench/workloads.js [--rounds 5]
import { randomBytes } from "node:crypto";
import { parseArgs } from "node:util";
import { Client } from "forgevm";
import { startServer } from "../src/compose/serve.js";
import { TAR_END, tarHeader, tarPadding } from "../src/util/tar-write.js";
import { benchConfig } from "./data-dir.js";
import { pct, machine } from "./stats.js";

const { values } = parseArgs({ options: { rounds: { type: "string", default: "5" } } });
const ROUNDS = Number(values.rounds);

const stats = (xs: number[]) => ({ p50: pct(xs, 50), p90: pct(xs, 90), n: xs.length });
const time = async (fn: () => Promise<unknown>) => {
  const t = performance.now();
  await fn();
  return Math.round((performance.now() - t) * 10) / 10;
};

async function main() {
  const cfg = await benchConfig();
  const server = await startServer(cfg, "bench");
  const client = new Client({ baseUrl: server.url, timeout: 300_000 });
  const main = { command: ["sleep", "3600"], restart: "unless-stopped" };
  // Warm: the base snapshot exists before anything is timed.
  await (await client.spawn({ main })).destroy();

  const spawnMs: number[] = [];
  const destroyMs: number[] = [];
  const stopMs: number[] = [];
  const startMs: number[] = [];
  const restartMs: number[] = [];
  const sb = await client.spawn({ main });
  for (let i = 0; i < ROUNDS; i++) {
    let other: Awaited<ReturnType<Client["spawn"]>> | null = null;
    spawnMs.push(await time(async () => (other = await client.spawn({ main }))));
    destroyMs.push(await time(() => (other as unknown as { destroy(): Promise<void> }).destroy()));
    stopMs.push(await time(() => client.stop(sb.id, { timeout: "5s" })));
    startMs.push(await time(() => client.start(sb.id)));
    restartMs.push(await time(() => client.restart(sb.id, { timeout: "5s" })));
  }

  // 8 MiB in 64 files of 128 KiB: one archive each way, against 64 single-file calls.
  const files = Array.from({ length: 64 }, (_, i) => ({ name: `f${i}`, data: randomBytes(128 * 1024) }));
  const tar = Buffer.concat([
    tarHeader({ path: "tree", type: "dir", mode: 0o755 }),
    ...files.flatMap((f) => [tarHeader({ path: `tree/${f.name}`, type: "file", mode: 0o644, size: f.data.length }), f.data, tarPadding(f.data.length)]),
    TAR_END,
  ]);
  const archiveUpMs: number[] = [];
  const archiveDownMs: number[] = [];
  const filesUpMs: number[] = [];
  const filesDownMs: number[] = [];
  for (let i = 0; i < ROUNDS; i++) {
    archiveUpMs.push(await time(() => sb.uploadArchive(`/tmp/a${i}`, tar)));
    filesUpMs.push(await time(async () => Promise.all(files.map((f) => sb.writeFile(`/tmp/f${i}/${f.name}`, f.data)))));
    archiveDownMs.push(await time(async () => new Uint8Array(await new Response(await sb.downloadArchive(`/tmp/a${i}/tree`)).arrayBuffer())));
    filesDownMs.push(await time(async () => Promise.all(files.map((f) => sb.readFile(`/tmp/f${i}/${f.name}`, { binary: true })))));
  }
  await sb.destroy();
  const accel = (await server.forge.providers.health()).accel;
  await server.close();

  const ratio = (xs: number[], base: number[]) => Math.round((pct(xs, 50) / pct(base, 50)) * 100) / 100;
  console.log(
    JSON.stringify(
      {
        benchmark: "workloads",
        date: new Date().toISOString(),
        machine: machine(),
        accel,
        memory_mb: server.forge.defaults.memoryMb,
        lifecycle_ms: {
          spawn: stats(spawnMs),
          destroy: stats(destroyMs),
          stop: stats(stopMs),
          start: stats(startMs),
          restart: stats(restartMs),
          ratio_start_to_spawn_p50: ratio(startMs, spawnMs),
          ratio_stop_to_destroy_p50: ratio(stopMs, destroyMs),
        },
        copy_8MiB_in_64_files_ms: {
          archive_upload: stats(archiveUpMs),
          single_file_uploads: stats(filesUpMs),
          archive_download: stats(archiveDownMs),
          single_file_downloads: stats(filesDownMs),
          ratio_archive_to_files_upload_p50: ratio(archiveUpMs, filesUpMs),
          ratio_archive_to_files_download_p50: ratio(archiveDownMs, filesDownMs),
        },
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
