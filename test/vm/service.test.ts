// `forgevm service install`: the systemd unit it writes is tested by running its command line as
// systemd would (not by rebooting): stopped the way systemd stops it (SIGTERM) and started again,
// the server brings back the sandboxes whose restart policy says so and leaves the others.
import assert from "node:assert/strict";
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { mkdtemp, readdir, readFile, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { after, describe, it } from "node:test";
import { childEnv, freePort, removeAtExit, testDataDir, waitFor } from "../helpers.js";

const CLI = fileURLToPath(new URL("../../src/cli/main.js", import.meta.url));
const KEY = "service-test-key";
const run = promisify(execFile);
const started: ChildProcess[] = [];

after(() => {
  for (const p of started) if (p.exitCode === null) p.kill("SIGKILL");
});

/** The words of a systemd command line (double quotes and backslash escapes). */
function words(line: string): string[] {
  const out: string[] = [];
  for (const m of line.matchAll(/"((?:[^"\\]|\\.)*)"|(\S+)/g)) out.push(m[1] !== undefined ? m[1].replace(/\\(.)/g, "$1").replace(/%%/g, "%") : m[2]);
  return out;
}

describe("forgevm service install", () => {
  it("writes a unit whose command line serves this data directory, and stopped and started again it takes every sandbox back, and starts again those stopped whose policy says so", async () => {
    const dataDir = await testDataDir();
    removeAtExit(dataDir);
    const port = await freePort();
    const config = join(dataDir, "forgevm.yaml");
    await writeFile(config, `server:\n  port: ${port}\nauth:\n  api_key: ${KEY}\n`);
    const unitDir = await mkdtemp(join(dataDir, "units-"));
    const out = await run("node", [CLI, "--data-dir", dataDir, "--config", config, "service", "install", "--unit-dir", unitDir, "--no-enable"], { env: childEnv() });
    assert.match(out.stdout, /wrote .*forgevm\.service/);
    const unit = await readFile(join(unitDir, "forgevm.service"), "utf8");
    assert.match(unit, /^KillMode=process$/m);
    assert.match(unit, /^WantedBy=multi-user\.target$/m);
    const argv = words(/^ExecStart=(.*)$/m.exec(unit)![1]);
    const cwd = words(/^WorkingDirectory=(.*)$/m.exec(unit)![1])[0];
    assert.deepEqual(argv.slice(1), ["--data-dir", dataDir, "--config", config, "serve"]);

    const base = `http://127.0.0.1:${port}/api/v1`;
    const api = async (method: string, path: string, body?: unknown) => {
      const r = await fetch(`${base}${path}`, {
        method,
        headers: { "X-API-Key": KEY, ...(body ? { "Content-Type": "application/json" } : {}) },
        body: body ? JSON.stringify(body) : undefined,
      });
      return { status: r.status, body: (await r.json()) as any };
    };
    const boot = async () => {
      // As systemd runs it: the command line, in its working directory, with no FORGEVM_* of ours.
      const p = spawn(argv[0], argv.slice(1), { cwd, env: childEnv(), stdio: ["ignore", "pipe", "pipe"] });
      started.push(p);
      let err = "";
      p.stdout!.on("data", (d) => (err += d));
      p.stderr!.on("data", (d) => (err += d));
      await waitFor(
        async () =>
          p.exitCode === null &&
          (await fetch(`${base}/health`, { headers: { "X-API-Key": KEY } }).then(
            (r) => r.ok,
            () => false,
          )),
        60_000,
        "the server to answer",
      ).catch((e) => {
        throw new Error(`${e.message}; it printed: ${err}; exit ${p.exitCode}`);
      });
      return p;
    };
    const stop = async (p: ChildProcess) => {
      p.kill("SIGTERM"); // systemctl stop, and what a shutdown of the host does first
      await new Promise((r) => p.once("exit", r));
    };

    let server = await boot();
    const main = { command: ["sh", "-c", "echo up; exec sleep 600"] };
    const spawnOne = async (name: string, restart: string) => {
      const r = await api("POST", "/sandboxes", { name, main: { ...main, restart } });
      assert.equal(r.status, 201, JSON.stringify(r.body));
      return r.body.id as string;
    };
    const always = await spawnOne("svc-always", "always");
    const unless = await spawnOne("svc-unless", "unless-stopped");
    const stoppedUnless = await spawnOne("svc-unless-stopped-by-me", "unless-stopped");
    const stoppedAlways = await spawnOne("svc-always-stopped-by-me", "always");
    const plain = (await api("POST", "/sandboxes", {})).body.id as string;
    await api("POST", `/sandboxes/${always}/exec`, { command: "echo kept > /root/mark" });
    assert.equal((await api("POST", `/sandboxes/${stoppedUnless}/stop`, { timeout: "2s" })).body.state, "stopped");
    assert.equal((await api("POST", `/sandboxes/${stoppedAlways}/stop`, { timeout: "2s" })).body.state, "stopped");

    await stop(server);
    server = await boot();
    try {
      const state = async (id: string) => (await api("GET", `/sandboxes/${id}`)).body;
      await waitFor(
        async () => (await Promise.all([always, unless, stoppedAlways].map(state))).every((s) => s.state === "running" && s.main.running),
        90_000,
        "the sandboxes with always and unless-stopped (not stopped by a person) to run again",
      );
      assert.equal((await state(stoppedUnless)).state, "stopped", "unless-stopped leaves a sandbox a person stopped");
      assert.equal((await state(plain)).state, "running", "a sandbox without a policy outlives its server too (server.on_stop: keep)");
      assert.equal((await api("POST", `/sandboxes/${always}/exec`, { command: "cat /root/mark" })).body.stdout, "kept\n", "its files are where they were");
      const lines = (await api("GET", `/sandboxes/${always}/main/logs`)).body.lines.map((l: { line: string }) => l.line);
      assert.deepEqual(lines, ["up"], "its main process was taken over, not started again");
      // Its process runs again; what it prints reaches the log a moment later.
      const logOf = async (id: string) => (await api("GET", `/sandboxes/${id}/main/logs`)).body.lines.map((l: { line: string }) => l.line);
      await waitFor(async () => (await logOf(stoppedAlways)).length >= 2, 10_000, "the second run's line in the log").catch(() => {});
      assert.deepEqual(await logOf(stoppedAlways), ["up", "up"], "a stopped one with restart always ran again");
    } finally {
      for (const id of [always, unless, stoppedUnless, stoppedAlways, plain]) await api("DELETE", `/sandboxes/${id}`);
      await stop(server);
    }
    assert.deepEqual(await readdir(join(dataDir, "vms")).catch(() => []), [], "no VM left behind");
  });

  it("refuses to install where it cannot write, saying where", async () => {
    const dir = await mkdtemp(join(tmpdir(), "fvt-unit-"));
    removeAtExit(dir);
    await writeFile(join(dir, "a-file"), "");
    const err = await run("node", [CLI, "service", "install", "--unit-dir", join(dir, "a-file", "units"), "--no-enable"], { env: childEnv() }).catch((e) => e);
    assert.notEqual(err.code, 0);
    assert.match(err.stderr, /a-file\/units/);
  });
});
