// Benchmark of image pulls; prints one JSON document. A ~100 MB image (busybox plus 100 MB of
// incompressible data) is pushed to a local docker-registry by skopeo, then pulled and installed
// (verify, flatten, pack ext4). Then the first sandbox from it is spawned, beside a spawn of the
// default image in the same run as the baseline.
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { benchForge } from "./data-dir.js";
import { run } from "../src/util/process.js";
import { writeImage, writeIndex } from "../test/oci-writer.js";
import { machine } from "./stats.js";

async function main() {
  const work = await mkdtemp(join(tmpdir(), "fvm-bench-img-"));
  const host = "127.0.0.1:5099";
  await writeFile(join(work, "config.yml"), `version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: ${join(work, "storage")}\nhttp:\n  addr: ${host}\n`);
  const registry = spawn("docker-registry", ["serve", join(work, "config.yml")], { stdio: "ignore" });
  const forge = await benchForge({ reapIntervalMs: 0 });
  try {
    for (let i = 0; i < 100; i++) {
      if (
        await fetch(`http://${host}/v2/`).then(
          (r) => r.ok,
          () => false,
        )
      )
        break;
      await new Promise((r) => setTimeout(r, 100));
    }
    const layout = join(work, "layout");
    const busybox = await readFile("/bin/busybox");
    const big = randomBytes(100 * 1024 * 1024);
    const desc = await writeImage(layout, {
      layers: [
        {
          entries: [
            { path: "bin/busybox", data: busybox, mode: 0o755 },
            { path: "bin/sh", type: "symlink", linkname: "busybox" },
          ],
        },
        { entries: [{ path: "data/blob.bin", data: big }] },
      ],
    });
    await writeIndex(layout, [{ tag: "t", descriptor: desc }]);
    await run("skopeo", ["copy", "--quiet", "--dest-tls-verify=false", `oci:${layout}:t`, `docker://${host}/bench/big:v1`]);
    const ref = `${host}/bench/big:v1`;
    await forge.images.remove(ref).catch(() => {});
    await forge.images.pruneBlobs();

    let t0 = performance.now();
    const img = await forge.images.pull(ref);
    const pullMs = performance.now() - t0;

    t0 = performance.now();
    const first = await forge.sandboxes.spawn({ image: ref, memoryMb: 256 });
    const firstSpawnMs = performance.now() - t0;
    const check = await first.exec(["sh", "-c", "wc -c < /data/blob.bin"]);
    await first.destroy();
    if (check.stdout.trim() !== String(big.length)) throw new Error(`content check failed: ${check.stdout}`);

    t0 = performance.now();
    const baseline = await forge.sandboxes.spawn({ memoryMb: 256 });
    const baselineMs = performance.now() - t0;
    await baseline.destroy();

    console.log(
      JSON.stringify(
        {
          benchmark: "images",
          date: new Date().toISOString(),
          machine: machine(),
          accel: (await forge.providers.health()).accel,
          image: { layers_mb: Math.round((busybox.length + big.length) / 1e6), rootfs_mib: Math.round(img.size / 1048576) },
          pull_and_install_ms: Math.round(pullMs),
          pull_mb_per_s: Math.round(((busybox.length + big.length) / 1e6 / (pullMs / 1000)) * 10) / 10,
          first_spawn_from_pulled_ms: Math.round(firstSpawnMs),
          spawn_default_image_ms: Math.round(baselineMs),
          ratio_first_spawn_to_default: Math.round((firstSpawnMs / baselineMs) * 100) / 100,
        },
        null,
        2,
      ),
    );
    await forge.images.remove(ref);
    await forge.images.pruneBlobs();
  } finally {
    await forge.close();
    registry.kill("SIGTERM");
    await rm(work, { recursive: true, force: true });
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
