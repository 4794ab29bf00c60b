// Dockerfile builds in real VMs: a multi-stage build from an image in the local registry with
// ARG, ENV, WORKDIR, USER, COPY (with .dockerignore) and COPY --from; a rebuild that runs no
// step; a changed file that runs only the steps after it; errors that name their line; a failing
// RUN; a cancelled build that leaves nothing behind; and the CLI.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdir, mkdtemp, readdir, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { after, before, describe, it } from "node:test";
import type { RunningServer } from "../../src/compose/serve.js";
import { packLocal } from "../../src/cli/host-tree.js";
import { resolveImage } from "../../src/images/store.js";
import { apiRequest, assertNoVmLeft, childEnv, removeAtExit, startTestServer, waitFor } from "../helpers.js";
import { startRegistry, type LocalRegistry } from "../local-registry.js";
import { writeBusyboxImage } from "../oci-writer.js";

const CLI = fileURLToPath(new URL("../../src/cli/main.js", import.meta.url));
const run = promisify(execFile);
let server: RunningServer;
let base: string;
let registry: LocalRegistry;
let work: string;
let baseRef: string;

const api = (method: string, path: string, body?: unknown) => apiRequest(base, method, path, body);

const DOCKERFILE = `# syntax=docker/dockerfile:1
ARG BASE
FROM \${BASE} AS builder
ARG GREETING=hello
ENV APP_HOME=/src
WORKDIR $APP_HOME
COPY app/ ./
RUN echo "$GREETING from the builder" > built.txt \\
 && cat main.txt >> built.txt

FROM \${BASE}
LABEL org.example.demo=yes
WORKDIR /app
COPY --from=builder /src/built.txt ./out.txt
COPY app/ /app/src/
RUN mkdir -p /data && chown 1000:1000 /data
USER 1000:1000
ENV MODE=prod
EXPOSE 8080
CMD ["cat", "/app/out.txt"]
`;

async function context(files: Record<string, string>): Promise<string> {
  const dir = await mkdtemp(join(work, "ctx-"));
  for (const [name, body] of Object.entries(files)) {
    await mkdir(join(dir, name, ".."), { recursive: true });
    await writeFile(join(dir, name), body);
  }
  return dir;
}

/** Uploads a context and starts a build; returns the response (202 with the job, or an error). */
async function startBuild(dir: string, query: Record<string, string | string[]>) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) for (const x of [v].flat()) q.append(k, x);
  const res = await fetch(`${base}/api/v1/builds?${q}`, {
    method: "POST",
    headers: { "content-type": "application/x-tar" },
    body: Readable.toWeb(Readable.from(packLocal(dir, ""))) as ReadableStream,
    duplex: "half",
  } as RequestInit);
  return { status: res.status, body: (await res.json()) as any };
}

async function finished(id: string) {
  await waitFor(async () => (await api("GET", `/builds/${id}`)).body.state !== "running", 300_000, `build ${id}`);
  return (await api("GET", `/builds/${id}`)).body;
}

const sandboxesEver = async () => ((await api("GET", "/sandboxes?all=true")).body as unknown[]).length;

before(async () => {
  server = await startTestServer();
  base = server.url;
  work = await mkdtemp(join(tmpdir(), "fvt-build-"));
  removeAtExit(work);
  registry = await startRegistry(work);
  const layout = await writeBusyboxImage(await mkdtemp(join(work, "bb-")), ["sh", "cat", "echo", "ls", "mkdir", "id", "chown", "sleep", "pwd", "false", "rm"], [], {
    Env: ["PATH=/bin"],
  });
  baseRef = `${registry.host}/bb:v1`;
  await run("skopeo", ["copy", "--quiet", "--dest-tls-verify=false", `oci:${layout}:v1`, `docker://${baseRef}`]);
});

after(async () => {
  registry?.stop();
  if (server) {
    const images = (await server.forge.images.list()).map((i) => i.name);
    assert.deepEqual(
      images.filter((n) => n.includes("build-")),
      [],
      "no scratch images left",
    );
    assert.deepEqual(
      (await readdir(server.forge.paths.dataDir)).filter((n) => n.startsWith(".build-context")),
      [],
      "no uploaded contexts left",
    );
  }
  await server?.close();
  if (server) await assertNoVmLeft(server.forge);
});

describe("Dockerfile builds", () => {
  let dir: string;
  let digest: string;

  it("builds a multi-stage Dockerfile with ARG, ENV, WORKDIR, USER, COPY and COPY --from, whose image runs", async () => {
    dir = await context({ Dockerfile: DOCKERFILE, ".dockerignore": "**/*.log\n", "app/main.txt": "main\n", "app/debug.log": "left out\n" });
    const started = await startBuild(dir, { tag: "local/demo:v1", build_arg: [`BASE=${baseRef}`, "GREETING=hi"] });
    assert.equal(started.status, 202, JSON.stringify(started.body));
    // The log streams as NDJSON until the build ends.
    const res = await fetch(`${base}/api/v1/builds/${started.body.id}/log`);
    const lines = (await res.text())
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l));
    const end = lines.at(-1);
    assert.equal(end.done, true);
    assert.equal(end.state, "done", lines.map((l) => l.line).join("\n"));
    const job = await finished(started.body.id);
    digest = job.digest;
    assert.match(digest, /^sha256:/);
    // Named as typed (as `images` lists it), in the job and in its log.
    assert.equal(job.image, "local/demo:v1");
    assert.ok(job.log.some((l: string) => l.startsWith("built local/demo:v1 (sha256:")));
    assert.equal(job.steps.length, 16);
    // A first build runs every step: none of them, config steps included, came from a cache.
    assert.deepEqual(
      job.steps.filter((s: { status: string }) => s.status !== "done"),
      [],
    );
    assert.ok(
      lines.some((l) => l.line?.includes("Step 6/16 (line 8): RUN")),
      "the step list is in the log",
    );

    const sb = await api("POST", "/sandboxes", { image: "local/demo:v1", user: "image" });
    assert.equal(sb.status, 201, JSON.stringify(sb.body));
    const seen = await api("POST", `/sandboxes/${sb.body.id}/exec`, { command: "cat out.txt; ls src; id -u; pwd; echo $MODE; echo x > /data/w && echo writable" });
    assert.equal(seen.body.stdout, "hi from the builder\nmain\nmain.txt\n1000\n/app\nprod\nwritable\n", seen.body.stderr);
    await api("DELETE", `/sandboxes/${sb.body.id}`);
    const info = (await server.forge.images.list()).find((i) => i.name.endsWith("local/demo:v1"));
    assert.equal(info?.layers?.length, 1 + 3, "the base's layer and one per COPY or RUN of the last stage");
  });

  it("rebuilds an unchanged context from the cache without running any step", async () => {
    const before = await sandboxesEver();
    const started = await startBuild(dir, { tag: "local/demo:v1", build_arg: [`BASE=${baseRef}`, "GREETING=hi"] });
    const job = await finished(started.body.id);
    assert.equal(job.state, "done", job.error);
    assert.equal(job.digest, digest, "the same image");
    assert.deepEqual(
      job.steps.filter((s: { status: string; instruction: string }) => s.status === "done" && !s.instruction.startsWith("FROM")),
      [],
    );
    assert.ok(job.log.some((l: string) => l.includes("CACHED")));
    assert.equal(await sandboxesEver(), before, "no build sandbox was started");
    // Another build argument changes the RUN that reads it, and what follows.
    const other = await finished((await startBuild(dir, { tag: "local/demo:v2", build_arg: [`BASE=${baseRef}`, "GREETING=bonjour"] })).body.id);
    assert.equal(other.state, "done", other.error);
    const ran = other.steps
      .filter((s: { status: string; instruction: string }) => s.status === "done" && /^(FROM|RUN|COPY|ADD)\b/.test(s.instruction))
      .map((s: { line: number }) => s.line);
    assert.deepEqual(ran, [3, 8, 11, 14, 15, 16], "from the RUN that reads it on, every step that changes files runs again");
    const sb = await api("POST", "/sandboxes", { image: "local/demo:v2" });
    assert.equal((await api("POST", `/sandboxes/${sb.body.id}/exec`, { command: "cat /app/out.txt" })).body.stdout, "bonjour from the builder\nmain\n");
    await api("DELETE", `/sandboxes/${sb.body.id}`);
    await api("DELETE", `/images/${encodeURIComponent("local/demo:v2")}`);
  });

  it("gives a sandbox its image's working directory even when no step made it", async () => {
    const job = await finished((await startBuild(await context({ Dockerfile: `FROM ${baseRef}\nWORKDIR /srv/made\n` }), { tag: "local/wd:v1" })).body.id);
    assert.equal(job.state, "done", job.error);
    const sb = await api("POST", "/sandboxes", { image: "local/wd:v1" });
    assert.equal((await api("POST", `/sandboxes/${sb.body.id}/exec`, { command: "pwd" })).body.stdout, "/srv/made\n");
    await api("DELETE", `/sandboxes/${sb.body.id}`);
  });

  it("STOPSIGNAL is what a stop sends the main process first; VOLUME is recorded in the image", async () => {
    const df = [
      `FROM ${baseRef}`,
      "VOLUME /data",
      "STOPSIGNAL SIGUSR1",
      "HEALTHCHECK --interval=5s CMD true",
      // Exits 42 on SIGUSR1 only: SIGTERM would end it with 143.
      `CMD ["sh", "-c", "trap 'exit 42' USR1; while true; do sleep 1; done"]`,
    ].join("\n");
    const job = await finished((await startBuild(await context({ Dockerfile: df }), { tag: "local/stopsig:v1" })).body.id);
    assert.equal(job.state, "done", job.error);
    const image = await resolveImage(server.forge.paths, "registry-1.docker.io/local/stopsig:v1");
    assert.equal(image.config?.StopSignal, "SIGUSR1");
    assert.deepEqual(image.config?.Volumes, ["/data"]);
    const sb = await api("POST", "/sandboxes", { image: "local/stopsig:v1", main: {} });
    assert.equal(sb.status, 201, JSON.stringify(sb.body));
    await waitFor(async () => !!(await api("GET", `/sandboxes/${sb.body.id}`)).body.main?.started_at, 30_000, "the main process");
    await new Promise((r) => setTimeout(r, 1500)); // its trap is set
    const stopped = await api("POST", `/sandboxes/${sb.body.id}/stop`, { timeout: "20s" });
    assert.equal(stopped.status, 200, JSON.stringify(stopped.body));
    assert.equal(stopped.body.main?.exit_code, 42, JSON.stringify(stopped.body.main));
    await api("DELETE", `/sandboxes/${sb.body.id}`);
  });

  it("HEALTHCHECK runs while the main process runs: unhealthy after its retries, healthy after a pass, in the JSON and ps; checks keep no sandbox awake", async () => {
    const df = [`FROM ${baseRef}`, "HEALTHCHECK --interval=1s --timeout=5s --retries=2 CMD test -f /tmp/ok || { echo missing; exit 1; }", `CMD ["sleep", "600"]`].join("\n");
    const job = await finished((await startBuild(await context({ Dockerfile: df }), { tag: "local/health:v1" })).body.id);
    assert.equal(job.state, "done", job.error);
    const sb = await api("POST", "/sandboxes", { image: "local/health:v1", main: {}, idle: { after: "6s", action: "pause" } });
    assert.equal(sb.status, 201, JSON.stringify(sb.body));
    const id = sb.body.id as string;
    const health = async () => (await api("GET", `/sandboxes/${id}`)).body.main?.health;
    try {
      await waitFor(async () => (await health())?.status === "unhealthy", 30_000, "two failed checks");
      const sick = await health();
      assert.ok(sick.failing_streak >= 2, JSON.stringify(sick));
      assert.deepEqual(sick.log.at(-1).exit_code, 1);
      assert.equal(sick.log.at(-1).output, "missing\n");
      await api("POST", `/sandboxes/${id}/exec`, { command: "touch /tmp/ok" });
      await waitFor(async () => (await health())?.status === "healthy", 30_000, "a passing check");
      assert.equal((await health()).failing_streak, 0);
      const ps = await run("node", [CLI, "--server", base, "ps"], { env: childEnv() });
      assert.match(ps.stdout, new RegExp(`${id} .* up \\(no, healthy\\)`), ps.stdout);
      // A check every second is not a use: the idle pause comes, and no check wakes it.
      await waitFor(async () => (await api("GET", `/sandboxes/${id}`)).body.state === "paused", 30_000, "the idle pause");
      await new Promise((r) => setTimeout(r, 3000));
      const after = (await api("GET", `/sandboxes/${id}`)).body;
      assert.equal(after.state, "paused");
      assert.equal(after.main.health.status, "healthy", "a paused sandbox shows what was found before it paused");
    } finally {
      await api("DELETE", `/sandboxes/${id}`);
    }
  });

  it("names the line of an unsupported instruction, and of a RUN that fails", async () => {
    const bad = await context({ Dockerfile: `FROM ${baseRef}\nRUN true\nFROBNICATE x\n` });
    const r = await startBuild(bad, { tag: "local/bad:v1" });
    assert.equal(r.status, 400);
    assert.match(r.body.message, /line 3: FROBNICATE is not supported/);
    const noFrom = await startBuild(await context({ Dockerfile: "RUN true\n" }), { tag: "local/bad:v1" });
    assert.match(noFrom.body.message, /line 1: RUN before the first FROM/);
    const missing = await startBuild(await context({ Dockerfile: `FROM ${baseRef}\nCOPY nothing-here /x\n` }), { tag: "local/bad:v1" });
    const mj = await finished(missing.body.id);
    assert.equal(mj.state, "error");
    assert.match(mj.error, /line 2: nothing-here is not in the build context/);
    const failing = await startBuild(await context({ Dockerfile: `FROM ${baseRef}\nRUN echo before\nRUN echo oops >&2; false\n` }), { tag: "local/bad:v1" });
    const job = await finished(failing.body.id);
    assert.equal(job.state, "error");
    assert.match(job.error, /line 3: RUN echo oops >&2; false exited with code 1; RUN has no network in this build: .*--network allowlist --allow HOST/);
    assert.ok(job.log.includes("  oops"), "the step's output is in the log");
    assert.equal(job.steps.find((s: { line: number }) => s.line === 3).status, "error");
    assert.equal((await api("POST", "/builds?tag=x", undefined)).status, 400, "no context");
  });

  it("cancels a running build: its RUN is killed and nothing is left behind", async () => {
    const slow = await startBuild(await context({ Dockerfile: `FROM ${baseRef}\nRUN echo started && sleep 600\n` }), { tag: "local/slow:v1", no_cache: "true" });
    assert.equal(slow.status, 202);
    await waitFor(async () => (await api("GET", `/builds/${slow.body.id}`)).body.log.includes("  started"), 120_000, "the RUN to start");
    const t0 = Date.now();
    assert.equal((await api("DELETE", `/builds/${slow.body.id}`)).status, 200);
    const job = await finished(slow.body.id);
    assert.equal(job.state, "cancelled");
    assert.ok(Date.now() - t0 < 30_000);
    assert.equal((await api("DELETE", `/builds/${slow.body.id}`)).status, 409, "it is over");
    const live = (await api("GET", "/sandboxes")).body as { metadata?: Record<string, string> }[];
    assert.equal(live.filter((s) => s.metadata?.["forgevm.build"]).length, 0);
  });

  it("the CLI builds a context directory, printing the steps and the digest", async () => {
    const cli = (...args: string[]) => run("node", [CLI, "--server", base, ...args], { env: childEnv() });
    const r = await cli("build", "-t", "local/demo:cli", "--build-arg", `BASE=${baseRef}`, "--build-arg", "GREETING=hi", dir);
    assert.match(r.stdout, /local\/demo:cli\n {2}digest sha256:[0-9a-f]{64}\n {2}16 steps, \d+ from the cache/);
    assert.match(r.stderr, /CACHED/);
    const q = await cli("build", "-q", "-t", "local/demo:cli", "--build-arg", `BASE=${baseRef}`, "--build-arg", "GREETING=hi", dir);
    assert.equal(q.stdout.trim(), digest);
    await assert.rejects(cli("build", "-t", "x:y", join(work, "no-such-dir")), /not a directory/);
    // A RUN that fails: said once, with its code (not INTERNAL_ERROR) and what a build without network lacks.
    const failing = await context({ Dockerfile: `FROM ${baseRef}\nRUN false\n` });
    const f = await cli("build", "-t", "local/fails:v1", failing).then(
      () => assert.fail("the build should fail"),
      (e: { stderr: string; code: number }) => e,
    );
    assert.equal(f.code, 1);
    assert.equal(f.stderr.split("RUN false exited with code 1").length - 1, 1, f.stderr);
    assert.match(f.stderr, /RUN has no network in this build/);
    assert.match(f.stderr, /forgevm: the build failed \(its log above says why\) \(BAD_REQUEST\)/);
    assert.doesNotMatch(f.stderr, /INTERNAL_ERROR/);
  });
});
