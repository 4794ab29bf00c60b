// Network walls with real VMs. Every wall has a control that must succeed, so a test cannot pass
// because nothing works at all.
import assert from "node:assert/strict";
import { execFile, spawn as spawnChild, type ChildProcess } from "node:child_process";
import { createServer as createHttpServer, type Server } from "node:http";
import { connect, createServer as createTcpServer } from "node:net";
import { networkInterfaces } from "node:os";
import { promisify } from "node:util";
import { after, before, describe, it } from "node:test";
import type { FastifyInstance } from "fastify";
import { buildApp } from "../../src/compose/app.js";
import { firewallProblem } from "../../src/providers/qemu/firewall.js";
import type { Forge, Sandbox } from "../../src/index.js";
import { assertNoVmLeft, openForge } from "../helpers.js";

/** A guest shell command that waits until something listens on the port: a fixed sleep is too short under load. */
const UNTIL_LISTENING = (port: number) =>
  `for i in $(seq 100); do python3 -c 'import socket; socket.create_connection(("127.0.0.1", ${port}), 1)' 2>/dev/null && break; sleep 0.1; done`;
const execFileP = promisify(execFile);
const TEST_NAME = "pkg.forgevm.test"; // resolved by the proxy's test-only override to 127.0.0.1
const OPEN_NAME = "open.forgevm.test"; // likewise, and on no allowlist

/** A host address that is not loopback (the host's own LAN address), if it has one. */
const lanAddress = Object.values(networkInterfaces())
  .flat()
  .find((a) => a && a.family === "IPv4" && !a.internal)?.address;

let forge: Forge;
let app: FastifyInstance;
let api: string;
let apiPort: number;
let web: Server; // a host service on 0.0.0.0, standing in for anything the host runs
let webPort: number;
let a: Sandbox; // allowlist
let n: Sandbox; // none

const sh = async (sb: Sandbox, cmd: string) => sb.exec(cmd, { timeoutMs: 30_000 });
/** curl in the guest: prints the HTTP status (000 when no connection was made). */
const curl = async (sb: Sandbox, args: string) => (await sh(sb, `curl -s -o /dev/null -w '%{http_code}' -m 8 ${args}`)).stdout.trim();
const curlBody = async (sb: Sandbox, args: string) => (await sh(sb, `curl -sS -m 8 ${args}`)).stdout;
/** Sends one raw request head to the guest's proxy port and returns the reply (curl never proxies "localhost"). */
const rawProxy = async (sb: Sandbox, requestLine: string) =>
  (await sh(sb, `bash -c 'exec 3<>/dev/tcp/127.0.0.1/3128; printf "${requestLine}\\r\\nHost: x\\r\\n\\r\\n" >&3; timeout 8 cat <&3'`)).stdout;
/** Through the proxy even for addresses NO_PROXY lists (the guest could always do this). */
const VIA_PROXY = "-x http://127.0.0.1:3128 --noproxy ''";

before(async () => {
  web = createHttpServer((req, res) => res.end(`host service ${req.url}\n`));
  await new Promise<void>((r) => web.listen(0, "0.0.0.0", r));
  webPort = (web.address() as { port: number }).port;
  forge = await openForge({ network: { hostsOverride: { [TEST_NAME]: "127.0.0.1", [OPEN_NAME]: "127.0.0.1" } } });
  app = await buildApp({ forge, version: "test" });
  api = await app.listen({ host: "127.0.0.1", port: 0 });
  apiPort = Number(new URL(api).port);
  [a, n] = await Promise.all([forge.sandboxes.spawn({ allow: [`${TEST_NAME}:${webPort}`] }), forge.sandboxes.spawn({ network: "none" })]);
});

after(async () => {
  await app?.close();
  await forge?.close();
  web?.close();
  if (forge) await assertNoVmLeft(forge);
});

describe("network: none", () => {
  it("has no network interface besides lo, and no proxy", async () => {
    assert.equal((await sh(n, "ls /sys/class/net")).stdout.trim(), "lo");
    assert.equal((await sh(n, "env | grep -ci proxy")).stdout.trim(), "0");
    assert.equal(forge.network.get(n.id).mode, "none");
    // control: loopback inside the guest works
    await sh(n, `cd /tmp && (nohup python3 -m http.server 8000 >/dev/null 2>&1 &) ; ${UNTIL_LISTENING(8000)}`);
    assert.equal(await curl(n, "http://127.0.0.1:8000/"), "200");
  });

  it("cannot reach a host listener on 127.0.0.1, the API port, or the host's own address", async () => {
    // controls: the host reaches them
    assert.equal((await fetch(`http://127.0.0.1:${webPort}/`)).status, 200);
    assert.equal((await fetch(`${api}/api/v1/health`)).status, 200);
    assert.equal(await curl(n, `http://127.0.0.1:${webPort}/`), "000");
    assert.equal(await curl(n, `http://127.0.0.1:${apiPort}/api/v1/health`), "000");
    assert.equal(await curl(n, `http://10.0.2.2:${webPort}/`), "000");
    if (lanAddress) {
      assert.equal((await fetch(`http://${lanAddress}:${webPort}/`)).status, 200);
      assert.equal(await curl(n, `http://${lanAddress}:${webPort}/`), "000");
    }
  });
});

describe("network: allowlist", () => {
  it("has only lo, and every exec gets the proxy in its environment", async () => {
    assert.equal((await sh(a, "ls /sys/class/net")).stdout.trim(), "lo");
    const env = (await sh(a, "env")).stdout;
    assert.match(env, /^HTTP_PROXY=http:\/\/127\.0\.0\.1:3128$/m);
    assert.match(env, /^HTTPS_PROXY=http:\/\/127\.0\.0\.1:3128$/m);
    assert.match(env, /^NO_PROXY=localhost,127\.0\.0\.1,::1$/m);
  });

  it("reaches an allowlisted host through the proxy; a host not listed is refused and logged", async () => {
    assert.equal(await curlBody(a, `http://${TEST_NAME}:${webPort}/allowed`), "host service /allowed\n");
    const refused = await curlBody(a, `http://other.forgevm.test:${webPort}/`);
    assert.match(refused, /not on this sandbox's allowlist/);
    // the port is part of the rule: the allowlisted name on another port is refused
    assert.match(await curlBody(a, `http://${TEST_NAME}:${apiPort}/api/v1/health`), /not on this sandbox's allowlist/);
    const log = await forge.network.egressLog(a.id);
    const allowed = log.find((e) => e.host === TEST_NAME && e.decision === "allow");
    assert.ok(allowed, JSON.stringify(log));
    assert.equal(allowed.address, "127.0.0.1");
    assert.equal(allowed.port, webPort);
    assert.ok(log.some((e) => e.host === "other.forgevm.test" && e.decision === "deny"));
  });

  it("refuses suffix tricks, raw IP addresses and names that resolve to private addresses", async () => {
    const deny = async (url: string, why: RegExp) => {
      const body = await curlBody(a, url);
      assert.match(body, why, url);
    };
    await deny(`http://${TEST_NAME}.evil.example:${webPort}/`, /not on this sandbox's allowlist/);
    await deny(`http://evil${TEST_NAME}:${webPort}/`, /not on this sandbox's allowlist/);
    await deny(`${VIA_PROXY} http://127.0.0.1:${webPort}/`, /IP address not on this sandbox's allowlist/);
    await deny(`http://93.184.216.34/`, /IP address not on this sandbox's allowlist/);
    await deny(`http://169.254.169.254/latest/meta-data/`, /IP address not on this sandbox's allowlist/);
    // CONNECT is checked the same way
    assert.equal((await sh(a, `curl -sS -m 8 https://${TEST_NAME}.evil.example/`)).stderr.includes("403"), true);
    // An allowlisted name whose address is private (here localhost) is refused after resolution,
    // so neither DNS rebinding nor a hostile record can point the proxy at the host.
    await forge.network.setAllowlist(a.id, [`${TEST_NAME}:${webPort}`, `localhost:${webPort}`]);
    assert.match(await rawProxy(a, `GET http://localhost:${webPort}/ HTTP/1.1`), /403 Forbidden[\s\S]*resolves to a private, local or reserved address/);
    assert.match(await rawProxy(a, `CONNECT localhost:${webPort} HTTP/1.1`), /403 Forbidden[\s\S]*resolves to a private, local or reserved address/);
    // Even a listed IP literal of the host is refused: only the operator can open private ranges.
    await forge.network.setAllowlist(a.id, [`${TEST_NAME}:${webPort}`, `127.0.0.1:${webPort}`]);
    await deny(`${VIA_PROXY} http://127.0.0.1:${webPort}/`, /private, local or reserved address/);
    const log = await forge.network.egressLog(a.id, 50);
    for (const host of [`${TEST_NAME}.evil.example`, "93.184.216.34", "169.254.169.254", "localhost"]) {
      assert.ok(
        log.some((e) => e.host === host && e.decision === "deny"),
        `${host} refusal logged`,
      );
    }
    await forge.network.setAllowlist(a.id, [`${TEST_NAME}:${webPort}`]);
  });

  it("cannot reach host services directly either (no route out but the proxy)", async () => {
    assert.equal(await curl(a, `--noproxy '*' http://127.0.0.1:${webPort}/`), "000");
    assert.equal(await curl(a, `--noproxy '*' http://127.0.0.1:${apiPort}/api/v1/health`), "000");
    if (lanAddress) assert.equal(await curl(a, `--noproxy '*' http://${lanAddress}:${webPort}/`), "000");
    // through the proxy, the API port is refused as well
    assert.match(await curlBody(a, `${VIA_PROXY} http://127.0.0.1:${apiPort}/api/v1/health`), /not on this sandbox's allowlist/);
  });

  it("takes an allowlist change on the next request", async () => {
    const url = `http://${TEST_NAME}:${webPort}/live`;
    assert.equal(await curl(a, url), "200");
    const r = await fetch(`${api}/api/v1/sandboxes/${a.id}/network/allow`, {
      method: "PUT",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ allow: ["@pypi"] }),
    });
    assert.equal(r.status, 200);
    assert.deepEqual(((await r.json()) as { allow: string[] }).allow, ["@pypi"]);
    assert.equal(await curl(a, url), "403");
    const back = await fetch(`${api}/api/v1/sandboxes/${a.id}/network/allow`, {
      method: "PUT",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ allow: [`*.forgevm.test:${webPort}`] }),
    });
    assert.equal(back.status, 200);
    assert.equal(await curl(a, url), "200");
    // a wildcard covers subdomains only, never the bare domain
    assert.equal(await curl(a, `http://forgevm.test:${webPort}/`), "403");
  });

  it("a sandbox made without a network gets one while it runs: an allowlist, open egress but a deny list, then none again", async () => {
    const url = `http://${TEST_NAME}:${webPort}/changed`;
    const open = `http://${OPEN_NAME}:${webPort}/open`;
    assert.equal(await curl(n, url), "000", "control: no way out at first");
    const put = (body: object) => fetch(`${api}/api/v1/sandboxes/${n.id}/network`, { method: "PUT", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    let r = await put({ mode: "allowlist", allow: [`${TEST_NAME}:${webPort}`] });
    assert.equal(r.status, 200);
    assert.equal(((await r.json()) as { mode: string }).mode, "allowlist");
    assert.match((await sh(n, "env")).stdout, /^HTTP_PROXY=http:\/\/127\.0\.0\.1:3128$/m, "later execs get the proxy");
    assert.equal(await curlBody(n, url), "host service /changed\n");
    assert.equal(await curl(n, open), "403", "a name not listed is refused while egress is strict");
    // An empty deny list opens egress to every destination; a deny list closes what it names but what the allowlist lists.
    r = await put({ deny: [] });
    assert.deepEqual(((await r.json()) as { deny: string[] }).deny, []);
    assert.equal(await curlBody(n, open), "host service /open\n");
    assert.ok((await forge.network.egressLog(n.id, 5)).some((e) => e.host === OPEN_NAME && e.rule === "* (open egress)"));
    await put({ deny: ["127.0.0.0/8"] });
    assert.match(await curlBody(n, open), /denied to this sandbox \(denyOut: 127\.0\.0\.1\)/);
    assert.equal(await curl(n, url), "200", "the allowlist wins over the deny list");
    for (const [body, why] of [
      [{ deny: ["example.com"] }, /deny: "example\.com" is not an IP address or CIDR network/],
      [{ mode: "full" }, /without a network device/],
      [{ mode: "none", allow: ["pypi.org"] }, /need network "allowlist"/],
      [{ mode: "wide" }, /mode/],
    ] as [object, RegExp][]) {
      const bad = await put(body);
      assert.ok(bad.status === 400 || bad.status === 409, `${JSON.stringify(body)}: ${bad.status}`);
      assert.match(((await bad.json()) as { message: string }).message, why);
    }
    assert.equal((await put({ mode: "none" })).status, 200);
    assert.equal(await curl(n, url), "000");
    assert.doesNotMatch((await sh(n, "env")).stdout, /PROXY/, "and the proxy leaves the environment with it");
    assert.equal(forge.network.get(n.id).mode, "none");
  });

  it("serves the decision log over REST and the CLI", async () => {
    const r = await fetch(`${api}/api/v1/sandboxes/${a.id}/egress?lines=5`);
    assert.equal(r.status, 200);
    const entries = (await r.json()) as { decision: string; host: string }[];
    assert.equal(entries.length, 5);
    const { stdout } = await execFileP(process.execPath, ["dist/src/cli/main.js", "--server", api, "egress", a.id, "-n", "3"]);
    const lines = stdout.trim().split("\n");
    assert.equal(lines.length, 3);
    assert.match(lines.join("\n"), /DENY\tGET\tforgevm\.test:\d+/);
  });
});

describe("network: copies and templates", () => {
  it("a fork keeps its parent's allowlist (not its host ports), and its proxy works at once", async () => {
    const { sandboxes } = await forge.snapshots.fork(a.id, { count: 1 });
    const child = sandboxes[0];
    try {
      assert.deepEqual(forge.network.get(child.id), { ...forge.network.get(a.id), ports: [] });
      assert.equal(await curlBody(child, `http://${TEST_NAME}:${webPort}/child`), "host service /child\n");
      assert.match(await curlBody(child, `http://not-listed.example:${webPort}/`), /not on this sandbox.s allowlist/);
      assert.ok((await forge.network.egressLog(child.id)).some((e) => e.host === TEST_NAME && e.decision === "allow"));
    } finally {
      await child.destroy();
    }
  });

  it("a template's setup commands get its allowlist, and so do its sandboxes", async () => {
    await forge.templates.create({
      name: "net-tpl",
      allowed_hosts: [`${TEST_NAME}:${webPort}`],
      setup: [`curl -sS -m 10 http://${TEST_NAME}:${webPort}/from-setup > /root/setup.txt`],
    });
    try {
      const sb = await forge.sandboxes.spawn({ template: "net-tpl" });
      try {
        assert.equal((await sh(sb, "cat /root/setup.txt")).stdout, "host service /from-setup\n");
        assert.equal(forge.network.get(sb.id).mode, "allowlist");
        assert.equal(await curlBody(sb, `http://${TEST_NAME}:${webPort}/tpl`), "host service /tpl\n");
      } finally {
        await sb.destroy();
      }
    } finally {
      await forge.templates.remove("net-tpl");
    }
  });
});

/** Why network "full" cannot be tested here (it needs the jail, iptables, and `ip` for the stand-in internet), or false. */
async function fullUnavailable(): Promise<string | false> {
  const problem = await firewallProblem(process.getuid?.() === 0);
  if (problem) return problem;
  return execFileP("ip", ["netns", "list"]).then(
    () => false as const,
    () => "iproute2 (ip) is not installed",
  );
}

describe("network: full", { skip: await fullUnavailable() }, () => {
  // A stand-in for the internet: a network namespace on this machine with an address outside
  // every private range, serving HTTP. The VMM reaches it through the host's routing table.
  const NS = `fvmtest-${process.pid}`;
  const HOST_VETH = `fvh${process.pid % 100000}`;
  const PUBLIC = "198.51.100.2"; // TEST-NET-2: not private, not the host's
  let pubServer: ChildProcess | null = null;
  let full: Sandbox;

  before(async () => {
    const ip = (...args: string[]) => execFileP("ip", args);
    await ip("netns", "add", NS);
    await ip("link", "add", HOST_VETH, "type", "veth", "peer", "name", "fvp0", "netns", NS);
    await ip("addr", "add", "198.51.100.1/30", "dev", HOST_VETH);
    await ip("link", "set", HOST_VETH, "up");
    await ip("netns", "exec", NS, "ip", "addr", "add", `${PUBLIC}/30`, "dev", "fvp0");
    await ip("netns", "exec", NS, "ip", "link", "set", "fvp0", "up");
    pubServer = spawnChild(
      "ip",
      [
        "netns",
        "exec",
        NS,
        "python3",
        "-c",
        `import http.server as h\nclass H(h.BaseHTTPRequestHandler):\n def do_GET(s):\n  s.send_response(200); s.end_headers(); s.wfile.write(b'public service\\n')\nh.HTTPServer(('${PUBLIC}', 8080), H).serve_forever()`,
      ],
      { stdio: "ignore" },
    );
    const deadline = Date.now() + 10_000;
    while (
      (await fetch(`http://${PUBLIC}:8080/`).then(
        (r) => r.status,
        () => 0,
      )) !== 200
    ) {
      if (Date.now() > deadline) throw new Error("the stand-in public server did not start");
      await new Promise((r) => setTimeout(r, 100));
    }
    full = await forge.sandboxes.spawn({ network: "full" });
  });

  after(async () => {
    await full?.destroy();
    pubServer?.kill();
    await execFileP("ip", ["link", "del", HOST_VETH]).catch(() => {});
    await execFileP("ip", ["netns", "del", NS]).catch(() => {});
  });

  it("has a network device onto the internet, with DNS, and no proxy", async () => {
    assert.equal((await sh(full, "ls /sys/class/net")).stdout, "eth0\nlo\n");
    assert.equal((await sh(full, "env | grep -ci proxy")).stdout.trim(), "0");
    assert.equal(forge.network.get(full.id).mode, "full");
    // control: a public address is reached, directly, by any TCP client
    assert.equal(await curlBody(full, `--noproxy '*' http://${PUBLIC}:8080/`), "public service\n");
    assert.equal(
      (
        await sh(
          full,
          `python3 -c "import socket; s=socket.create_connection(('${PUBLIC}', 8080), 5); s.sendall(b'GET / HTTP/1.0\\r\\n\\r\\n'); print(s.recv(100).split()[1].decode())"`,
        )
      ).stdout,
      "200\n",
    );
    assert.match((await sh(full, "cat /etc/resolv.conf")).stdout, /^nameserver 10\.0\.2\.3$/m);
  });

  it("cannot reach the host (loopback through 10.0.2.2, its own addresses, the API port), private ranges or metadata", async () => {
    // controls: the host reaches its own services
    assert.equal((await fetch(`http://127.0.0.1:${webPort}/`)).status, 200);
    const targets = [
      `10.0.2.2:${webPort}`,
      `10.0.2.2:${apiPort}`,
      `169.254.169.254:80`,
      `10.255.255.1:80`,
      `192.168.0.1:80`,
      ...(lanAddress ? [`${lanAddress}:${webPort}`, `${lanAddress}:${apiPort}`] : []),
    ];
    // all at once, so the timeouts overlap
    const r = await sh(full, `for t in ${targets.join(" ")}; do (curl -s -o /dev/null -m 4 http://$t/; echo "$t $?") & done; wait`);
    for (const t of targets) assert.match(r.stdout, new RegExp(`^${t.replace(/\./g, "\\.")} (7|28)$`, "m"), `${t} must be unreachable:\n${r.stdout}`);
    // and the guest's own loopback is its own
    assert.equal(await curl(full, `--noproxy '*' http://127.0.0.1:${webPort}/`), "000");
  });

  it("the firewall is the wall: flushed by hand, the host becomes reachable; the next full spawn puts it back", async () => {
    const url = `http://10.0.2.2:${webPort}/`;
    assert.equal(await curl(full, `-m 3 ${url}`), "000");
    await execFileP("iptables", ["-w", "-F", "FORGEVM-VMM"]);
    try {
      assert.equal(await curlBody(full, `-m 5 ${url}`), "host service /\n", "without the chain, slirp's 10.0.2.2 is the host's loopback");
    } finally {
      const next = await forge.sandboxes.spawn({ network: "full" }); // checks the chain and restores it
      await next.destroy();
    }
    assert.equal(await curl(full, `-m 3 ${url}`), "000");
  });

  it("keeps its device across restores and forks; an allowlist does not apply to it", async () => {
    const { sandboxes } = await forge.snapshots.fork(full.id, { count: 1 });
    try {
      assert.equal(await curlBody(sandboxes[0], `--noproxy '*' http://${PUBLIC}:8080/`), "public service\n");
      assert.equal(forge.network.get(sandboxes[0].id).mode, "full");
    } finally {
      await sandboxes[0].destroy();
    }
    await assert.rejects(forge.network.setAllowlist(full.id, ["pypi.org"]), /applies only to network "allowlist"/);
  });

  it("narrowed while it runs, its device is cut at the VMM and the proxy is its way out, in its copies too; widened, the device is back", async () => {
    const direct = `--noproxy '*' http://${PUBLIC}:8080/`;
    const listed = `http://${TEST_NAME}:${webPort}/narrowed`;
    assert.equal(await curlBody(full, direct), "public service\n", "control");
    await forge.network.setEgress(full.id, { mode: "allowlist", allow: [`${TEST_NAME}:${webPort}`] });
    assert.equal(await curl(full, `-m 4 ${direct}`), "000", "the device carries nothing while its link is down");
    assert.equal(await curlBody(full, listed), "host service /narrowed\n");
    const { sandboxes } = await forge.snapshots.fork(full.id, { count: 1 });
    try {
      assert.equal(await curl(sandboxes[0], `-m 4 ${direct}`), "000", "a copy's device comes back cut");
      assert.equal(await curlBody(sandboxes[0], listed), "host service /narrowed\n");
      assert.equal(forge.network.get(sandboxes[0].id).mode, "allowlist");
    } finally {
      await sandboxes[0].destroy();
    }
    await forge.network.setEgress(full.id, { mode: "full" });
    assert.equal(await curlBody(full, direct), "public service\n");
    assert.equal((await sh(full, "env | grep -ci proxy")).stdout.trim(), "0");
  });
});

describe("published ports", () => {
  it("answer on 127.0.0.1 only, are added and removed live, and a taken port is a clear error", async () => {
    await sh(n, `cd /tmp && echo guest-web > page.txt && (nohup python3 -m http.server 8001 >/dev/null 2>&1 &) ; ${UNTIL_LISTENING(8001)}`);
    const res = await fetch(`${api}/api/v1/sandboxes/${n.id}/ports`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ port: "0:8001" }) });
    assert.equal(res.status, 201);
    const m = (await res.json()) as { host_ip: string; host_port: number; guest_port: number };
    assert.equal(m.host_ip, "127.0.0.1");
    assert.equal(await (await fetch(`http://127.0.0.1:${m.host_port}/page.txt`)).text(), "guest-web\n");
    if (lanAddress) await assert.rejects(fetch(`http://${lanAddress}:${m.host_port}/page.txt`), "not on the host's other addresses");
    // a port nobody listens on in the guest: the connection is dropped, the server stays fine
    const dead = await forge.network.publishPort(n.id, "0:8009");
    await assert.rejects(fetch(`http://127.0.0.1:${dead.host_port}/`));
    // a taken host port
    const taken = createTcpServer();
    await new Promise<void>((r) => taken.listen(0, "127.0.0.1", r));
    const takenPort = (taken.address() as { port: number }).port;
    const clash = await fetch(`${api}/api/v1/sandboxes/${n.id}/ports`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ port: `${takenPort}:8001` }),
    });
    assert.equal(clash.status, 409);
    assert.match(((await clash.json()) as { message: string }).message, new RegExp(`${takenPort} is already in use`));
    taken.close();
    const bad = await fetch(`${api}/api/v1/sandboxes/${n.id}/ports`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ port: "80:99999" }),
    });
    assert.equal(bad.status, 400);
    // removed live: the listener is gone
    const del = await fetch(`${api}/api/v1/sandboxes/${n.id}/ports/${m.host_port}`, { method: "DELETE" });
    assert.equal(del.status, 200);
    await assert.rejects(new Promise((resolve, reject) => connect(m.host_port, "127.0.0.1").once("connect", resolve).once("error", reject)), /ECONNREFUSED/);
    assert.deepEqual(
      forge.network.get(n.id).ports.map((p) => p.guest_port),
      [8009],
    );
  });

  it("a second sandbox cannot reach the first one's services, published or not", async () => {
    const pub = await forge.network.publishPort(n.id, "0:8001");
    // control: the host reaches n's service through the published port
    assert.equal((await fetch(`http://127.0.0.1:${pub.host_port}/page.txt`)).status, 200);
    // a's loopback is its own: n's guest port is not there, nor is the host's published port
    assert.equal(await curl(a, `--noproxy '*' http://127.0.0.1:8001/page.txt`), "000");
    assert.equal(await curl(a, `--noproxy '*' http://127.0.0.1:${pub.host_port}/page.txt`), "000");
    assert.match(await curlBody(a, `${VIA_PROXY} http://127.0.0.1:${pub.host_port}/page.txt`), /not on this sandbox's allowlist/);
    await forge.network.unpublishPort(n.id, pub.host_port);
  });
});

describe("network requests are checked", () => {
  const post = (body: unknown) => fetch(`${api}/api/v1/sandboxes`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  it("answers 400 naming the field for a bad mode, entry, preset or port", async () => {
    for (const [body, re] of [
      [{ network: "bogus" }, /network must be one of none, allowlist/],
      [{ network: "none", allow: ["pypi.org"] }, /allow needs network "allowlist"/],
      [{ allow: ["@nosuch"] }, /unknown preset/],
      [{ allow: ["*.com"] }, /wildcard needs a domain/],
      [{ allow: ["exa mple.com"] }, /not a hostname/],
      [{ allow: ["pypi.org:70000"] }, /port must be 1-65535/],
      [{ ports: ["80:80:80:80"] }, /ports: port "80:80:80:80" must look like/],
    ] as const) {
      const r = await post(body);
      assert.equal(r.status, 400, JSON.stringify(body));
      assert.match(((await r.json()) as { message: string }).message, re);
    }
    const r = await fetch(`${api}/api/v1/sandboxes/${n.id}/network/allow`, {
      method: "PUT",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ allow: ["pypi.org"] }),
    });
    assert.equal(r.status, 409);
    const gone = await fetch(`${api}/api/v1/sandboxes/sb-00000000/network`);
    assert.equal(gone.status, 404);
  });
});
