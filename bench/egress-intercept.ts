// What reading a request to add an egress rule's headers costs, in one run on one machine: a
// guest's HTTPS requests through the egress proxy to a host server standing in for an API, to a
// destination with a rule (the proxy terminates the guest's TLS with the egress CA, reads the
// request, adds the header with the secret filled in, and opens its own verified TLS upstream)
// against the same server under a name without a rule (CONNECT passed through unread: the
// baseline). Time to first byte of small requests, interleaved, --runs each; then the throughput
// of a --mib download each way. Prints one JSON document.
// Usage: node dist/bench/egress-intercept.js [--runs 20] [--mib 32]
import { writeFile } from "node:fs/promises";
import { createServer } from "node:https";
import { cpus, tmpdir } from "node:os";
import { join } from "node:path";
import { mkdtempSync, rmSync } from "node:fs";
import { createSecureContext } from "node:tls";
import { parseArgs } from "node:util";
import { EgressCa } from "../src/net/egress-ca.js";
import { benchForge } from "./data-dir.js";

const { values } = parseArgs({ options: { runs: { type: "string", default: "20" }, mib: { type: "string", default: "32" } } });
const RUNS = Number(values.runs);
const MIB = Number(values.mib);
const RULED = "api.bench.test";
const PLAIN = "plain.bench.test";
const round = (x: number) => Math.round(x * 10) / 10;
function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return round(s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)]);
}
const summary = (xs: number[]) => ({ n: xs.length, p50: pct(xs, 50), p95: pct(xs, 95), max: pct(xs, 100) });

const dir = mkdtempSync(join(tmpdir(), "fvb-intercept-"));
process.once("exit", () => rmSync(dir, { recursive: true, force: true }));
// The stand-in API's own CA, which the server is told to trust upstream.
const upstreamCa = new EgressCa(join(dir, "upstream-ca"));
await writeFile(join(dir, "upstream-ca.pem"), await upstreamCa.certPem());
const leaf = await upstreamCa.leaf(RULED);
const body = Buffer.alloc(MIB * 1048576, 0x61);
let authSeen = 0;
const plainLeaf = await upstreamCa.leaf(PLAIN);
const api = createServer({ cert: leaf.cert, key: leaf.key, SNICallback: (name, cb) => cb(null, createSecureContext(name === PLAIN ? plainLeaf : leaf)) }, (req, res) => {
  if (req.headers.authorization === "Bearer bench-secret-value") authSeen++;
  res.end(req.url === "/big" ? body : "ok\n");
});
await new Promise<void>((r) => api.listen(0, "127.0.0.1", r));
const port = (api.address() as { port: number }).port;

const forge = await benchForge({
  reapIntervalMs: 0,
  network: { hostsOverride: { [RULED]: "127.0.0.1", [PLAIN]: "127.0.0.1" }, upstreamCaFile: join(dir, "upstream-ca.pem") },
});
try {
  const accel = (await forge.providers.health()).accel ?? "";
  await forge.secrets.create({ name: "bench_key", value: "bench-secret-value" });
  const sb = await forge.sandboxes.spawn({
    allow: [`${RULED}:${port}`, `${PLAIN}:${port}`],
    egressRules: { [RULED]: { headers: { Authorization: "Bearer {{bench_key}}" } } },
  });
  // The ruled name is answered with the egress CA's certificate, the plain one (passed through
  // unread) with the stand-in's own: both are verified, each against the system bundle with the
  // CA it needs, so the guest does the same work for both.
  await sb.writeFile("/tmp/upstream-ca.pem", await upstreamCa.certPem());
  await sb.exec("cat /etc/ssl/certs/ca-certificates.crt /tmp/upstream-ca.pem > /tmp/plain-bundle.pem");
  const curl = (host: string, path: string, bundle: string) =>
    `curl -sS --cacert ${bundle} -o /dev/null -w '%{time_starttransfer} %{size_download} %{time_total}' https://${host}:${port}${path}`;
  const ruled = (path: string) => curl(RULED, path, "/etc/ssl/certs/ca-certificates.crt");
  const plain = (path: string) => curl(PLAIN, path, "/tmp/plain-bundle.pem");
  const firstByte = { intercepted: [] as number[], passed_through: [] as number[] };
  for (let i = 0; i < RUNS; i++) {
    for (const [kind, cmd] of [
      ["intercepted", ruled("/small")],
      ["passed_through", plain("/small")],
    ] as const) {
      const r = await sb.exec(cmd);
      if (r.exitCode !== 0) throw new Error(`${kind}: ${r.stderr}`);
      firstByte[kind].push(Number(r.stdout.split(" ")[0]) * 1000);
    }
  }
  const download = async (cmd: string) => {
    const r = await sb.exec(cmd, { timeoutMs: 600_000 });
    const [, bytes, secs] = r.stdout.split(" ").map(Number);
    if (bytes !== body.length) throw new Error(`download got ${bytes} bytes: ${r.stderr}`);
    return round(MIB / secs);
  };
  const interceptedMibS = await download(ruled("/big"));
  const passedMibS = await download(plain("/big"));
  if (authSeen !== RUNS + 1) throw new Error(`the header reached the API ${authSeen} times, not ${RUNS + 1}`);
  await sb.destroy();
  console.log(
    JSON.stringify(
      {
        bench: "egress-intercept",
        date: new Date().toISOString(),
        cpu: cpus()[0]?.model,
        cores: cpus().length,
        accel,
        https_first_byte_ms: {
          passed_through_baseline: summary(firstByte.passed_through),
          intercepted: summary(firstByte.intercepted),
          ratio_p50: round(pct(firstByte.intercepted, 50) / pct(firstByte.passed_through, 50)),
        },
        https_download_mib_s: { mib: MIB, passed_through_baseline: passedMibS, intercepted: interceptedMibS, ratio: round((interceptedMibS / passedMibS) * 100) / 100 },
      },
      null,
      2,
    ),
  );
} finally {
  await forge.close();
  api.close();
}
