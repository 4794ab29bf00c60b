// Secrets that never enter the VM, through the unmodified E2B SDK (npm `e2b@2.51.0`) and our REST
// API, with real VMs: a secret is stored, a sandbox's rule names it for one destination, and a
// request from inside the sandbox to a local HTTPS server standing in for that destination (its
// certificate from a test CA the server is told to trust) arrives with the header, while one to
// another destination arrives without it; the value is found nowhere in the guest, its memory
// snapshot or a commit of it; a pause and a fork keep the rule working.
import assert from "node:assert/strict";
import { spawn as spawnChild } from "node:child_process";
import { createReadStream } from "node:fs";
import { mkdtemp, readdir, rm, stat, writeFile } from "node:fs/promises";
import { createServer } from "node:https";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { createSecureContext } from "node:tls";
import { ALL_TRAFFIC, Sandbox, Secret, SecretError, SecretNotFoundError } from "e2b";
import type { FastifyInstance } from "fastify";
import { buildApp } from "../../src/compose/app.js";
import { EgressCa } from "../../src/net/egress-ca.js";
import type { Forge } from "../../src/index.js";
import { e2bEnv } from "../e2b-env.js";
import { assertNoVmLeft, openForge } from "../helpers.js";

const API_KEY = "e2b_secrets_0123456789";
const SECRET = "sk-live-5e3f0c2a9b8d7e6f1a2b";
const API = "api.test.local";
const OTHER = "other.test.local";
let forge: Forge;
let app: FastifyInstance;
let base: string;
let dir: string;
let port: number;
let sbx: Sandbox;
const seen: { host: string; path: string; auth: string | undefined; template: string | undefined }[] = [];
const toClose: { close(): unknown }[] = [];

/** Whether `needle` occurs anywhere in a file, read in chunks (a memory image is large). */
async function fileHas(file: string, needle: string): Promise<boolean> {
  const n = Buffer.from(needle);
  let tail = Buffer.alloc(0);
  for await (const chunk of createReadStream(file, { highWaterMark: 4 << 20 })) {
    const buf = Buffer.concat([tail, chunk as Buffer]);
    if (buf.includes(n)) return true;
    tail = buf.subarray(Math.max(0, buf.length - n.length + 1));
  }
  return false;
}

/** Every file under `root` that holds `needle`. */
async function filesWith(root: string, needle: string): Promise<string[]> {
  const out: string[] = [];
  for (const e of await readdir(root, { withFileTypes: true, recursive: true })) {
    const p = join(e.parentPath ?? (e as unknown as { path: string }).path, e.name);
    if (e.isFile() && (await fileHas(p, needle))) out.push(p);
  }
  return out;
}

const curl = (host: string, path: string, extra = "") => `curl -sS ${extra} -o /dev/null -w '%{http_code}' https://${host}:${port}${path}`;

before(async () => {
  dir = await mkdtemp(join(tmpdir(), "forgevm-egress-secrets-"));
  // The destinations' own CA, which only the server is told to trust.
  const testCa = new EgressCa(join(dir, "test-ca"));
  await writeFile(join(dir, "test-ca.pem"), await testCa.certPem());
  const leaf = await testCa.leaf(API);
  const https = createServer(
    {
      cert: leaf.cert,
      key: leaf.key,
      SNICallback: (name, cb) => void testCa.leaf(name).then((l) => cb(null, createSecureContext({ cert: l.cert, key: l.key })), cb),
    },
    (req, res) => {
      // Answers without echoing anything: what the guest receives must not carry the secret.
      seen.push({ host: String(req.headers.host).split(":")[0], path: req.url ?? "", auth: req.headers.authorization, template: req.headers["x-template"] as string | undefined });
      req.resume();
      res.end("ok");
    },
  );
  await new Promise<void>((r) => https.listen(0, "127.0.0.1", r));
  port = (https.address() as { port: number }).port;
  toClose.push(https);
  forge = await openForge({ network: { hostsOverride: { [API]: "127.0.0.1", [OTHER]: "127.0.0.1" }, upstreamCaFile: join(dir, "test-ca.pem") } });
  app = await buildApp({ forge, version: "test", apiKey: API_KEY });
  base = await app.listen({ host: "127.0.0.1", port: 0 });
  e2bEnv(base, API_KEY);
  await Secret.create("openai-key", SECRET, { metadata: { env: "test" } });
  sbx = await Sandbox.create({
    timeoutMs: 600_000,
    network: {
      allowOut: [`${API}:${port}`, `${OTHER}:${port}`],
      denyOut: [ALL_TRAFFIC],
      rules: { [API]: [{ transform: { headers: { Authorization: `Bearer ${Secret.fill("openai-key")}` } } }] },
    },
  });
});

after(async () => {
  await app?.close();
  await forge?.close();
  for (const s of toClose) s.close();
  if (forge) await assertNoVmLeft(forge);
  await rm(dir, { recursive: true, force: true });
});

/** Runs a request in `s` and returns what the destination received for it. */
async function requestFrom(s: Sandbox, command: string, path: string) {
  const r = await s.commands.run(command, { timeoutMs: 60_000 });
  assert.equal(r.stdout, "200", `${command}: ${r.stderr}`);
  const got = seen.filter((x) => x.path === path);
  assert.equal(got.length, 1, `one request for ${path} arrived`);
  return got[0];
}

describe("secrets injected at egress (E2B SDK)", () => {
  it("a request to the rule's destination arrives with the header, the secret filled in; curl and Python trust the server's CA", async () => {
    assert.equal((await requestFrom(sbx, curl(API, "/curl"), "/curl")).auth, `Bearer ${SECRET}`);
    const py = await requestFrom(sbx, `python3 -c "import urllib.request; print(urllib.request.urlopen('https://${API}:${port}/py').status, end='')"`, "/py");
    assert.equal(py.auth, `Bearer ${SECRET}`);
  });

  it("a request to another destination arrives without it, passed through unread (the guest sees the real certificate)", async () => {
    const r = await sbx.commands.run(curl(OTHER, "/refused"), { timeoutMs: 60_000 }).catch((e) => e);
    assert.notEqual(r.stdout, "200", "the guest does not trust the destination's own CA: the proxy did not answer for it");
    assert.equal((await requestFrom(sbx, curl(OTHER, "/other", "-k"), "/other")).auth, undefined);
  });

  it("the value is nowhere in the guest: environment, files, /proc; getInfo shows the placeholder", async () => {
    const r = await sbx.commands.run(
      `env; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'; grep -rIl --exclude-dir=proc --exclude-dir=sys -F '${SECRET.slice(0, 12)}' / 2>/dev/null; true`,
      { user: "root", timeoutMs: 120_000 },
    );
    assert.doesNotMatch(r.stdout, new RegExp(SECRET.slice(0, 12)));
    assert.match(r.stdout, /SSL_CERT_FILE=\/etc\/ssl\/certs\/ca-certificates.crt/);
    const info = await sbx.getInfo();
    // biome-ignore lint/suspicious/noTemplateCurlyInString: E2B's placeholder syntax, as the SDK sends it
    assert.deepEqual(info.network?.rules, { [API]: [{ transform: { headers: { Authorization: "Bearer ${e2b.secrets.openai-key}" } } }] });
    assert.doesNotMatch(JSON.stringify(info), new RegExp(SECRET));
  });

  it("the value is not in a memory snapshot of the sandbox, nor in a commit of it", async () => {
    const snap = await forge.snapshots.take(sbx.sandboxId, "egress-secrets-snap");
    assert.ok((await stat(snap.dir)).isDirectory());
    assert.deepEqual(await filesWith(snap.dir, SECRET), []);
    const committed = await forge.images.commit(sbx.sandboxId, { image: "egress-secrets:v1" });
    assert.equal(await fileHas(committed.image.rootfs, SECRET), false);
    await forge.snapshots.remove(snap.id);
    await forge.images.remove("egress-secrets:v1");
  });

  it("a pause and a fork of the sandbox succeed, and keep the rule working", async () => {
    assert.equal(await sbx.pause(), true);
    const again = await Sandbox.connect(sbx.sandboxId);
    assert.equal((await requestFrom(again, curl(API, "/after-pause"), "/after-pause")).auth, `Bearer ${SECRET}`);
    const [child] = await sbx.fork({ count: 1 });
    assert.ok(child instanceof Sandbox, String(child));
    assert.equal((await requestFrom(child, curl(API, "/from-fork"), "/from-fork")).auth, `Bearer ${SECRET}`);
    await child.kill();
  });

  it("updateNetwork replaces the rules live: the header goes to the new destination only, and {} rules clear them", async () => {
    await sbx.updateNetwork({
      allowOut: [`${API}:${port}`, `${OTHER}:${port}`],
      denyOut: [ALL_TRAFFIC],
      rules: { [OTHER]: [{ transform: { headers: { Authorization: `Token ${Secret.fill("openai-key")}` } } }] },
    });
    assert.equal((await requestFrom(sbx, curl(OTHER, "/updated"), "/updated")).auth, `Token ${SECRET}`);
    assert.equal((await requestFrom(sbx, curl(API, "/no-rule", "-k"), "/no-rule")).auth, undefined);
    await sbx.updateNetwork({ allowOut: [`${API}:${port}`], denyOut: [ALL_TRAFFIC] });
    assert.equal((await sbx.getInfo()).network?.rules, undefined);
  });

  it("a template's egress rules reach its sandboxes; a template with rules but no allowlist is a 400", async () => {
    const rest = (method: string, path: string, body?: unknown) =>
      fetch(`${base}/api/v1${path}`, { method, headers: { "X-API-Key": API_KEY, "content-type": "application/json" }, body: body ? JSON.stringify(body) : undefined });
    const made = await rest("POST", "/templates", {
      name: "with-rules",
      allowed_hosts: [`${API}:${port}`],
      egress_rules: { [API]: { headers: { "X-Template": "tpl {{openai-key}}" } } },
    });
    assert.equal(made.status, 201, await made.clone().text());
    assert.deepEqual(((await made.json()) as { egress_rules: unknown }).egress_rules, { [API]: { headers: { "X-Template": "tpl {{openai-key}}" } } });
    const bad = await rest("POST", "/templates", { name: "rules-alone", egress_rules: { [API]: { headers: { A: "x" } } } });
    assert.equal(bad.status, 400);
    assert.match(((await bad.json()) as { message: string }).message, /egress_rules need allowed_hosts/);
    const sb = await forge.sandboxes.spawn({ template: "with-rules" });
    try {
      const r = await sb.exec(curl(API, "/from-template"), { timeoutMs: 60_000 });
      assert.equal(r.stdout, "200", r.stderr);
      const got = seen.filter((x) => x.path === "/from-template");
      assert.equal(got.length, 1);
      assert.equal(got[0].template, `tpl ${SECRET}`);
    } finally {
      await sb.destroy();
      await rest("DELETE", "/templates/with-rules");
    }
  });

  it("a rule may name a secret that does not exist yet, as on E2B: its requests are refused with the reason in the egress log, nothing sent, until the secret is added", async () => {
    const s = await Sandbox.create({
      timeoutMs: 120_000,
      // biome-ignore lint/suspicious/noTemplateCurlyInString: E2B's placeholder syntax, as the SDK sends it
      network: { allowOut: [`${API}:${port}`], denyOut: [ALL_TRAFFIC], rules: { [API]: [{ transform: { headers: { Authorization: "Bearer ${e2b.secrets.later-key}" } } }] } },
    });
    try {
      const r = await s.commands.run(curl(API, "/before-the-secret"), { timeoutMs: 60_000 }).catch((e) => e);
      assert.notEqual(r.stdout, "200");
      assert.equal(seen.filter((x) => x.path === "/before-the-secret").length, 0, "nothing was sent, with the placeholder or without");
      const log = await forge.network.egressLog(s.sandboxId);
      assert.ok(
        log.some((e) => e.host === API && /later-key/.test(`${e.reason} ${e.error ?? ""}`)),
        JSON.stringify(log),
      );
      await Secret.create("later-key", "added-later");
      assert.equal((await requestFrom(s, curl(API, "/after-the-secret"), "/after-the-secret")).auth, "Bearer added-later");
    } finally {
      await s.kill();
      await Secret.destroy("later-key").catch(() => {});
    }
  });

  it("bad rules are a 400 naming the field: a destination off the allowlist, a malformed placeholder", async () => {
    const create = (rules: Record<string, { transform: { headers: Record<string, string> } }[]>, allowOut = [`${API}:${port}`]) =>
      Sandbox.create({ network: { allowOut, denyOut: [ALL_TRAFFIC], rules } });
    await assert.rejects(create({ "evil.test.local": [{ transform: { headers: { A: "x" } } }] }), /400: .*evil\.test\.local is not on the sandbox's allowlist/);
    await assert.rejects(create({ [API]: [{ transform: { headers: { A: "${e2b.secrets.openai-key" } } }] }), /400: .*malformed secret placeholder/);
    await assert.rejects(create({ [API]: [{ transform: { headers: { Host: "x" } } }] }), /400: .*frames the request/);
    await assert.rejects(
      sbx.updateNetwork({ allowOut: [`${API}:${port}`], denyOut: [ALL_TRAFFIC], rules: { [OTHER]: [{ transform: { headers: { A: "x" } } }] } }),
      /400: .*other\.test\.local is not on the sandbox's allowlist/,
    );
  });
});

describe("the network at runtime (E2B SDK)", () => {
  it("updateNetwork works on a sandbox made without a network: {} is unrestricted, denyOut of one range, allowOut over it; getInfo says so", async () => {
    const s = await Sandbox.create({ timeoutMs: 300_000 });
    try {
      const plain = (host: string, path: string) => `curl -sS -k -o /dev/null -w '%{http_code}' -m 8 https://${host}:${port}${path}`;
      assert.notEqual((await s.commands.run(plain(OTHER, "/x"), { timeoutMs: 30_000 }).catch((e) => e)).stdout, "200", "control: no way out at first");
      await s.updateNetwork({});
      assert.equal((await requestFrom(s, plain(OTHER, "/open"), "/open")).auth, undefined, "unrestricted: any destination");
      assert.equal((await s.getInfo()).network, undefined, "unrestricted shows no network, as E2B's does");
      await s.updateNetwork({ denyOut: ["127.0.0.0/8"] });
      assert.notEqual((await s.commands.run(plain(OTHER, "/denied"), { timeoutMs: 30_000 }).catch((e) => e)).stdout, "200");
      assert.equal(seen.filter((x) => x.path === "/denied").length, 0, "a denied range is never reached");
      await s.updateNetwork({ allowOut: ["127.0.0.1"], denyOut: ["127.0.0.0/8"] });
      assert.equal((await requestFrom(s, plain(OTHER, "/allowed-over"), "/allowed-over")).auth, undefined, "allowOut wins over denyOut");
      // The SDK fills in every field it knows, unset ones undefined.
      assert.deepEqual(JSON.parse(JSON.stringify((await s.getInfo()).network)), { allowOut: ["127.0.0.1"], denyOut: ["127.0.0.0/8"] });
      await s.updateNetwork({ allowOut: [`${API}:${port}`], denyOut: [ALL_TRAFFIC] });
      assert.notEqual((await s.commands.run(plain(OTHER, "/strict"), { timeoutMs: 30_000 }).catch((e) => e)).stdout, "200");
      assert.equal((await requestFrom(s, plain(API, "/strict-ok"), "/strict-ok")).auth, undefined);
      await assert.rejects(s.updateNetwork({ denyOut: ["example.com"] }), /400: denyOut: "example\.com" is not an IP address or CIDR range/);
      await assert.rejects(Sandbox.create({ network: { allowOut: ["example.com"] } }), /400: network\.allowOut: .*ALL_TRAFFIC/);
    } finally {
      await s.kill();
    }
  });
});

describe("the secrets store", () => {
  it("E2B's Secret calls: list, getInfo by name and id, exists, update (a new version), destroy; no value in any answer", async () => {
    const list = await Secret.list().nextItems();
    const mine = list.find((s) => s.name === "openai-key")!;
    assert.ok(mine.secretId.startsWith("sec_"));
    assert.deepEqual(mine.metadata, { env: "test" });
    assert.equal((await Secret.getInfo(mine.secretId)).name, "openai-key");
    assert.equal(await Secret.exists("OPENAI-KEY"), true, "names are matched without regard to case");
    const t = await Secret.create("temp-key", "v1");
    assert.equal(t.version, 1);
    assert.equal((await Secret.update("temp-key", "v2")).version, 2);
    assert.equal(await Secret.destroy("temp-key"), true);
    assert.equal(await Secret.destroy("temp-key"), false);
    await assert.rejects(Secret.getInfo("temp-key"), SecretNotFoundError);
    await assert.rejects(Secret.create("openai-key", "again"), (e: unknown) => e instanceof SecretError && /409/.test(String(e)));
    await assert.rejects(Secret.create("big", "x".repeat(64 * 1024 + 1)), (e: unknown) => e instanceof SecretError && /400/.test(String(e)));
    const res = await fetch(`${base}/secrets`, { headers: { "X-API-Key": API_KEY } });
    assert.equal(res.headers.get("cache-control"), "no-store");
    assert.doesNotMatch(await res.text(), new RegExp(SECRET));
  });

  it("our REST API: add, list, inspect, update, delete, each a 4xx naming the field on bad input; the value is never answered", async () => {
    const call = async (method: string, path: string, body?: unknown) => {
      const r = await fetch(`${base}/api/v1${path}`, {
        method,
        headers: { "X-API-Key": API_KEY, ...(body ? { "content-type": "application/json" } : {}) },
        body: body ? JSON.stringify(body) : undefined,
      });
      const text = await r.text();
      assert.doesNotMatch(text, /rest-value-1|rest-value-2/);
      return { status: r.status, body: text ? JSON.parse(text) : null, cache: r.headers.get("cache-control") };
    };
    const made = await call("POST", "/secrets", { name: "GITHUB_TOKEN", value: "rest-value-1", description: "for the API" });
    assert.equal(made.status, 201);
    assert.equal(made.body.name, "github_token");
    assert.equal(made.cache, "no-store");
    assert.ok((await call("GET", "/secrets")).body.some((s: { name: string }) => s.name === "github_token"));
    assert.equal((await call("GET", "/secrets/GITHUB_TOKEN")).body.description, "for the API");
    assert.equal((await call("PUT", "/secrets/github_token", { value: "rest-value-2" })).body.version, 2);
    const bad = await call("POST", "/secrets", { name: "bad name", value: "x" });
    assert.equal(bad.status, 400);
    assert.match(bad.body.message, /name/);
    assert.equal((await call("POST", "/secrets", { name: "x", value: "" })).status, 400);
    assert.equal((await call("POST", "/secrets", { name: "sec_x", value: "v" })).status, 400);
    assert.equal((await call("POST", "/secrets", { name: "github_token", value: "v" })).status, 409);
    assert.equal((await call("DELETE", "/secrets/github_token")).status, 200);
    assert.equal((await call("GET", "/secrets/github_token")).status, 404);
  });

  it("the CLI: secret add reads the value from standard input, ls never shows it, update, rm", async () => {
    const cli = (args: string[], input = "") =>
      new Promise<{ code: number | null; out: string; err: string }>((resolve) => {
        const c = spawnChild(process.execPath, ["dist/src/cli/main.js", "--server", base, "--api-key", API_KEY, ...args], { stdio: ["pipe", "pipe", "pipe"] });
        let out = "";
        let err = "";
        c.stdout.on("data", (d) => (out += d));
        c.stderr.on("data", (d) => (err += d));
        c.on("close", (code) => resolve({ code, out, err }));
        c.stdin.end(input);
      });
    const added = await cli(["secret", "add", "CLI_KEY", "-d", "from the CLI"], "cli-value-1\n");
    assert.equal(added.code, 0, added.err);
    assert.match(added.out, /cli_key \(version 1\): use it in an egress rule as \{\{cli_key\}\}/);
    const ls = await cli(["secret", "ls"]);
    assert.match(ls.out, /^cli_key\s+1\s+\S+\s+from the CLI$/m);
    assert.doesNotMatch(ls.out + (await cli(["secret", "ls", "--json"])).out, /cli-value/);
    assert.match((await cli(["secret", "update", "cli_key"], "cli-value-2")).out, /cli_key \(version 2\)/);
    assert.equal(await forge.secrets.resolve("cli_key"), "cli-value-2", "the value is what came on standard input, its line break dropped");
    const empty = await cli(["secret", "add", "EMPTY"], "");
    assert.notEqual(empty.code, 0);
    assert.match(empty.err, /the value is empty/);
    assert.equal((await cli(["secret", "rm", "cli_key"])).code, 0);
    assert.equal(await forge.secrets.resolve("cli_key"), undefined);
  });
});
