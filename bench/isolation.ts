// What isolation costs, in one run on one machine:
//   - spawn (restore from the base snapshot) to a first exec with the confined VMM against the
//     same with FORGEVM's jail off (baseline), --runs each, one at a time;
//   - egress through the proxy: time to first byte of a small request and throughput of a
//     --mib download from a host server, against writing the same bytes into the guest as a file
//     over the same agent channel (baseline: the same direction, host → guest);
//   - a published port: guest → host throughput of the same download against reading the file
//     back out (baseline), and small-request latency.
// Prints one JSON document. Usage: node dist/bench/isolation.js [--runs 10] [--mib 64]
import { createServer } from "node:http";
import { cpus } from "node:os";
import { parseArgs } from "node:util";
import { benchForge } from "./data-dir.js";

const { values } = parseArgs({ options: { runs: { type: "string", default: "10" }, mib: { type: "string", default: "64" } } });
const RUNS = Number(values.runs);
const MIB = Number(values.mib);
const round = (x: number) => Math.round(x * 10) / 10;
function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return round(s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)]);
}
const summary = (xs: number[]) => ({ n: xs.length, p50: pct(xs, 50), p95: pct(xs, 95), max: pct(xs, 100) });

let accel = "";

async function spawnTimes(jail: boolean): Promise<number[]> {
  const forge = await benchForge({ jail, reapIntervalMs: 0 });
  accel = (await forge.providers.health()).accel ?? "";
  try {
    await (await forge.sandboxes.spawn()).destroy(); // makes sure the base snapshot exists
    const ms: number[] = [];
    for (let i = 0; i < RUNS; i++) {
      const t0 = performance.now();
      const sb = await forge.sandboxes.spawn();
      await sb.exec("true");
      ms.push(performance.now() - t0);
      await sb.destroy();
    }
    return ms;
  } finally {
    await forge.close();
  }
}

async function network() {
  const body = Buffer.alloc(MIB * 1048576, 0x61);
  const host = createServer((req, res) => res.end(req.url === "/big" ? body : "ok\n"));
  await new Promise<void>((r) => host.listen(0, "127.0.0.1", r));
  const port = (host.address() as { port: number }).port;
  const forge = await benchForge({ reapIntervalMs: 0, network: { hostsOverride: { "bench.forgevm.test": "127.0.0.1" } } });
  try {
    const sb = await forge.sandboxes.spawn({ allow: [`bench.forgevm.test:${port}`], ports: ["0:8000"] });
    const url = `http://bench.forgevm.test:${port}`;
    const firstByte: number[] = [];
    for (let i = 0; i < RUNS; i++) {
      const r = await sb.exec(`curl -s -o /dev/null -w '%{time_starttransfer}' ${url}/small`);
      firstByte.push(Number(r.stdout) * 1000);
    }
    const down = await sb.exec(`curl -s -o /dev/null -w '%{size_download} %{time_total}' ${url}/big`, { timeoutMs: 600_000 });
    const [bytes, secs] = down.stdout.split(" ").map(Number);
    if (bytes !== body.length) throw new Error(`proxy download got ${bytes} bytes`);
    // baselines over the same channel: the same bytes written into the guest as a file (the
    // direction of an egress download) and read out of it (the direction of a published port)
    let t0 = performance.now();
    await sb.writeFile("/root/big", body);
    const uploadSecs = (performance.now() - t0) / 1000;
    t0 = performance.now();
    const file = await sb.readFile("/root/big", body.length + 1);
    const fileSecs = (performance.now() - t0) / 1000;
    if (file.length !== body.length) throw new Error("file read short");
    // published port: the guest serves /root/big, the host downloads it
    await sb.exec("cd /root && (nohup python3 -m http.server 8000 >/dev/null 2>&1 &); sleep 1.5");
    const hp = forge.network.get(sb.id).ports[0].host_port;
    const small: number[] = [];
    for (let i = 0; i < RUNS; i++) {
      t0 = performance.now();
      await (await fetch(`http://127.0.0.1:${hp}/`)).arrayBuffer();
      small.push(performance.now() - t0);
    }
    t0 = performance.now();
    const got = await (await fetch(`http://127.0.0.1:${hp}/big`)).arrayBuffer();
    const portSecs = (performance.now() - t0) / 1000;
    if (got.byteLength !== body.length) throw new Error("published port download short");
    await sb.destroy();
    const mbps = (s: number) => round(MIB / s);
    return {
      egress: { first_byte_ms: summary(firstByte), download_mib_s: mbps(secs), file_write_baseline_mib_s: mbps(uploadSecs), ratio_to_baseline: round(uploadSecs / secs) },
      published_port: { small_request_ms: summary(small), download_mib_s: mbps(portSecs), file_read_baseline_mib_s: mbps(fileSecs), ratio_to_baseline: round(fileSecs / portSecs) },
    };
  } finally {
    await forge.close();
    host.close();
  }
}

const unjailed = await spawnTimes(false);
const jailed = await spawnTimes(true);
const net = await network();
console.log(
  JSON.stringify(
    {
      bench: "isolation",
      date: new Date().toISOString(),
      cpu: cpus()[0]?.model,
      cores: cpus().length,
      accel,
      spawn_to_first_exec_ms: { jail_off_baseline: summary(unjailed), jailed: summary(jailed), ratio_p50: round(pct(jailed, 50) / pct(unjailed, 50)) },
      ...net,
    },
    null,
    2,
  ),
);
