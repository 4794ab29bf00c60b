// Workloads with Docker's verbs, against real VMs: an image's own command as the main process
// (a busybox httpd serving a page through a published port), stop and start with the disk kept,
// restart policies, the main process's log (followed as it is written), names, and the state
// machine's 409s.
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { chmod, lstat, mkdir, mkdtemp, readdir, readFile, readlink, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execFile, spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { after, before, describe, it } from "node:test";
import type { RunningServer } from "../../src/compose/serve.js";
import { apiRequest, assertNoVmLeft, childEnv, freePort, removeAtExit, runCli, startTestServer, waitFor } from "../helpers.js";
import { writeBusyboxImage } from "../oci-writer.js";
import { tarOf } from "../tar-writer.js";

const IMAGE = "local/httpd:v1";
/** The same image under a name with a registry's host and port, as a user pulls from their own registry. */
const PORT_IMAGE = "127.0.0.1:5000/app:1";
const CLI = fileURLToPath(new URL("../../src/cli/main.js", import.meta.url));
const run = promisify(execFile);
let server: RunningServer;
let base: string;

const api = (method: string, path: string, body?: unknown) => apiRequest(base, method, path, body);

before(async () => {
  server = await startTestServer();
  base = server.url;
  const dir = await mkdtemp(join(tmpdir(), "fvt-workloads-"));
  removeAtExit(dir);
  const layout = await writeBusyboxImage(
    dir,
    ["sh", "httpd", "cat", "echo", "sleep", "ls", "kill", "id", "mkdir", "wc", "stty", "tty"],
    [{ path: "www/index.html", data: "hello from the image's own command\n" }],
    {
      Env: ["PATH=/bin", "GREETING=from-image-env"],
      WorkingDir: "/www",
      Cmd: ["httpd", "-f", "-v", "-p", "80", "-h", "/www"],
    },
  );
  await server.forge.images.import(layout, { name: IMAGE });
  await server.forge.images.import(layout, { name: PORT_IMAGE });
});

after(async () => {
  await server?.close();
  if (server) await assertNoVmLeft(server.forge);
});

describe("an image's own command as the main process", () => {
  it("serves a page from the image's CMD through a published port, stops and starts with its disk kept", async () => {
    const port = await freePort();
    const r = await api("POST", "/sandboxes", { image: IMAGE, name: "web", main: { restart: "unless-stopped" }, ports: [`${port}:80`] });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    assert.equal(r.body.name, "web");
    assert.deepEqual(r.body.main.command, ["httpd", "-f", "-v", "-p", "80", "-h", "/www"]);
    const id = r.body.id;
    const page = async () =>
      await fetch(`http://127.0.0.1:${port}/`)
        .then((x) => x.text())
        .catch(() => "");
    await waitFor(async () => (await page()) === "hello from the image's own command\n", 30_000, "the page");

    // The name works wherever the id does; the main process runs in WORKDIR with the image's env.
    const ex = await api("POST", "/sandboxes/web/exec", { command: "echo $GREETING; echo kept > /www/note.txt" });
    assert.equal(ex.body.stdout, "from-image-env\n");
    assert.equal((await api("GET", "/sandboxes/web")).body.main.running, true);

    const stopped = await api("POST", "/sandboxes/web/stop", { timeout: "5s" });
    assert.equal(stopped.status, 200, JSON.stringify(stopped.body));
    assert.equal(stopped.body.state, "stopped");
    assert.equal(stopped.body.main.running, false);
    assert.equal(await page(), "", "nothing serves while stopped");
    // Wrong states are 409s that say the state.
    for (const [m, p, b] of [
      ["POST", "/sandboxes/web/exec", { command: "true" }],
      ["POST", "/sandboxes/web/stop", {}],
      ["POST", "/sandboxes/web/kill", {}],
      ["POST", "/sandboxes/web/fork", {}],
      ["GET", "/sandboxes/web/files?path=/www/note.txt", undefined],
    ] as const) {
      const x = await api(m, p, b);
      assert.equal(x.status, 409, `${m} ${p}: ${JSON.stringify(x.body)}`);
      assert.match(x.body.message, /is stopped/);
    }
    const started = await api("POST", "/sandboxes/web/start", {});
    assert.equal(started.status, 200, JSON.stringify(started.body));
    assert.equal(started.body.state, "running");
    assert.equal((await api("POST", "/sandboxes/web/start", {})).status, 409);
    await waitFor(async () => (await page()).startsWith("hello"), 30_000, "the page after start");
    assert.equal(await fetch(`http://127.0.0.1:${port}/note.txt`).then((x) => x.text()), "kept\n", "the disk was kept");

    // httpd -v logs each response to stderr: the log has them, timestamped.
    const logs = await api("GET", "/sandboxes/web/main/logs?tail=50");
    assert.ok(
      logs.body.lines.some((l: { line: string; stream: string; ts: string }) => l.stream === "stderr" && /response:200/.test(l.line) && !Number.isNaN(Date.parse(l.ts))),
      JSON.stringify(logs.body),
    );

    // SIGTERM through kill: unless-stopped brings it back (it was not a person's stop).
    assert.equal((await api("POST", "/sandboxes/web/kill", { signal: "TERM" })).body.signal, 15);
    await waitFor(async () => (await api("GET", "/sandboxes/web")).body.main.restarts === 1, 15_000, "a restart after the kill");
    await waitFor(async () => (await page()).startsWith("hello"), 30_000, "the page after the policy's restart");
    assert.equal((await api("DELETE", `/sandboxes/${id}`)).status, 200);
    assert.equal((await api("GET", "/sandboxes/web")).status, 404, "the name is free once the sandbox is gone");
  });

  it("restarts a failing main process under on-failure and gives up after max; follows its log as it is written", async () => {
    const r = await api("POST", "/sandboxes", {
      image: IMAGE,
      main: { command: ["sh", "-c", "echo run at $(cat /tmp/n 2>/dev/null || echo 0); echo x >> /tmp/n; sleep 0.2; exit 1"], restart: "on-failure:2" },
    });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    const id = r.body.id;
    try {
      await waitFor(
        async () => {
          const m = (await api("GET", `/sandboxes/${id}`)).body.main;
          return m.restarts === 2 && m.running === false && m.exit_code === 1;
        },
        30_000,
        "two restarts, then giving up",
      );
      await new Promise((res) => setTimeout(res, 1500));
      assert.equal((await api("GET", `/sandboxes/${id}`)).body.main.restarts, 2, "no third restart");
      const n = await api("POST", `/sandboxes/${id}/exec`, { command: "wc -l < /tmp/n" });
      assert.equal(n.body.stdout.trim(), "3", "three runs in all");
      const lines = (await api("GET", `/sandboxes/${id}/main/logs`)).body.lines.map((l: { line: string }) => l.line);
      assert.equal(lines.filter((l: string) => l.startsWith("run at")).length, 3, lines.join("|"));
      assert.equal((await api("POST", `/sandboxes/${id}/kill`, {})).status, 409, "nothing to signal");
    } finally {
      await api("DELETE", `/sandboxes/${id}`);
    }

    // A main process that writes slowly: follow gets each line as it comes.
    const slow = await api("POST", "/sandboxes", { image: IMAGE, main: { command: ["sh", "-c", "for i in 1 2 3; do echo tick $i; sleep 1; done; sleep 300"] } });
    try {
      const res = await fetch(`${base}/api/v1/sandboxes/${slow.body.id}/main/logs?follow=true`);
      const reader = (res.body as ReadableStream<Uint8Array>).getReader();
      const seen: { line: string; at: number }[] = [];
      let buf = "";
      while (seen.length < 3) {
        buf += new TextDecoder().decode((await reader.read()).value);
        for (;;) {
          const nl = buf.indexOf("\n");
          if (nl < 0) break;
          seen.push({ line: JSON.parse(buf.slice(0, nl)).line, at: Date.now() });
          buf = buf.slice(nl + 1);
        }
      }
      await reader.cancel();
      assert.deepEqual(
        seen.map((s) => s.line),
        ["tick 1", "tick 2", "tick 3"],
      );
      assert.ok(seen[2].at - seen[0].at >= 1500, "lines arrived as they were written, not at the end");
    } finally {
      await api("DELETE", `/sandboxes/${slow.body.id}`);
    }

    // Followers that come while lines pour out, and after the end: each gets every line once, in
    // order (a line written while a follower read the log's past went to nobody).
    const N = 2000;
    const fast = await api("POST", "/sandboxes", { image: IMAGE, main: { command: ["sh", "-c", `i=0; while [ $i -lt ${N} ]; do i=$((i + 1)); echo n $i; done`] } });
    try {
      const follow = async (delayMs: number) => {
        await new Promise((r) => setTimeout(r, delayMs));
        const text = await (await fetch(`${base}/api/v1/sandboxes/${fast.body.id}/main/logs?follow=true`)).text();
        return text
          .split("\n")
          .filter(Boolean)
          .map((l) => JSON.parse(l).line as string);
      };
      const all = Array.from({ length: N }, (_, i) => `n ${i + 1}`);
      for (const [i, got] of (await Promise.all([0, 30, 60, 100, 150, 250, 400, 700].map(follow))).entries()) {
        const first = got.findIndex((l, j) => l !== all[j]);
        assert.ok(
          first < 0 && got.length === N,
          `follower ${i}: ${got.length} lines, the first out of order at ${first}: ${JSON.stringify(got.slice(Math.max(0, first - 1), first + 2))}`,
        );
      }
    } finally {
      await api("DELETE", `/sandboxes/${fast.body.id}`);
    }
  });

  it("stops a sandbox left idle, and not one in use", async () => {
    const [idle, busy] = await Promise.all([api("POST", "/sandboxes", { idle_stop: "3s" }), api("POST", "/sandboxes", { idle_stop: "3s" })]);
    assert.equal(idle.body.idle_stop, "3s", JSON.stringify(idle.body));
    try {
      // The busy one gets a command every second; the idle one nothing.
      const until = Date.now() + 9000;
      while (Date.now() < until) {
        assert.equal((await api("POST", `/sandboxes/${busy.body.id}/exec`, { command: "true" })).status, 200);
        await new Promise((r) => setTimeout(r, 1000));
      }
      await waitFor(async () => (await api("GET", `/sandboxes/${idle.body.id}`)).body.state === "stopped", 20_000, "the idle sandbox to stop");
      assert.equal((await api("GET", `/sandboxes/${busy.body.id}`)).body.state, "running");
      assert.equal((await api("POST", `/sandboxes/${idle.body.id}/start`, {})).body.state, "running");
      assert.equal((await api("POST", "/sandboxes", { idle_stop: "10ms" })).status, 400);
    } finally {
      await Promise.all([api("DELETE", `/sandboxes/${idle.body.id}`), api("DELETE", `/sandboxes/${busy.body.id}`)]);
    }
  });

  it("start boots a stopped sandbox cold on its own disk when its saved machine cannot be restored", async () => {
    const r = await api("POST", "/sandboxes", { image: IMAGE, main: { command: ["sh", "-c", "echo started; exec sleep 600"] } });
    const id = r.body.id;
    try {
      await api("POST", `/sandboxes/${id}/exec`, { command: "echo kept > /www/cold.txt" });
      const snaps = join(server.forge.paths.dataDir, "snapshots");
      const before = new Set(await readdir(snaps));
      assert.equal((await api("POST", `/sandboxes/${id}/stop`, { timeout: "2s" })).body.state, "stopped");
      const saved = (await readdir(snaps)).filter((d) => !before.has(d));
      assert.equal(saved.length, 1, "stop saved the machine");
      await writeFile(join(snaps, saved[0], "state"), "not a migration stream"); // as another VMM build would find it
      const started = await api("POST", `/sandboxes/${id}/start`, {});
      assert.equal(started.status, 200, JSON.stringify(started.body));
      assert.equal(started.body.state, "running");
      assert.equal((await api("POST", `/sandboxes/${id}/exec`, { command: "cat /www/cold.txt" })).body.stdout, "kept\n", "its files came with it");
      await waitFor(
        async () => (await api("GET", `/sandboxes/${id}/main/logs`)).body.lines.filter((l: { line: string }) => l.line === "started").length === 2,
        20_000,
        "its main process, run anew",
      );
    } finally {
      await api("DELETE", `/sandboxes/${id}`);
    }
  });

  it("create defines a sandbox that costs nothing until start boots it with what it was created with", async () => {
    const made = await api("POST", "/sandboxes", { image: IMAGE, start: false, name: "made", main: { command: ["sh", "-c", "echo started $GREETING; exec sleep 600"] } });
    assert.equal(made.status, 201, JSON.stringify(made.body));
    assert.equal(made.body.state, "created");
    const id = made.body.id;
    try {
      const x = await api("POST", "/sandboxes/made/exec", { command: "true" });
      assert.equal(x.status, 409);
      assert.match(x.body.message, /is created: exec needs it running \(start it first\)/);
      assert.equal((await api("POST", "/sandboxes", { name: "made" })).status, 409, "its name is taken already");
      assert.ok((await api("GET", "/sandboxes?state=created")).body.some((s: { id: string }) => s.id === id));
      const started = await api("POST", "/sandboxes/made/start", { ttl: "10m" });
      assert.equal(started.status, 200, JSON.stringify(started.body));
      assert.equal(started.body.state, "running");
      await waitFor(
        async () => (await api("GET", "/sandboxes/made/main/logs")).body.lines.some((l: { line: string }) => l.line === "started from-image-env"),
        20_000,
        "its main process",
      );
      assert.equal((await api("POST", "/sandboxes", { start: false, secrets: { K: "v" } })).status, 400, "secrets are never stored, so not created ahead");
    } finally {
      await api("DELETE", `/sandboxes/${id}`);
    }
    // A created sandbox that never ran goes without a trace.
    const never = await api("POST", "/sandboxes", { start: false });
    assert.equal((await api("DELETE", `/sandboxes/${never.body.id}`)).status, 200);
    assert.equal((await api("GET", `/sandboxes/${never.body.id}`)).status, 404);
  });

  it("refuses bad names, taken names, bad policies and images without a command", async () => {
    assert.equal((await api("POST", "/sandboxes", { name: "-bad" })).status, 400);
    assert.equal((await api("POST", "/sandboxes", { name: "sb-12345678" })).status, 400);
    assert.equal((await api("POST", "/sandboxes", { main: { restart: "sometimes" } })).status, 400);
    const noCmd = await api("POST", "/sandboxes", { main: {} });
    assert.equal(noCmd.status, 400, "the default image has no CMD");
    assert.match(noCmd.body.message, /main\.command/);
    const a = await api("POST", "/sandboxes", { name: "taken" });
    try {
      const b = await api("POST", "/sandboxes", { name: "taken" });
      assert.equal(b.status, 409);
      assert.match(b.body.message, /taken by sandbox/);
    } finally {
      await api("DELETE", `/sandboxes/${a.body.id}`);
    }
  });
});

describe("the command line's verbs", () => {
  const cli = (...args: string[]) => run("node", [CLI, "--server", base, ...args], { env: childEnv() });
  /** Runs the CLI with keystrokes written to its stdin at the given times (ms from start); stdin then ends. */
  const withInput = (args: string[], keys: [number, string][]) =>
    new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
      const child = spawn("node", [CLI, "--server", base, ...args], { env: childEnv() });
      let stdout = "";
      let stderr = "";
      child.stdout.on("data", (d) => (stdout += d));
      child.stderr.on("data", (d) => (stderr += d));
      const t0 = Date.now();
      void (async () => {
        for (const [at, text] of keys) {
          await new Promise((r) => setTimeout(r, Math.max(0, t0 + at - Date.now())));
          child.stdin.write(text);
        }
      })();
      const kill = setTimeout(() => child.kill("SIGKILL"), 60_000);
      child.on("exit", (code) => {
        clearTimeout(kill);
        resolve({ code, stdout, stderr });
      });
    });

  it("run -d, ps, logs, kill -s, stop, start, rm", async () => {
    const id = (await cli("run", "-d", "-i", IMAGE, "--name", "cli-web", "--restart", "always", "--", "sh", "-c", "echo up $$; exec sleep 300")).stdout.trim();
    assert.match(id, /^sb-[0-9a-f]{8}$/);
    try {
      await waitFor(async () => (await cli("logs", "cli-web")).stdout.startsWith("up "), 20_000, "the main process's first line");
      const ps = (await cli("ps")).stdout;
      assert.match(ps, new RegExp(`${id} +cli-web +running +\\S*httpd:v1 +up \\(always\\)`));
      // Paused, its main process is held with its memory, not "not started".
      await cli("pause", "cli-web");
      assert.match((await cli("ps")).stdout, new RegExp(`${id} +cli-web +paused +\\S*httpd:v1 +paused \\(always\\)`));
      await cli("resume", "cli-web");
      const stamped = (await cli("logs", "-t", "cli-web")).stdout;
      assert.match(stamped, /^\d{4}-\d\d-\d\dT\S+Z up \d+\n$/);
      // A signal is not a person's stop: "always" brings it back.
      await cli("kill", "-s", "TERM", "cli-web");
      await waitFor(async () => (await cli("logs", "cli-web")).stdout.split("\n").filter(Boolean).length === 2, 20_000, "the restart's line");
      await assert.rejects(cli("rm", "cli-web"), (e: any) => /this sandbox is running: cli-web \(running\): stop it first, or use rm -f/.test(e.stderr));
      await cli("stop", "-t", "2s", "cli-web");
      assert.match((await cli("ps", "--state", "stopped")).stdout, new RegExp(`${id} +cli-web +stopped`));
      assert.doesNotMatch((await cli("ps")).stdout, /cli-web/);
      await cli("start", "cli-web");
      await waitFor(async () => (await cli("logs", "cli-web")).stdout.split("\n").filter(Boolean).length === 3, 20_000, "the start's line");
      await cli("stop", "cli-web");
      assert.equal((await cli("rm", "cli-web")).stdout.trim(), "cli-web");
      assert.equal((await apiRequest(base, "GET", `/sandboxes/${id}`)).status, 404);
    } finally {
      await apiRequest(base, "DELETE", `/sandboxes/${id}`);
    }
    await assert.rejects(cli("run", "--restart", "always", "--", "true"), (e: any) => /--restart needs -d/.test(e.stderr));
    // create IMAGE CMD, then start: Docker's two steps.
    const created = (await cli("create", IMAGE, "sleep", "600")).stdout.trim();
    try {
      assert.match((await cli("ps", "--state", "created")).stdout, new RegExp(`${created} +- +created`));
      await cli("start", created);
      assert.equal((await apiRequest(base, "GET", `/sandboxes/${created}`)).body.main.running, true);
    } finally {
      await cli("rm", "-f", created);
    }
  });
  it("an image reference with a registry port is an image, and run IMAGE -- CMD, run IMAGE CMD and run -- CMD all run CMD", async () => {
    const code = (p: Promise<{ stdout: string; stderr: string }>) =>
      p.then(
        (r) => ({ code: 0, ...r }),
        (e: any) => ({ code: e.code as number, stdout: e.stdout as string, stderr: e.stderr as string }),
      );
    const plain = await code(cli("run", PORT_IMAGE, "sh", "-c", "echo $GREETING; exit 5"));
    assert.equal(plain.code, 5, plain.stderr);
    assert.equal(plain.stdout, "from-image-env\n", "the image's own environment: it ran in the image");
    const dashed = await code(cli("run", PORT_IMAGE, "--", "sh", "-c", "echo dashed"));
    assert.equal(dashed.code, 0, dashed.stderr);
    assert.equal(dashed.stdout, "dashed\n");
    const withVolume = await code(cli("run", "-v", "portvol:/data", PORT_IMAGE, "--", "sh", "-c", "echo kept > /data/f; cat /data/f"));
    assert.equal(withVolume.stdout, "kept\n", withVolume.stderr);
    const seed = await runCli(["--server", base, "run", "--", "sh", "-c", "echo seed-form"], childEnv()); // stdin closed: a command's run forwards it
    assert.equal(seed.stdout, "seed-form\n", seed.stderr);
    // A service (a restart policy) and --ttl 0 have no expiry.
    const detached = (await cli("run", "-d", "--restart", "unless-stopped", "--name", "portref", PORT_IMAGE, "--", "sh", "-c", "exec sleep 300")).stdout.trim();
    const created = (await cli("create", "--ttl", "0", "--name", "job", PORT_IMAGE, "sleep", "60")).stdout.trim();
    try {
      for (const [id, command] of [
        [detached, ["sh", "-c", "exec sleep 300"]],
        [created, ["sleep", "60"]],
      ] as const) {
        const info = (await api("GET", `/sandboxes/${id}`)).body;
        assert.match(info.image, /^127\.0\.0\.1:5000\/app:1$/);
        assert.deepEqual(info.main.command, command);
      }
      assert.equal((await api("GET", `/sandboxes/${detached}`)).body.expires_at, null);
      await cli("start", created);
      assert.equal((await api("GET", `/sandboxes/${created}`)).body.expires_at, null);
      assert.match((await cli("ps")).stdout, /portref.*never/);
    } finally {
      await cli("rm", "-f", detached, created);
      await api("DELETE", "/volumes/portvol");
    }
    // A word that is neither: refused, saying why and what to do.
    const notRef = await code(cli("run", "Foo:Bar/x"));
    assert.equal(notRef.code, 1);
    assert.match(notRef.stderr, /"Foo:Bar\/x" is not an image reference .*put -- before it/);
    const notImage = await code(cli("create", "no-such-image", "sleep", "60"));
    assert.equal(notImage.code, 1);
    assert.match(notImage.stderr, /"no-such-image" is no image this server has.*forgevm create -- no-such-image sleep 60/);
  });

  it("cp round-trips a directory tree byte for byte (modes, links, a 50 MiB file) in an image without tar", async () => {
    const work = await mkdtemp(join(tmpdir(), "fvt-cp-"));
    removeAtExit(work);
    const tree = join(work, "tree");
    await mkdir(join(tree, "sub", "deeper"), { recursive: true });
    await writeFile(join(tree, "big.bin"), randomBytes(50 * 1024 * 1024));
    await writeFile(join(tree, "run.sh"), "#!/bin/sh\necho ran\n", { mode: 0o755 });
    await writeFile(join(tree, "sub", "secret"), "s\n", { mode: 0o600 });
    await writeFile(join(tree, "sub", "deeper", "empty"), "");
    await writeFile(join(tree, "sub", "deeper", `${"long-".repeat(30)}name`), "a long name\n");
    await symlink("../run.sh", join(tree, "sub", "to-run"));
    await symlink("/does/not/exist", join(tree, "dangling"));
    await chmod(join(tree, "sub", "deeper"), 0o750);
    const r = await api("POST", "/sandboxes", { image: IMAGE, main: { command: ["sleep", "600"] } });
    const id = r.body.id;
    try {
      for (const tar of ["/bin/tar", "/usr/bin/tar", "/sbin/tar"]) assert.equal((await api("GET", `/sandboxes/${id}/files/stat?path=${tar}`)).status, 404, "the image has no tar");
      // Into a path that does not exist: it becomes the copy.
      await cli("cp", tree, `${id}:/data`);
      const guest = await api("POST", `/sandboxes/${id}/exec`, { command: "sh /data/run.sh; cat /data/sub/to-run | wc -c; ls /data/sub/deeper" });
      assert.equal(guest.body.stdout, `ran\n19\nempty\n${"long-".repeat(30)}name\n`, JSON.stringify(guest.body));
      assert.equal((await api("GET", `/sandboxes/${id}/files/stat?path=/data/sub/secret`)).body.mode, "600");
      // Into an existing directory: it lands under its own name.
      const one = await cli("cp", join(tree, "run.sh"), `${id}:/data/sub`);
      // As Docker does, the summary goes to stderr (stdout stays the data's, for `cp ID:PATH -`).
      assert.match(one.stderr, new RegExp(`^Successfully copied \\S+ \\(1 entry\\) to ${id}:/data/sub\n$`));
      assert.equal((await api("GET", `/sandboxes/${id}/files/stat?path=/data/sub/run.sh`)).body.mode, "755");
      await api("DELETE", `/sandboxes/${id}/files?path=/data/sub/run.sh`);
      // And back out, twice: as a new path, and into an existing directory.
      // The same summary both ways.
      const back = await cli("cp", `${id}:/data`, join(work, "back"));
      assert.match(back.stderr, /^Successfully copied \S+ \(\d+ entries\) to \/.*back\n$/);
      await compareTrees(tree, join(work, "back"));
      await mkdir(join(work, "into"));
      await cli("cp", `${id}:/data/.`, join(work, "into"));
      await compareTrees(tree, join(work, "into"));
      // The same through the REST archive routes, with errors that say what is wrong.
      assert.equal((await api("GET", `/sandboxes/${id}/archive?path=/nope`)).status, 404);
      assert.equal((await api("GET", `/sandboxes/${id}/archive?path=relative`)).status, 400);
      const evil = await fetch(`${base}/api/v1/sandboxes/${id}/archive?path=/data`, {
        method: "PUT",
        headers: { "Content-Type": "application/x-tar" },
        body: tarOf([{ path: "../etc/evil", data: "x" }]),
      });
      assert.equal(evil.status, 400);
      assert.match(((await evil.json()) as { message: string }).message, /contains "\.\."/);
      const junk = await fetch(`${base}/api/v1/sandboxes/${id}/archive?path=/data`, {
        method: "PUT",
        headers: { "Content-Type": "application/x-tar" },
        body: "not a tar".repeat(100),
      });
      assert.equal(junk.status, 400);
    } finally {
      await api("DELETE", `/sandboxes/${id}`);
    }
  });

  it("shell drives a PTY (prompt, Ctrl-C, exit code); top lists the guest's processes; run IMAGE CMD runs in the foreground and removes its sandbox", async () => {
    const r = await api("POST", "/sandboxes", { image: IMAGE, main: { command: ["sleep", "600"] } });
    const id = r.body.id;
    try {
      // The test is the terminal: keystrokes through stdin, the screen on stdout.
      const sh = await withInput(
        ["shell", id],
        [
          [0, "stty size; echo marker-$((6*7)); tty\n"],
          [1500, "sleep 30\n"],
          [2500, "\x03"],
          [3500, "echo after-interrupt; exit 3\n"],
        ],
      );
      assert.equal(sh.code, 3, sh.stdout + sh.stderr);
      assert.match(sh.stdout, /marker-42/);
      assert.match(sh.stdout, /24 80/, "the terminal's size (80x24 when the test's stdout is no terminal)");
      assert.match(sh.stdout, /\/dev\/pts\/\d+/, "its stdin is a terminal");
      assert.match(sh.stdout, /after-interrupt/, "Ctrl-C ended the sleep, not the shell");
      assert.match(sh.stdout, /[#$] /, "the prompt (written to stderr) is on the terminal");
      assert.equal(sh.stderr, "", "in a PTY session nothing comes apart on stderr");

      const top = JSON.parse((await cli("top", id, "--json")).stdout) as { pid: number; command: string; user: string; rss_bytes: number }[];
      assert.ok(
        top.some((p) => p.command === "sleep 600" && p.user === "root"),
        JSON.stringify(top),
      );
      // What it really has resident, not one page (the stat counter of an idle process lags).
      assert.ok(top.find((p) => p.command === "sleep 600")!.rss_bytes > 32 * 1024, JSON.stringify(top));
      assert.ok(!top.some((p) => /forgevm-agent/.test(p.command)), "the agent is not the user's process");
      assert.match((await cli("top", id)).stdout, /^PID +PPID +USER/);
    } finally {
      await api("DELETE", `/sandboxes/${id}`);
    }

    const before = (await api("GET", "/sandboxes?state=destroyed")).body.length;
    const fg = await cli("run", IMAGE, "sh", "-c", "echo in-the-foreground; exit 7").then(
      () => ({ code: 0, stdout: "", stderr: "" }),
      (e: any) => ({ code: e.code as number, stdout: e.stdout as string, stderr: e.stderr as string }),
    );
    assert.equal(fg.code, 7, fg.stderr);
    assert.equal(fg.stdout, "in-the-foreground\n");
    assert.equal((await api("GET", "/sandboxes?state=destroyed")).body.length, before + 1, "the sandbox was removed");
    const it = await withInput(["run", "-it", IMAGE, "sh"], [[0, "echo tty-$((1+1)); exit 4\n"]]);
    assert.equal(it.code, 4, it.stdout + it.stderr);
    assert.match(it.stdout, /tty-2/);
  });

  it("attach follows the main process live and console the serial console, until detached", async () => {
    const r = await api("POST", "/sandboxes", { image: IMAGE, main: { command: ["sh", "-c", "while true; do echo tick; sleep 1; done"] } });
    const id = r.body.id;
    try {
      for (const [verb, want] of [
        ["attach", /^tick$/m],
        ["console", /\S/],
      ] as const) {
        const child = spawn("node", [CLI, "--server", base, verb, id], { env: childEnv() });
        let out = "";
        let err = "";
        child.stdout.on("data", (d) => (out += d));
        child.stderr.on("data", (d) => (err += d));
        const exited = new Promise<number | null>((res) => child.on("exit", (code) => res(code)));
        await waitFor(() => want.test(out), 20_000, `${verb} to print`);
        const before = out.length;
        if (verb === "attach") await waitFor(() => out.length > before, 10_000, "a line written after attaching");
        child.kill("SIGINT"); // Ctrl-C detaches: the sandbox runs on
        assert.equal(await exited, 0, err);
        assert.match(err, /detached/);
      }
      assert.equal((await api("GET", `/sandboxes/${id}`)).body.main.running, true);
    } finally {
      await api("DELETE", `/sandboxes/${id}`);
    }
  });
});

/** Asserts two local trees hold the same entries: types, permission bits, link targets and bytes. */
async function compareTrees(a: string, b: string, rel = ""): Promise<void> {
  const [ea, eb] = [(await readdir(join(a, rel))).sort(), (await readdir(join(b, rel))).sort()];
  assert.deepEqual(eb, ea, `entries of ${rel || "."}`);
  for (const name of ea) {
    const p = join(rel, name);
    const [sa, sb] = [await lstat(join(a, p)), await lstat(join(b, p))];
    assert.equal(sb.mode, sa.mode, `type and mode of ${p}`);
    if (sa.isSymbolicLink()) assert.equal(await readlink(join(b, p)), await readlink(join(a, p)), `target of ${p}`);
    else if (sa.isDirectory()) await compareTrees(a, b, p);
    else {
      const hash = async (f: string) =>
        createHash("sha256")
          .update(await readFile(f))
          .digest("hex");
      assert.equal(await hash(join(b, p)), await hash(join(a, p)), `bytes of ${p}`);
    }
  }
}
