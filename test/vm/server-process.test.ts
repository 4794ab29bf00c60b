// `forgevm serve` as a process: what it does with connections it refuses, how it stops, and
// that a data directory has one owner at a time.
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { readdir, readFile, writeFile } from "node:fs/promises";
import { connect, type Socket } from "node:net";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, describe, it } from "node:test";
import { SERVER_AUTOGROUP_NICE } from "../../src/compose/serve.js";
import { childEnv, exitOf, freePort, removeAtExit, testDataDir, waitFor } from "../helpers.js";

const main = fileURLToPath(new URL("../../src/cli/main.js", import.meta.url));
const KEY = "process-test-key";

interface Served {
  proc: ChildProcess;
  port: number;
  base: string;
  output: () => string;
  /** Its exit code, or "signal NAME". */
  exited: Promise<number | string>;
}

/** Starts `forgevm serve` with a config file naming `dataDir` and a free port. */
async function serve(dataDir: string, extra = "", ownSession = false): Promise<Served> {
  const port = await freePort();
  const config = join(dataDir, `forgevm-${port}.yaml`);
  await writeFile(config, `data_dir: ${dataDir}\nserver:\n  port: ${port}\n  on_stop: destroy\nauth:\n  api_key: ${KEY}\n${extra}`);
  const proc = spawn(process.execPath, [main, "serve", "--config", config], { env: childEnv(), stdio: ["ignore", "pipe", "pipe"], detached: ownSession });
  let out = "";
  proc.stdout!.on("data", (d) => (out += d));
  proc.stderr!.on("data", (d) => (out += d));
  const exited = exitOf(proc);
  return { proc, port, base: `http://127.0.0.1:${port}`, output: () => out, exited };
}

async function ready(s: Served): Promise<void> {
  await waitFor(
    async () =>
      s.proc.exitCode === null &&
      (await fetch(`${s.base}/api/v1/health`, { headers: { "X-API-Key": KEY } }).then(
        (r) => r.ok,
        () => false,
      )),
    30_000,
    `the server (${s.output()})`,
  );
}

async function stop(s: Served): Promise<number | string> {
  if (s.proc.exitCode === null) s.proc.kill("SIGTERM");
  return s.exited;
}

/** How `s` ended within `ms`; one still running then is killed, and the answer says so. */
async function exitWithin(s: Served, ms: number): Promise<number | string> {
  let timer: NodeJS.Timeout | undefined;
  const code = await Promise.race([s.exited, new Promise<string>((r) => (timer = setTimeout(() => r(`still running after ${ms / 1000} s`), ms)))]);
  clearTimeout(timer);
  if (s.proc.exitCode === null && s.proc.signalCode === null) s.proc.kill("SIGKILL");
  return code;
}

const openFds = async (pid: number) => (await readdir(`/proc/${pid}/fd`)).length;

/** Sends a WebSocket upgrade request; resolves with the status line and a promise that settles when the server closes the connection. */
function upgrade(port: number, path: string, headers: Record<string, string> = {}): Promise<{ status: string; socket: Socket; closed: Promise<void> }> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, "127.0.0.1");
    const closed = new Promise<void>((r) => socket.once("close", () => r()));
    let buf = "";
    socket.once("error", reject);
    socket.on("data", (d) => {
      buf += d;
      const nl = buf.indexOf("\r\n");
      if (nl >= 0 && !buf.startsWith("!")) {
        const status = buf.slice(0, nl);
        buf = "!";
        resolve({ status, socket, closed });
      }
    });
    const extra = Object.entries(headers)
      .map(([k, v]) => `${k}: ${v}\r\n`)
      .join("");
    socket.write(
      `GET ${path} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: ${randomBytes(16).toString("base64")}\r\n${extra}\r\n`,
    );
  });
}

let dataDir: string;
before(async () => {
  dataDir = await testDataDir();
});
after(() => removeAtExit(dataDir));

describe("connections the server refuses", () => {
  let s: Served;
  before(async () => {
    s = await serve(dataDir);
    await ready(s);
  });
  after(async () => {
    await stop(s);
  });

  it("closes every WebSocket upgrade it answers with 401, so no socket or file descriptor is left", async () => {
    const before = await openFds(s.proc.pid!);
    for (let i = 0; i < 100; i++) {
      const u = await upgrade(s.port, i % 2 ? "/api/v1/events" : "/api/v1/sandboxes/sb-00000000/exec/ws");
      assert.match(u.status, /^HTTP\/1\.1 401 /);
      let timer: NodeJS.Timeout | undefined;
      const closedByServer = await Promise.race([u.closed.then(() => true), new Promise<boolean>((r) => (timer = setTimeout(() => r(false), 3000)))]);
      clearTimeout(timer);
      u.socket.destroy();
      assert.ok(closedByServer, `attempt ${i + 1}: the server kept the refused connection open`);
    }
    await waitFor(async () => (await openFds(s.proc.pid!)) <= before + 4, 5000, `the server's file descriptors to return to ${before}`);
  });

  it("uploads cut off mid-body (envd multipart and octet-stream, Daytona's bulk upload, our own) end with nothing left unhandled", async () => {
    const created = await fetch(`${s.base}/sandboxes`, {
      method: "POST",
      headers: { "x-api-key": KEY, "content-type": "application/json" },
      body: JSON.stringify({ templateID: "base" }),
    });
    assert.equal(created.status, 201, await created.clone().text());
    const { sandboxID: id, envdAccessToken: token } = (await created.json()) as { sandboxID: string; envdAccessToken: string };
    /** Sends a head and the start of a body that never ends, then hangs up. */
    const cut = (head: string, body: string) =>
      new Promise<void>((res) => {
        const c = connect(s.port, "127.0.0.1", () => {
          c.write(head);
          c.write(body);
          setTimeout(() => {
            c.destroy();
            res();
          }, 300);
        });
        c.on("error", () => {});
      });
    const b = "XBOUNDARY";
    const part = (name: string) => `--${b}\r\nContent-Disposition: form-data; name="file"; filename="${name}"\r\nContent-Type: application/octet-stream\r\n\r\n`;
    const body = `${part("/home/user/a.txt")}aaaa\r\n${part("/home/user/b.txt")}bbbbbbbb`;
    const envd = (type: string, path: string) =>
      `POST ${path} HTTP/1.1\r\nHost: 127.0.0.1:${s.port}\r\nE2b-Sandbox-Id: ${id}\r\nE2b-Sandbox-Port: 49983\r\nX-Access-Token: ${token}\r\nContent-Type: ${type}\r\nContent-Length: 1000000\r\n\r\n`;
    await cut(envd(`multipart/form-data; boundary=${b}`, "/files"), body);
    await cut(envd(`multipart/form-data; boundary=${b}`, "/files?path=/home/user/"), `${part("/home/user/c.txt")}cc\r\n--${b}\r\nContent-Disp`);
    await cut(envd("application/octet-stream", "/files?path=/home/user/o.txt"), "oooo");
    const d = "DBOUND";
    const bulk = `--${d}\r\nContent-Disposition: form-data; name="files[0].path"\r\n\r\n/tmp/x.txt\r\n--${d}\r\nContent-Disposition: form-data; name="files[0].file"; filename="x.txt"\r\n\r\nxxxx`;
    await cut(
      `POST /daytona/toolbox/${id}/files/bulk-upload HTTP/1.1\r\nHost: 127.0.0.1:${s.port}\r\nAuthorization: Bearer ${KEY}\r\nContent-Type: multipart/form-data; boundary=${d}\r\nContent-Length: 1000000\r\n\r\n`,
      bulk,
    );
    const ours = (type: string) =>
      `POST /api/v1/sandboxes/${id}/files?path=/tmp/z HTTP/1.1\r\nHost: 127.0.0.1:${s.port}\r\nX-API-Key: ${KEY}\r\nContent-Type: ${type}\r\nContent-Length: 1000000\r\n\r\n`;
    await cut(ours("application/octet-stream"), "zzzz");
    await cut(ours(`multipart/form-data; boundary=${b}`), body);
    // The server answers on, and nothing reached its catch-all.
    const after = await fetch(`${s.base}/api/v1/sandboxes/${id}/exec`, {
      method: "POST",
      headers: { "x-api-key": KEY, "content-type": "application/json" },
      body: JSON.stringify({ command: "ls /home/user /tmp" }),
    });
    assert.equal(after.status, 200);
    assert.doesNotMatch(s.output(), /nothing handled/);
    assert.equal((await fetch(`${s.base}/api/v1/sandboxes/${id}`, { method: "DELETE", headers: { "x-api-key": KEY } })).status, 200);
  });

  it("stops on SIGTERM while refused clients still hold their end open", async () => {
    const held: Socket[] = [];
    for (let i = 0; i < 20; i++) held.push((await upgrade(s.port, "/api/v1/events")).socket);
    s.proc.kill("SIGTERM");
    const code = await exitWithin(s, 15_000);
    for (const h of held) h.destroy();
    assert.equal(code, 0, s.output());
  });
});

describe("one owner per data directory", () => {
  let first: Served;
  before(async () => {
    first = await serve(dataDir);
    await ready(first);
  });
  after(async () => {
    await stop(first);
  });

  const notRoot = process.getuid?.() !== 0 ? "only root may raise a scheduling group; the server then leaves it as it is" : false;
  it("raises its session's scheduling group when it leads the session (a service), and leaves a session it shares alone", { skip: notRoot }, async () => {
    const own = await readFile("/proc/self/autogroup", "utf8");
    const shared = await serve(await testDataDir());
    const led = await serve(await testDataDir(), "", true);
    try {
      await ready(shared);
      await ready(led);
      assert.match(await readFile(`/proc/${led.proc.pid}/autogroup`, "utf8"), new RegExp(`nice ${SERVER_AUTOGROUP_NICE}\\b`));
      assert.equal(await readFile("/proc/self/autogroup", "utf8"), own, "the session it shares is as it was");
    } finally {
      await stop(shared);
      await stop(led);
    }
  });

  it("a second server on the same data directory refuses to start, naming the first one's pid and address", async () => {
    const second = await serve(dataDir);
    const code = await exitWithin(second, 20_000);
    assert.equal(code, 1, second.output());
    // The first one logs each request it answered, one line each.
    assert.match(first.output(), /^\S+Z GET \/api\/v1\/health 200 \d+ms \S+$/m);
    assert.match(second.output(), new RegExp(`in use by forgevm serve \\(pid ${first.proc.pid}, http://127\\.0\\.0\\.1:${first.port}`));
    // The first one is unaffected.
    const r = await fetch(`${first.base}/api/v1/health`, { headers: { "X-API-Key": KEY } });
    assert.equal(r.status, 200);
  });

  it("a SIGTERM that comes while it starts stops it gracefully once it has started (exit code 0, not the signal's default)", async () => {
    const dir = await testDataDir();
    const s = await serve(dir);
    // Its data directory is claimed before anything else is opened, and the signals are heard by then.
    await waitFor(async () => (await readFile(join(dir, "owner.json"), "utf8").catch(() => "")).includes(`"pid":${s.proc.pid}`), 30_000, "the server to claim its data directory");
    s.proc.kill("SIGTERM");
    const code = await exitWithin(s, 30_000);
    removeAtExit(dir);
    assert.equal(code, 0, s.output());
    assert.match(s.output(), /SIGTERM (while starting|, shutting down)/);
  });

  it("the data directory is free again once its server stopped", async () => {
    assert.equal(await stop(first), 0);
    const next = await serve(dataDir);
    await ready(next);
    first = next;
  });
});

describe("a forgevm.yaml written for the ForgeVM API", () => {
  it("loads as written: Firecracker's section served by QEMU, auth.enabled: false honoured, and the provider name accepted", async () => {
    const seedConfig = fileURLToPath(new URL("../../../test/fixtures/forgevm-api.yaml", import.meta.url));
    const own = await testDataDir();
    removeAtExit(own);
    const port = await freePort();
    // Only where it listens and keeps its data are this test's: the rest is that file, unchanged.
    const env = childEnv({ FORGEVM_SERVER_PORT: String(port), FORGEVM_SERVER_HOST: "127.0.0.1", FORGEVM_DATA_DIR: own });
    const proc = spawn(process.execPath, [main, "serve", "--config", seedConfig], { env, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    proc.stdout!.on("data", (d) => (out += d));
    proc.stderr!.on("data", (d) => (out += d));
    const s: Served = { proc, port, base: `http://127.0.0.1:${port}`, output: () => out, exited: exitOf(proc) };
    try {
      await ready(s);
      assert.match(
        out,
        /note: providers\.firecracker: QEMU microVMs serve its sandboxes \((no Firecracker binary is at|this build has no Firecracker backend).*\/usr\/local\/bin\/firecracker/,
      );
      assert.match(out, /note: auth\.enabled is false/);
      await waitFor(() => /listening on .*providers qemu \(default\)/.test(out), 30_000, "the start-up line");
      // auth.enabled: false: no key is needed; the ForgeVM API's provider name is a provider here.
      const r = await fetch(`${s.base}/api/v1/sandboxes`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ image: "forgevm/debian:bookworm", provider: "firecracker", memory_mb: 256 }),
      });
      const sb = (await r.json()) as { id: string; provider: string; memory_mb: number };
      assert.equal(r.status, 201, JSON.stringify(sb));
      assert.equal(sb.provider, "qemu");
      assert.equal((await fetch(`${s.base}/api/v1/sandboxes/${sb.id}`, { method: "DELETE" })).status, 200);
    } finally {
      assert.equal(await stop(s), 0, out);
    }
  });
});
