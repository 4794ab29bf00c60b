// The Environments API end to end, with real VMs and no internet: the test serves a Debian
// package repository and a Python package index (package-index.ts), and runs a registry that
// wants a login. A spec is built (steps and log advance), spawned from, and its package
// imported; a rebuild runs no step; a push through a registry connection gives a pullable
// image with the reported digest; a cancel stops a running build and leaves nothing; bad input
// is refused; the registry secret is in no response, log or database file.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtemp, readdir, readFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { after, before, describe, it } from "node:test";
import type { Forge } from "../../src/index.js";
import { Client } from "forgevm";
import { apiRequest, assertNoVmLeft, childEnv, openForge, removeAtExit, runCli, serveForge, waitFor } from "../helpers.js";
import { startRegistry, type LocalRegistry } from "../local-registry.js";
import { startPackageIndex, type PackageIndex } from "../package-index.js";

const run = promisify(execFile);
const PASSWORD = "s3cret-Env-Registry-Pw-7f3a";
const OWNER = "alice";
let forge: Forge;
let http: { url: string; close: () => Promise<void> };
let index: PackageIndex;
let hits: PackageIndex["hits"];
let registry: LocalRegistry;
let work: string;
/** Every response body the tests saw, to look for the secret in. */
const seen: string[] = [];

async function api(method: string, path: string, body?: unknown) {
  const r = await apiRequest(http.url, method, `/environments${path}`, body);
  seen.push(JSON.stringify(r.body));
  return r;
}

before(async () => {
  work = await mkdtemp(join(tmpdir(), "fvt-env-"));
  removeAtExit(work);
  index = await startPackageIndex(work);
  hits = index.hits;
  registry = await startRegistry(await mkdtemp(join(work, "reg-")), { username: OWNER, password: PASSWORD });
  forge = await openForge({
    network: { hostsOverride: index.hostsOverride },
    environments: { ...index.sources, memoryMb: 512 },
    hostSecrets: { REG_PW: PASSWORD },
  });
  http = await serveForge(forge);
});

after(async () => {
  index?.close();
  registry?.stop();
  await http?.close();
  if (forge) {
    await forge.close();
    await assertNoVmLeft(forge);
  }
});

/** Polls a build until it has ended; records every (step, log length) seen on the way. */
async function finished(id: string, trail: { step: string | null; status: string; log: number }[] = []) {
  let b: any;
  await waitFor(
    async () => {
      b = (await api("GET", `/builds/${id}`)).body;
      trail.push({ step: b.current_step, status: b.status, log: b.log.length });
      return ["ready", "failed", "canceled"].includes(b.status);
    },
    600_000,
    `environment build ${id}`,
  );
  return b;
}

/** Reads a build's NDJSON log to its end; each message gets `at`, when it arrived. */
async function followLog(id: string): Promise<any[]> {
  const res = await fetch(`${http.url}/api/v1/environments/builds/${id}/log`);
  assert.equal(res.status, 200);
  const out: any[] = [];
  let buf = "";
  for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
    buf += Buffer.from(chunk).toString("utf8");
    for (let nl = buf.indexOf("\n"); nl >= 0; nl = buf.indexOf("\n")) {
      out.push({ ...JSON.parse(buf.slice(0, nl)), at: Date.now() });
      buf = buf.slice(nl + 1);
    }
  }
  return out;
}

describe("Environments API", () => {
  let spec: any;
  let first: any;

  it("creates specs: lists trimmed and de-duplicated; a duplicate is a 409, a missing owner or a bad package a 400", async () => {
    const r = await api("POST", "/specs", {
      owner_id: OWNER,
      name: "demo",
      base_image: "forgevm/debian:bookworm",
      python_packages: [" demo-env-pkg ", "demo-env-pkg", ""],
      apt_packages: ["forgevm-hello", " forgevm-hello"],
      python_version: "3.11",
    });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    spec = r.body;
    assert.deepEqual(spec.python_packages, ["demo-env-pkg"]);
    assert.deepEqual(spec.apt_packages, ["forgevm-hello"]);
    assert.equal(spec.owner_id, OWNER);
    assert.ok(spec.id && spec.created_at && spec.updated_at);

    const dup = await api("POST", "/specs", { owner_id: OWNER, name: "demo", base_image: "forgevm/debian:bookworm" });
    assert.equal(dup.status, 409);
    assert.equal(dup.body.code, "CONFLICT");
    const noOwner = await api("POST", "/specs", { name: "x", base_image: "forgevm/debian:bookworm" });
    assert.equal(noOwner.status, 400);
    assert.match(noOwner.body.message, /owner_id/);
    const bad = await api("POST", "/specs", { owner_id: OWNER, name: "y", base_image: "forgevm/debian:bookworm", python_packages: ["ok", "x; rm -rf /"] });
    assert.equal(bad.status, 400);
    assert.match(bad.body.message, /python_packages: "x; rm -rf \/"/);
    const badApt = await api("POST", "/specs", { owner_id: OWNER, name: "y", base_image: "forgevm/debian:bookworm", apt_packages: ["$(reboot)"] });
    assert.match(badApt.body.message, /apt_packages/);
    const badPy = await api("POST", "/specs", { owner_id: OWNER, name: "y", base_image: "forgevm/debian:bookworm", python_version: "three" });
    assert.match(badPy.body.message, /python_version/);
    const unknown = await api("POST", "/specs", { owner_id: OWNER, name: "y", base_image: "forgevm/debian:bookworm", packages: [] });
    assert.equal(unknown.status, 400);
    assert.match(unknown.body.message, /packages/);

    // X-User-ID stands in for owner_id; lists are the owner's, newest first.
    const other = await apiRequest(
      http.url,
      "POST",
      "/environments/specs",
      { name: "other", base_image: "forgevm/debian:bookworm", python_version: "3.99" },
      { "x-user-id": OWNER },
    );
    assert.equal(other.status, 201, JSON.stringify(other.body));
    const list = await api("GET", `/specs?owner_id=${OWNER}`);
    assert.deepEqual(
      list.body.map((s: any) => s.name),
      ["other", "demo"],
    );
    assert.equal((await api("GET", "/specs")).status, 400, "owner_id is required");
    assert.equal((await api("GET", `/specs/${spec.id}`)).body.name, "demo");
    assert.equal((await api("GET", "/specs/nope")).status, 404);

    const sugg = await api("GET", `/specs/${spec.id}/suggestions`);
    assert.equal(sugg.body.spec_id, spec.id);
    assert.ok(sugg.body.suggestions.includes("python3-pip"), "the default image has no pip");
    assert.ok(sugg.body.suggestions.includes("build-essential"), "nor a compiler");
    assert.ok(!sugg.body.suggestions.includes("curl"), "it has curl");
    assert.ok(!sugg.body.suggestions.includes("python3"), "it has python3");

    // A Python the image does not have is refused by the build, which names it.
    const b = await api("POST", "/builds", { spec_id: other.body.id });
    assert.equal(b.status, 201);
    const done = await finished(b.body.id);
    assert.equal(done.status, "failed");
    assert.equal(done.current_step, "validate_spec");
    assert.match(done.error, /python_version: .* has no Python 3\.99/);
  });

  it("builds a spec in VMs: the steps and the log advance, and a sandbox of the image has the packages", async () => {
    const created = await api("POST", "/builds", { spec_id: spec.id });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    assert.equal(created.body.status, "queued");
    assert.deepEqual(
      created.body.artifacts.map((a: any) => [a.target, a.status]),
      [["local", "pending"]],
    );
    const logged = followLog(created.body.id);
    const trail: { step: string | null; status: string; log: number }[] = [];
    first = await finished(created.body.id, trail);
    assert.equal(first.status, "ready", first.log);
    assert.equal(first.current_step, "finalize");
    assert.ok(first.finished_at);
    const order = ["validate_spec", "generate_dockerfile", "build", "tag_and_push_targets", "finalize"];
    const stepsSeen = [...new Set(trail.map((t) => t.step).filter(Boolean))] as string[];
    assert.ok(stepsSeen.includes("build"), `the build step was seen: ${stepsSeen}`);
    assert.deepEqual(
      stepsSeen,
      [...stepsSeen].sort((a, b) => order.indexOf(a) - order.indexOf(b)),
      "steps only go forward",
    );
    const building = trail.filter((t) => t.step === "build");
    assert.ok(new Set(building.map((t) => t.log)).size >= 3, "the log grew while the build step ran");
    const lines = await logged;
    assert.deepEqual({ ...lines.at(-1), at: undefined }, { done: true, status: "ready", at: undefined });
    const firstRun = lines.find((l) => /^Step 2\//.test(l.line ?? ""));
    assert.ok(firstRun && firstRun.at < Date.parse(first.finished_at) - 5000, "the log streamed while the build ran");
    const text = lines.map((l) => l.line ?? "").join("\n");
    assert.match(text, /apt-get/);
    assert.match(text, /the image has no pip: running pip from/);
    assert.match(text, /RUN command -v python3\.11 .* python3\.11 -c/, "python_version takes effect: pip runs in python3.11");
    assert.match(text, /Successfully installed demo-env-pkg/);
    assert.equal(first.log.trim().split("\n").length, lines.length - 1, "the log's lines are the stream's");
    assert.deepEqual(
      first.steps.map((s: any) => s.status),
      ["done", "done", "done"],
    );
    console.log(
      JSON.stringify({
        first_build_ms: Date.parse(first.finished_at) - Date.parse(first.created_at),
        steps: first.steps.map((s: any) => [s.instruction.slice(0, 40), s.duration_ms]),
      }),
    );
    assert.match(first.digest_local, /^sha256:[0-9a-f]{64}$/);
    assert.ok(first.image_size_bytes > 50 * 1048576, `a Debian image with packages takes space: ${first.image_size_bytes}`);
    const local = first.artifacts[0];
    assert.deepEqual([local.target, local.status, local.digest], ["local", "ready", first.digest_local]);

    const cfg = await api("GET", `/builds/${first.id}/spawn-config`);
    assert.equal(cfg.status, 200);
    assert.deepEqual(
      { ...cfg.body, note: undefined },
      { build_id: first.id, build_status: "ready", ready: true, provider: "qemu", image: local.image_ref, target: "local", digest: first.digest_local, note: undefined },
    );
    const sb = await apiRequest(http.url, "POST", "/sandboxes", { image: cfg.body.image });
    assert.equal(sb.status, 201, JSON.stringify(sb.body));
    try {
      const r = await apiRequest(http.url, "POST", `/sandboxes/${sb.body.id}/exec`, {
        command: "forgevm-hello && python3 -c 'import demo_env_pkg; print(demo_env_pkg.VALUE)' && ls /etc/apt/forgevm-build.list 2>&1; ls /tmp",
      });
      assert.equal(r.body.stdout.split("\n").slice(0, 2).join("\n"), "hello from a deb\n42");
      assert.match(r.body.stdout, /No such file/, "the build's apt source list is not in the image");
      assert.doesNotMatch(r.body.stdout, /forgevm-pip/, "nor the pip it borrowed");
    } finally {
      await apiRequest(http.url, "DELETE", `/sandboxes/${sb.body.id}`);
    }
  });

  it("a second build of the same spec runs no step and fetches nothing", async () => {
    const before = { ...hits };
    const b = await finished((await api("POST", "/builds", { spec_id: spec.id })).body.id);
    assert.equal(b.status, "ready", b.log);
    console.log(JSON.stringify({ rebuild_ms: Date.parse(b.finished_at) - Date.parse(b.created_at) }));
    assert.deepEqual(
      b.steps.map((s: any) => s.status),
      ["done", "cached", "cached"],
    );
    assert.equal(b.digest_local, first.digest_local);
    assert.equal(b.artifacts[0].image_ref, first.artifacts[0].image_ref);
    assert.deepEqual(hits, before, "no package was downloaded again");
    const listed = await api("GET", `/builds?owner_id=${OWNER}&limit=2`);
    assert.deepEqual(
      listed.body.map((x: any) => x.build.id),
      [b.id, first.id],
    );
    assert.equal(listed.body[0].spec.id, spec.id);
    assert.equal((await api("GET", "/builds?limit=0")).status, 400);
  });

  it("pushes to a registry through a connection: a pullable image with the reported digest; a wrong secret fails that artifact", async () => {
    const conn = await api("POST", "/registry-connections", {
      owner_id: OWNER,
      provider: "registry",
      registry: registry.host,
      username: OWNER,
      secret_ref: PASSWORD,
      is_default: true,
    });
    assert.equal(conn.status, 201, JSON.stringify(conn.body));
    assert.equal(conn.body.secret_storage, "encrypted");
    assert.equal(conn.body.secret_ref, undefined);
    const dupe = await api("POST", "/registry-connections", { owner_id: OWNER, provider: "registry", registry: registry.host, username: OWNER, secret_ref: "x" });
    assert.equal(dupe.status, 409);
    const wrong = await api("POST", "/registry-connections", { owner_id: OWNER, provider: "registry", registry: registry.host, username: "mallory", secret_ref: "not-it" });
    assert.equal(wrong.status, 201);
    assert.equal((await api("POST", "/registry-connections", { owner_id: OWNER, provider: "quay", username: "a", secret_ref: "b" })).status, 400);
    const byRef = await api("POST", "/registry-connections", { owner_id: "bob", provider: "ghcr", username: "bob", secret_ref: "secret:REG_PW" });
    assert.equal(byRef.status, 201, JSON.stringify(byRef.body));
    assert.deepEqual([byRef.body.secret_storage, byRef.body.secret_ref, byRef.body.registry], ["operator", "secret:REG_PW", "ghcr.io"]);
    assert.equal((await api("POST", "/registry-connections", { owner_id: "bob", provider: "ghcr", username: "bob2", secret_ref: "secret:NOPE" })).status, 400);
    assert.equal((await api("POST", "/builds", { spec_id: spec.id, targets: ["ghcr"] })).status, 400, "alice has no ghcr connection");

    const created = await api("POST", "/builds", { spec_id: spec.id, targets: ["local", conn.body.id, wrong.body.id] });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    assert.deepEqual(
      created.body.artifacts.map((a: any) => a.status),
      ["pending", "pending", "pending"],
    );
    const b = await finished(created.body.id);
    const [local, pushed, refused] = b.artifacts;
    assert.equal(local.status, "ready");
    assert.equal(pushed.status, "ready", JSON.stringify(b.artifacts));
    assert.match(pushed.image_ref, new RegExp(`^${registry.host}/alice/demo:build-[0-9a-f]{12}$`));
    assert.match(pushed.digest, /^sha256:/);
    assert.equal(refused.status, "failed");
    assert.match(refused.error, /refused|unauthorized|401/i);
    assert.equal(b.status, "failed", "a target that failed fails the build");
    assert.match(b.error, /pushes failed/);

    // A registry client pulls it with the login, and gets the digest the build reported.
    const { stdout } = await run("skopeo", ["inspect", "--tls-verify=false", "--creds", `${OWNER}:${PASSWORD}`, `docker://${pushed.image_ref}`]);
    assert.equal(JSON.parse(stdout).Digest, pushed.digest);
    const anon = await fetch(`http://${registry.host}/v2/alice/demo/manifests/${pushed.image_ref.split(":").at(-1)}`);
    assert.equal(anon.status, 401, "the registry wants the login");
    const cfg = await api("GET", `/builds/${b.id}/spawn-config`);
    assert.equal(cfg.body.target, "local");
    assert.equal(cfg.body.ready, true);

    const list = await api("GET", `/registry-connections?owner_id=${OWNER}`);
    assert.deepEqual(
      list.body.map((c: any) => c.username),
      [OWNER, "mallory"],
    );
    assert.equal((await api("DELETE", `/registry-connections/${wrong.body.id}`)).body.status, "deleted");
    assert.equal((await api("DELETE", `/registry-connections/${wrong.body.id}`)).status, 404);
  });

  it("cancel stops a running build and leaves nothing behind; a queued one is cancelled at once; an ended one is a 409", async () => {
    const slow = await api("POST", "/specs", { owner_id: OWNER, name: "slow", base_image: "forgevm/debian:bookworm", python_packages: ["slow-pkg"] });
    const running = await api("POST", "/builds", { spec_id: slow.body.id });
    const queued = await api("POST", "/builds", { spec_id: spec.id });
    assert.equal(queued.body.status, "queued");
    const q = await api("POST", `/builds/${queued.body.id}/cancel`);
    assert.equal(q.status, 200);
    assert.equal(q.body.status, "canceled");
    assert.equal(q.body.artifacts[0].status, "canceled");

    await waitFor(() => hits.slow > 0, 300_000, "pip to ask the index for slow-pkg");
    const b = await api("GET", `/builds/${running.body.id}`);
    assert.equal(b.body.status, "building");
    assert.equal(b.body.current_step, "build");
    const t0 = performance.now();
    const c = await api("POST", `/builds/${running.body.id}/cancel`);
    const cancelMs = Math.round(performance.now() - t0);
    assert.equal(c.status, 200);
    assert.equal(c.body.status, "canceled", c.body.log);
    assert.equal(c.body.artifacts[0].status, "canceled");
    assert.ok(cancelMs < 30_000, `cancel took ${cancelMs} ms`);
    assert.equal((await api("POST", `/builds/${running.body.id}/cancel`)).status, 409);

    const live = await apiRequest(http.url, "GET", "/sandboxes");
    assert.deepEqual(live.body, [], "no build sandbox is left");
    const images = (await forge.images.list()).map((i) => i.name);
    assert.deepEqual(
      images.filter((n) => n.includes("build-") || n.includes("env-alice-slow")),
      [],
      "no scratch or half-built image",
    );
    assert.deepEqual(
      (await readdir(forge.paths.dataDir)).filter((n) => n.startsWith("env-build-")),
      [],
      "no build context",
    );
    await waitFor(async () => (await readdir(forge.paths.vmsDir).catch(() => [])).length === 0, 10_000, "the build VM's directory to go");
    console.log(JSON.stringify({ cancel_ms: cancelMs }));
  });

  it("the CLI and the TypeScript and Python SDKs reach the same API", async () => {
    const env = childEnv({ FORGEVM_URL: http.url });
    const cliWith = async (input: string, ...args: string[]) => {
      const r = await runCli(args, env, input);
      seen.push(r.stdout, r.stderr);
      if (r.status !== 0) throw Object.assign(new Error(`forgevm ${args.join(" ")}: ${r.stderr}`), { stderr: r.stderr });
      return r;
    };
    const cli = (...args: string[]) => cliWith("", ...args);
    // The same packages and Python as the first spec: the build is the same, so every step comes
    // from the cache (a build of its own is the first test's).
    const made = await cli(
      "env",
      "create",
      "cli-env",
      "--owner",
      OWNER,
      "--base",
      "forgevm/debian:bookworm",
      "--pip",
      "demo-env-pkg",
      "--apt",
      "forgevm-hello",
      "--python",
      "3.11",
    );
    assert.match(made.stdout, /cli-env/);
    const ls = await cli("env", "ls", "--owner", OWNER, "--json");
    assert.ok(JSON.parse(ls.stdout).some((s: any) => s.name === "cli-env"));
    const built = await cli("env", "build", "cli-env", "--owner", OWNER, "--wait");
    assert.match(built.stdout, /ready/);
    assert.match(built.stderr, /RUN command -v python3\.11 .* python3\.11 -c/, "the log went to stderr as it came");
    assert.match(built.stderr, /---> CACHED/);
    const builds = await cli("env", "builds", "--owner", OWNER, "--json");
    const newest = JSON.parse(builds.stdout)[0];
    assert.equal(newest.build.status, "ready");
    const spawned = await cli("env", "spawn", newest.build.id);
    const id = spawned.stdout.trim().split(/\s+/)[0];
    assert.match(id, /^sb-[0-9a-f]{8}$/);
    const out = await cli("exec", id, "--", "forgevm-hello");
    assert.equal(out.stdout, "hello from a deb\n");
    await cli("kill", id);
    await assert.rejects(cli("env", "cancel", newest.build.id), (e: any) => /ready/.test(e.stderr));
    // A registry login from stdin, listed without its secret, then removed.
    const added = await cliWith(`${PASSWORD}\n`, "env", "registry", "add", "registry", OWNER, "--registry", registry.host, "--owner", "carol", "--json");
    const conn = JSON.parse(added.stdout);
    assert.equal(conn.secret_storage, "encrypted");
    assert.match((await cli("env", "registry", "ls", "--owner", "carol")).stdout, new RegExp(`${conn.id}\\s+registry\\s+${registry.host}\\s+alice\\s+-\\s+encrypted`));
    await cli("env", "registry", "rm", conn.id);
    assert.deepEqual(JSON.parse((await cli("env", "registry", "ls", "--owner", "carol", "--json")).stdout), []);
    await assert.rejects(cli("env", "registry", "add", "ghcr", "x", "--owner", "carol"), (e: any) => /no secret on stdin/.test(e.stderr));

    const client = new Client({ baseUrl: http.url });
    const specs = await client.environments.listSpecs(OWNER);
    assert.ok(specs.some((s) => s.name === "cli-env"));
    const b = await client.environments.getBuild(newest.build.id);
    assert.equal(b.status, "ready");
    const sc = await client.environments.spawnConfig(b.id);
    assert.equal(sc.image, b.artifacts[0].image_ref);
    const conns = await client.environments.listRegistryConnections(OWNER);
    assert.ok(conns.every((c) => !JSON.stringify(c).includes(PASSWORD)));

    const py = await run(
      "python3",
      [
        "-c",
        `import sys, json; from forgevm import Client
c = Client(sys.argv[1])
e = c.environments
print(json.dumps([len(e.list_specs("${OWNER}")), e.get_build(sys.argv[2])["status"], e.spawn_config(sys.argv[2])["ready"]]))`,
        http.url,
        b.id,
      ],
      { env: { ...env, PYTHONPATH: fileURLToPath(new URL("../../../sdk/python", import.meta.url)) } },
    );
    assert.deepEqual(JSON.parse(py.stdout), [specs.length, "ready", true]);
  });

  it("the registry secret is in no response, log or database file", async () => {
    for (const body of seen) assert.ok(!body.includes(PASSWORD), "a response held the secret");
    const all = await api("GET", `/builds?owner_id=${OWNER}&limit=200`);
    for (const x of all.body) assert.ok(!x.build.log.includes(PASSWORD));
    const encoded = [PASSWORD, Buffer.from(PASSWORD).toString("base64"), Buffer.from(`${OWNER}:${PASSWORD}`).toString("base64")];
    const files = (await readdir(forge.paths.dataDir, { recursive: true })).map(String).filter((f) => /forgevm\.db|\.log$|\.jsonl?$/.test(f));
    assert.ok(files.some((f) => f.endsWith("forgevm.db")));
    for (const f of files) {
      const bytes = await readFile(join(forge.paths.dataDir, f)).catch(() => Buffer.alloc(0));
      for (const e of encoded) assert.ok(!bytes.includes(e), `${f} holds the secret in plain text`);
    }
  });
});

describe("a package source the build cannot reach", () => {
  it("fails in one line that says what failed and which setting to change", async () => {
    // The loopback address a user first tries for an index on the host is the build VM itself.
    const off = await openForge({ environments: { pythonIndex: "http://127.0.0.1:9/simple/", aptSources: [], allow: [], memoryMb: 512 } });
    const served = await serveForge(off);
    try {
      const call = (method: string, path: string, body?: unknown) => apiRequest(served.url, method, `/environments${path}`, body);
      const spec = (await call("POST", "/specs", { owner_id: OWNER, name: "offline", base_image: "forgevm/debian:bookworm", python_packages: ["requests"] })).body;
      const started = (await call("POST", "/builds", { spec_id: spec.id })).body;
      let b: any;
      await waitFor(async () => ["ready", "failed", "canceled"].includes((b = (await call("GET", `/builds/${started.id}`)).body).status), 600_000, "the build to end");
      assert.equal(b.status, "failed");
      assert.match(b.error, /^the Python package index http:\/\/127\.0\.0\.1:9\/simple\/ cannot be reached from the build \(.+\): set environments\.python_index/);
      assert.match(b.error, /not 127\.0\.0\.1.*network\.allow_private/);
      assert.ok(b.error.length < 600, "one line, not the RUN command");
      assert.doesNotMatch(b.error, /base64/);
      // The generated RUN (kilobytes of base64) is shown cut in the log, not whole.
      assert.ok(
        String(b.log)
          .split("\n")
          .every((l: string) => l.length < 800),
        "no log line holds the whole pip runner",
      );
    } finally {
      await served.close();
      await off.close();
    }
  });
});
