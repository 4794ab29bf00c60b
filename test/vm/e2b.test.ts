// The unmodified E2B SDK (npm `e2b@2.51.0`) against a real server with real VMs, configured as
// a user would: E2B_API_URL, E2B_SANDBOX_URL and E2B_VOLUME_API_URL at the server, E2B_API_KEY its API key.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { request as httpRequest } from "node:http";
import { after, before, describe, it } from "node:test";
import {
  ApiClient,
  CommandExitError,
  ConnectionConfig,
  FileNotFoundError,
  FileType,
  FilesystemEventType,
  NotEnoughSpaceError,
  Sandbox,
  SandboxError,
  TimeoutError,
  Volume,
  type FilesystemEvent,
} from "e2b";
import type { FastifyInstance } from "fastify";
import { buildApp } from "../../src/compose/app.js";
import type { Forge } from "../../src/index.js";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { e2bEnv } from "../e2b-env.js";
import { writeBusyboxImage } from "../oci-writer.js";
import { assertNoVmLeft, openForge, waitFor } from "../helpers.js";

const API_KEY = "e2b_0123456789abcdef";
let forge: Forge;
let app: FastifyInstance;
let base: string;
let sbx: Sandbox;

before(async () => {
  forge = await openForge({ reapIntervalMs: 200 });
  app = await buildApp({ forge, version: "test", apiKey: API_KEY });
  base = await app.listen({ host: "127.0.0.1", port: 0 });
  e2bEnv(base, API_KEY);
  sbx = await Sandbox.create({ metadata: { suite: "e2b", run: "1" }, envs: { FROM_CREATE: "yes" }, timeoutMs: 600_000 });
});

after(async () => {
  await app?.close();
  await forge?.close();
  if (forge) await assertNoVmLeft(forge);
});

describe("commands", () => {
  it("runs a command as `user` in its home, with the sandbox's env, output and exit code", async () => {
    const r = await sbx.commands.run('echo "$FROM_CREATE $USER $HOME $(pwd) $E2B_SANDBOX_ID"; echo err >&2');
    assert.equal(r.exitCode, 0);
    assert.equal(r.stdout, `yes user /home/user /home/user ${sbx.sandboxId}\n`);
    assert.equal(r.stderr, "err\n");
  });

  it("throws CommandExitError with the output of a failing command", async () => {
    await assert.rejects(sbx.commands.run("echo out; exit 3"), (e: unknown) => {
      assert.ok(e instanceof CommandExitError, String(e));
      assert.equal(e.exitCode, 3);
      assert.equal(e.stdout, "out\n");
      return true;
    });
  });

  it("takes env, cwd and user per command", async () => {
    const r = await sbx.commands.run("echo $X $(pwd) $(id -u)", { envs: { X: "42" }, cwd: "/tmp", user: "root" });
    assert.equal(r.stdout, "42 /tmp 0\n");
    await assert.rejects(sbx.commands.run("true", { cwd: "/no/such/dir" }), /cwd/);
  });

  it("streams output to callbacks as it is produced", async () => {
    const seen: string[] = [];
    const t0 = Date.now();
    let firstAt = 0;
    await sbx.commands.run("echo one; sleep 1; echo two", {
      onStdout: (d) => {
        firstAt ||= Date.now();
        seen.push(d);
      },
    });
    assert.equal(seen.join(""), "one\ntwo\n");
    assert.ok(firstAt - t0 < 900, "the first line arrived before the command ended");
  });

  it("runs in the background, lists, re-attaches, waits and kills", async () => {
    const h = await sbx.commands.run("sleep 0.5; echo done", { background: true });
    const list = await sbx.commands.list();
    assert.ok(list.some((p) => p.pid === h.pid));
    const again = await sbx.commands.connect(h.pid);
    const r = await again.wait();
    assert.equal(r.stdout, "done\n");
    const long = await sbx.commands.run("sleep 100", { background: true });
    assert.equal(await sbx.commands.kill(long.pid), true);
    await assert.rejects(long.wait(), CommandExitError);
    assert.equal(await sbx.commands.kill(999_999), false);
  });

  it("feeds stdin and closes it", async () => {
    const h = await sbx.commands.run("cat", { background: true, stdin: true });
    await sbx.commands.sendStdin(h.pid, "hello stdin\n");
    await sbx.commands.closeStdin(h.pid);
    const r = await h.wait();
    assert.equal(r.stdout, "hello stdin\n");
  });

  it("kills a command at its timeout", async () => {
    await assert.rejects(sbx.commands.run("sleep 30", { timeoutMs: 1000 }), TimeoutError);
  });
});

describe("pty", () => {
  it("opens a terminal, takes input and a resize", async () => {
    let out = "";
    const term = await sbx.pty.create({
      cols: 80,
      rows: 24,
      onData: (d) => {
        out += Buffer.from(d).toString();
      },
    });
    await sbx.pty.resize(term.pid, { cols: 100, rows: 30 });
    await sbx.pty.sendInput(term.pid, new TextEncoder().encode("stty size; exit\n"));
    await term.wait().catch(() => {});
    assert.match(out, /30 100/);
  });
});

describe("files", () => {
  it("writes, reads (text and binary), lists, stats, renames, removes", async () => {
    const info = await sbx.files.write("notes/a.txt", "hello");
    assert.equal(info.path, "/home/user/notes/a.txt");
    assert.equal(await sbx.files.read("notes/a.txt"), "hello");
    const bin = new Uint8Array(300_000).map((_, i) => (i * 7) & 0xff);
    await sbx.files.write("/tmp/bin.dat", bin.buffer);
    assert.deepEqual(new Uint8Array(await sbx.files.read("/tmp/bin.dat", { format: "bytes" })), bin);
    const many = await sbx.files.write([
      { path: "/tmp/m/1.txt", data: "one" },
      { path: "/tmp/m/2.txt", data: "two" },
    ]);
    assert.equal(many.length, 2);
    const entries = await sbx.files.list("/tmp/m");
    assert.deepEqual(entries.map((e) => e.name).sort(), ["1.txt", "2.txt"]);
    assert.equal(entries[0].type, FileType.FILE);
    assert.equal(await sbx.files.exists("/tmp/m/1.txt"), true);
    assert.equal(await sbx.files.exists("/tmp/m/nope"), false);
    const st = await sbx.files.getInfo("notes/a.txt");
    assert.equal(st.owner, "user");
    assert.equal(st.size, 5);
    assert.equal(await sbx.files.makeDir("/tmp/newdir"), true);
    assert.equal(await sbx.files.makeDir("/tmp/newdir"), false);
    await sbx.files.rename("/tmp/m/1.txt", "/tmp/m/3.txt");
    assert.equal(await sbx.files.read("/tmp/m/3.txt"), "one");
    await sbx.files.remove("/tmp/m");
    assert.equal(await sbx.files.exists("/tmp/m"), false);
    await assert.rejects(sbx.files.read("/no/such/file"), FileNotFoundError);
  });

  it("watches a directory, recursively, until stopped", async () => {
    await sbx.files.makeDir("/tmp/w/sub");
    const seen: FilesystemEvent[] = [];
    const handle = await sbx.files.watchDir("/tmp/w", (e) => void seen.push(e), { recursive: true });
    await sbx.files.write("/tmp/w/a.txt", "1");
    await sbx.files.write("/tmp/w/sub/b.txt", "2");
    await sbx.files.remove("/tmp/w/a.txt");
    await waitFor(() => seen.some((e) => e.name === "a.txt" && e.type === FilesystemEventType.REMOVE), 10_000, "the remove event");
    assert.ok(
      seen.some((e) => e.name === "sub/b.txt" && (e.type === FilesystemEventType.CREATE || e.type === FilesystemEventType.RENAME)),
      JSON.stringify(seen),
    );
    await handle.stop();
    const count = seen.length;
    await sbx.files.write("/tmp/w/after.txt", "3");
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(seen.length, count, "no events after stop");
    await assert.rejects(
      sbx.files.watchDir("/tmp/w/a-file-that-is-not-there", () => {}),
      FileNotFoundError,
    );
  });

  it("uploads as an octet stream and gzip", async () => {
    await sbx.files.write("/tmp/gz.txt", "zipped body", { gzip: true });
    assert.equal(await sbx.files.read("/tmp/gz.txt"), "zipped body");
    const stream = new ReadableStream({
      start(c) {
        c.enqueue(new TextEncoder().encode("streamed "));
        c.enqueue(new TextEncoder().encode("body"));
        c.close();
      },
    });
    await sbx.files.write("/tmp/stream.txt", stream);
    assert.equal(await sbx.files.read("/tmp/stream.txt"), "streamed body");
  });
});

describe("control plane", () => {
  it("lists with a metadata filter and answers getInfo", async () => {
    const found = await Sandbox.list({ query: { metadata: { suite: "e2b" } } }).nextItems();
    assert.deepEqual(
      found.map((s) => s.sandboxId),
      [sbx.sandboxId],
    );
    assert.equal((await Sandbox.list({ query: { metadata: { suite: "other" } } }).nextItems()).length, 0);
    const info = await sbx.getInfo();
    assert.equal(info.metadata.run, "1");
    assert.equal(info.state, "running");
  });

  it("connects to a running sandbox by id", async () => {
    const again = await Sandbox.connect(sbx.sandboxId);
    assert.equal((await again.commands.run("echo hi")).stdout, "hi\n");
    assert.equal(await again.isRunning(), true);
  });

  it("forks a sandbox: the copy has its files and runs on its own; listings page with X-Next-Token", async () => {
    await sbx.files.write("/tmp/before-fork.txt", "parent's");
    const [child] = await Sandbox.fork(sbx.sandboxId, { count: 1, timeoutMs: 120_000 });
    assert.ok(child instanceof Sandbox, String(child));
    assert.notEqual(child.sandboxId, sbx.sandboxId);
    assert.equal(await child.files.read("/tmp/before-fork.txt"), "parent's");
    await child.files.write("/tmp/before-fork.txt", "child's");
    assert.equal(await sbx.files.read("/tmp/before-fork.txt"), "parent's");
    // The copy has its parent's metadata: two sandboxes match, one per page.
    const pages = Sandbox.list({ query: { metadata: { suite: "e2b" } }, limit: 1 });
    const seen = [...(await pages.nextItems()).map((s) => s.sandboxId)];
    assert.equal(pages.hasNext, true);
    seen.push(...(await pages.nextItems()).map((s) => s.sandboxId));
    assert.equal(pages.hasNext, false);
    assert.deepEqual(seen.sort(), [child.sandboxId, sbx.sandboxId].sort());
    // The other filters: template, start time, order (oldest first).
    const mine = { metadata: { suite: "e2b" } };
    const asc = await Sandbox.list({ query: mine, order: "asc" }).nextItems();
    assert.deepEqual(
      asc.map((s) => s.sandboxId),
      [sbx.sandboxId, child.sandboxId],
    );
    assert.equal((await Sandbox.list({ query: { ...mine, template: "base" } }).nextItems()).length, 2);
    assert.equal((await Sandbox.list({ query: { ...mine, template: "no-such" } }).nextItems()).length, 0);
    const later = await Sandbox.list({ query: { ...mine, startedAfter: new Date(Date.now() + 60_000) } }).nextItems();
    assert.equal(later.length, 0);
    assert.equal(await child.kill(), true);
  });

  it("expires a sandbox at the timeout set with setTimeout, and kill answers false for it then", async () => {
    const short = await Sandbox.create({ timeoutMs: 60_000 });
    await short.setTimeout(1000);
    await waitFor(async () => !(await short.isRunning()), 15_000, "the sandbox to expire");
    assert.equal(await Sandbox.kill(short.sandboxId), false);
    await assert.rejects(short.commands.run("true"), SandboxError);
  });
});

describe("the v1 routes (e2b@2.50.0)", () => {
  it("creates with POST /sandboxes, runs, connects and kills", async () => {
    const { Sandbox: SandboxV1 } = await import("e2b-v1");
    const s = await SandboxV1.create({ metadata: { v: "1" } });
    assert.equal((await s.commands.run("echo v1")).stdout, "v1\n");
    const again = await SandboxV1.connect(s.sandboxId);
    assert.equal(await again.files.read("/etc/hostname").then((h) => h.length > 0), true);
    assert.equal(await s.kill(), true);
    assert.equal(await SandboxV1.kill(s.sandboxId), false);
  });
});

describe("bad input gets E2B-shaped errors", () => {
  const post = (path: string, body: string | Buffer, headers: Record<string, string>) => fetch(`${base}${path}`, { method: "POST", body, headers });
  const envd = () => ({ "e2b-sandbox-id": sbx.sandboxId, "x-access-token": (sbx as unknown as { envdAccessToken: string }).envdAccessToken });

  it("an error quotes at most 2,000 characters of what was sent, on the control plane and in envd", async () => {
    const huge = "x".repeat(1024 * 1024);
    const created = await post("/sandboxes", JSON.stringify({ templateID: huge }), { "x-api-key": API_KEY, "content-type": "application/json" });
    assert.ok(created.status >= 400 && created.status < 500, String(created.status));
    const body = (await created.json()) as { message: string };
    assert.ok(body.message.length < 2100, `${body.message.length} characters`);
    const rpc = await post("/filesystem.Filesystem/Stat", JSON.stringify({ path: `/${huge}` }), { ...envd(), "content-type": "application/json" });
    const said = (await rpc.json()) as { message: string };
    assert.ok(said.message.length < 2100, `${said.message.length} characters`);
  });

  it("a multipart upload cut off mid-way leaves no file under its name, and no temporary copy", async () => {
    const boundary = "----e2bcutoff0123";
    const head = `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="/tmp/e2b-cut.bin"\r\nContent-Type: application/octet-stream\r\n\r\n`;
    await new Promise<void>((resolve) => {
      const u = new URL(base);
      const req = httpRequest({
        host: u.hostname,
        port: u.port,
        path: "/files?username=root",
        method: "POST",
        headers: { ...envd(), "content-type": `multipart/form-data; boundary=${boundary}`, "content-length": "10000000" },
      });
      req.on("error", () => resolve());
      req.on("response", (res) => {
        res.resume();
        res.on("end", resolve);
      });
      req.write(head);
      req.write(randomBytes(256 * 1024), () => setTimeout(() => req.destroy(), 300));
    });
    let left = "";
    for (let i = 0; i < 20; i++) {
      left = (await sbx.commands.run("ls -a /tmp | grep e2b-cut || true", { user: "root" })).stdout;
      if (left === "") break;
      await new Promise((r) => setTimeout(r, 200));
    }
    assert.equal(left, "");
  });

  it("unknown sandboxes and templates", async () => {
    await assert.rejects(Sandbox.connect("sb-nope"), (e: Error) => e.name === "SandboxNotFoundError");
    assert.equal(await Sandbox.kill("sb-nope"), false);
    await assert.rejects(Sandbox.create("no-such-template"), /404: template "no-such-template" not found/);
    const r = await fetch(`${base}/v2/sandboxes`, { method: "POST", headers: { "x-api-key": API_KEY, "content-type": "application/json" }, body: "{}" });
    assert.equal(r.status, 400);
    assert.deepEqual(Object.keys((await r.json()) as object).sort(), ["code", "message"]);
  });

  it("network fields and identity this server does not implement are refused by name, never ignored", async () => {
    const create = (body: object) =>
      fetch(`${base}/v2/sandboxes`, {
        method: "POST",
        headers: { "x-api-key": API_KEY, "content-type": "application/json" },
        body: JSON.stringify({ templateID: "base", ...body }),
      });
    const refused: [object, RegExp][] = [
      [{ network: { egressProxy: { address: "proxy.example.com:1080" } } }, /^network\.egressProxy is not supported/],
      [{ network: { httpsPorts: [8443] } }, /^network\.httpsPorts is not supported/],
      [{ network: { maskRequestHost: "bad host/" } }, /^maskRequestHost: "bad host\/" is not a host\[:port\]/],
      [{ network: { allowPublicTraffic: "no" } }, /^network\.allowPublicTraffic must be a boolean/],
      [{ iam: { tokens: { aws: { audience: "sts.amazonaws.com", tokenType: "JWT-SVID" } } } }, /^iam: /],
    ];
    for (const [body, why] of refused) {
      const r = await create(body);
      assert.equal(r.status, 400, JSON.stringify(body));
      assert.match(((await r.json()) as { message: string }).message, why);
    }
    const update = await fetch(`${base}/sandboxes/${sbx.sandboxId}/network`, {
      method: "PUT",
      headers: { "x-api-key": API_KEY, "content-type": "application/json" },
      body: JSON.stringify({ egressProxy: { address: "proxy.example.com:1080" } }),
    });
    assert.equal(update.status, 400);
    assert.match(((await update.json()) as { message: string }).message, /^egressProxy is not supported/);
    // What every server does anyway is taken: ports are public without a token.
    const open = await Sandbox.create({ network: { allowPublicTraffic: true } });
    assert.equal(await open.isRunning(), true);
    await open.kill();
  });

  it("the API key on the control plane and the access token on the sandbox", async () => {
    const r = await fetch(`${base}/v2/sandboxes`, { headers: { "x-api-key": "wrong" } });
    assert.equal(r.status, 401);
    const s = await post("/filesystem.Filesystem/Stat", JSON.stringify({ path: "/" }), {
      "content-type": "application/json",
      "e2b-sandbox-id": sbx.sandboxId,
      "x-access-token": "forged",
    });
    assert.equal(s.status, 401);
    const forged = (await s.json()) as { code: string; message: string };
    assert.equal(forged.code, "unauthenticated");
    // An id that does not exist gets the very same answer: no caller learns which ids exist without a token.
    for (const path of ["/filesystem.Filesystem/Stat", "/filesystem.Filesystem/ListDir"]) {
      const unknown = await post(path, JSON.stringify({ path: "/" }), { "content-type": "application/json", "e2b-sandbox-id": "sb-nope", "x-access-token": "forged" });
      assert.equal(unknown.status, 401, path);
      assert.deepEqual(await unknown.json(), forged);
    }
    const f = await fetch(`${base}/files?path=/etc/hostname`, { headers: { "e2b-sandbox-id": sbx.sandboxId } });
    assert.equal(f.status, 401);
    // The health check too: without the token, a real id and one that does not exist answer alike.
    const unknownHealth = await fetch(`${base}/health`, { headers: { "e2b-sandbox-id": "sb-nope" } });
    const realHealth = await fetch(`${base}/health`, { headers: { "e2b-sandbox-id": sbx.sandboxId } });
    assert.deepEqual([unknownHealth.status, realHealth.status], [401, 401]);
    assert.deepEqual(await unknownHealth.json(), await realHealth.json());
    assert.equal(await sbx.isRunning(), true, "the SDK sends the token");
  });

  it("malformed Connect requests", async () => {
    const stream = { ...envd(), "content-type": "application/connect+json" };
    for (const body of [
      Buffer.from([0, 0, 0]),
      Buffer.from([0, 0, 0, 0, 99, 1]),
      Buffer.concat([Buffer.from([0, 0, 0, 0, 3]), Buffer.from("{x}")]),
      Buffer.from([1, 0, 0, 0, 2, 123, 125]),
    ]) {
      const r = await post("/process.Process/Start", body, stream);
      assert.equal(r.status, 200);
      const raw = Buffer.from(await r.arrayBuffer());
      assert.equal(raw[0], 2, "an end-stream envelope");
      assert.equal(JSON.parse(raw.subarray(5).toString()).error.code, "invalid_argument");
    }
    const wrongType = await post("/process.Process/Start", "{}", { ...envd(), "content-type": "application/json" });
    assert.equal(wrongType.status, 415);
    const unary = await post("/filesystem.Filesystem/Stat", "[1,2]", { ...envd(), "content-type": "application/json" });
    assert.equal(unary.status, 400);
    assert.equal(((await unary.json()) as { code: string }).code, "invalid_argument");
    const noMethod = await post("/filesystem.Filesystem/Nope", "{}", { ...envd(), "content-type": "application/json" });
    assert.equal(noMethod.status, 404);
  });

  it("huge requests: a Connect message over the limit, an upload larger than the disk", async () => {
    const big = Buffer.concat([Buffer.from([0, 0, 0x50, 0, 0]), Buffer.alloc(5 * 1024 * 1024, 0x20)]);
    const r = await post("/filesystem.Filesystem/WatchDir", big, { ...envd(), "content-type": "application/connect+json" });
    assert.equal(((await r.json()) as { code: string }).code, "resource_exhausted");
    await sbx.commands.run("mkdir -p /mnt/small && mount -t tmpfs -o size=1m tmpfs /mnt/small && chmod 777 /mnt/small", { user: "root" });
    await assert.rejects(sbx.files.write("/mnt/small/big.bin", new Uint8Array(4 * 1024 * 1024).buffer), NotEnoughSpaceError);
    assert.equal(await sbx.files.exists("/mnt/small/big.bin"), false, "nothing half-written is left");
    await sbx.commands.run("umount /mnt/small", { user: "root" });
  });

  it("as envd does, directories, uploads and moves are made as root and given to the user (the OpenAI Agents SDK's /workspace); reads and listings stay the user's", async () => {
    await sbx.files.makeDir("/workspace");
    assert.equal((await sbx.files.getInfo("/workspace")).owner, "user");
    await sbx.files.write("/opt/deep/a.txt", "made for the user");
    for (const p of ["/opt/deep", "/opt/deep/a.txt"]) assert.equal((await sbx.files.getInfo(p)).owner, "user", p);
    assert.equal((await sbx.files.getInfo("/opt")).owner, "root", "a directory that was there stays its owner's");
    await sbx.files.rename("/opt/deep/a.txt", "/srv/moved/b.txt");
    assert.equal(await sbx.files.read("/srv/moved/b.txt"), "made for the user");
    assert.equal((await sbx.files.getInfo("/srv/moved")).owner, "user");
    // The user's own commands can use what was made for it.
    assert.equal((await sbx.commands.run("echo more >> /workspace/log && cat /workspace/log")).stdout, "more\n");
    await sbx.commands.run("rm -rf /workspace /opt/deep /srv/moved", { user: "root" });
  });

  it("paths the user may not read, and uploads without a target", async () => {
    await assert.rejects(sbx.files.read("/root/../etc/shadow"), (e: Error) => /permission|denied/i.test(e.message) && !/500/.test(e.message));
    await assert.rejects(sbx.files.list("/root"), (e: Error) => /permission|denied/i.test(e.message));
    const noPath = await post("/files", "data", { ...envd(), "content-type": "application/octet-stream" });
    assert.equal(noPath.status, 400);
    const badBoundary = await post("/files", "data", { ...envd(), "content-type": "multipart/form-data" });
    assert.equal(badBoundary.status, 400);
    assert.equal(((await badBoundary.json()) as { code: number }).code, 400);
  });
});

describe("pause and resume", () => {
  it("keeps the sandbox's files and running processes; connect resumes it", async () => {
    const s = await Sandbox.create({ timeoutMs: 300_000, metadata: { paused: "yes" } });
    await s.files.write("keep.txt", "kept");
    const bg = await s.commands.run("sleep 600", { background: true, timeoutMs: 0 });
    await bg.disconnect();
    await s.commands.run("nohup sh -c 'i=0; while true; do i=$((i+1)); echo $i > /tmp/count; sleep 0.2; done' >/dev/null 2>&1 &");
    assert.equal(await s.pause(), true);
    assert.equal(await s.pause(), false, "pausing a paused sandbox answers false");
    assert.equal((await Sandbox.getInfo(s.sandboxId)).state, "paused");
    const listed = await Sandbox.list({ query: { metadata: { paused: "yes" }, state: ["paused"] } }).nextItems();
    assert.deepEqual(
      listed.map((x) => x.sandboxId),
      [s.sandboxId],
    );
    assert.equal(await s.isRunning(), false);

    const back = await Sandbox.connect(s.sandboxId);
    assert.equal((await back.getInfo()).state, "running");
    assert.equal(await back.files.read("keep.txt"), "kept");
    assert.equal((await back.commands.run(`kill -0 ${bg.pid} && echo alive`)).stdout, "alive\n");
    assert.equal(await back.commands.kill(bg.pid), true, "a process from before the pause is killed by pid");
    await waitFor(async () => (await back.commands.run(`kill -0 ${bg.pid} 2>/dev/null && echo alive || echo gone`)).stdout === "gone\n", 5000, "the process to go");
    // The loop rewrites its file (truncate, then write): a read may meet it empty, which is no number.
    const count = async () => Number((await back.files.read("/tmp/count")).trim() || Number.NaN);
    let before = Number.NaN;
    await waitFor(async () => !Number.isNaN((before = await count())), 10_000, "the loop's count");
    await waitFor(async () => (await count()) > before, 10_000, "the loop started before the pause to go on counting");
    assert.equal(await back.kill(), true);
  });

  it("after pause and connect the same processes are listed with the same pids, take input and signals, and their output and exit codes arrive", async () => {
    const s = await Sandbox.create({ timeoutMs: 300_000 });
    const counter = await s.commands.run("i=0; while [ $i -lt 400 ]; do i=$((i+1)); echo line$i; sleep 0.05; done", { background: true, timeoutMs: 0 });
    await counter.disconnect();
    const echo = await s.commands.run("cat", { background: true, stdin: true, timeoutMs: 0 });
    await echo.disconnect();
    assert.equal(await s.pause(), true);
    const back = await Sandbox.connect(s.sandboxId);
    const listed = (await back.commands.list()).map((p) => p.pid).sort();
    assert.ok(listed.includes(counter.pid) && listed.includes(echo.pid), `${JSON.stringify(listed)} lists ${counter.pid} and ${echo.pid}`);
    // Output from after the resume reaches a client that connects to it then.
    const lines: string[] = [];
    const again = await back.commands.connect(counter.pid, { onStdout: (d) => void lines.push(d) });
    await waitFor(() => lines.join("").includes("line"), 10_000, "the counter's output after the resume");
    await back.commands.kill(counter.pid);
    const killed = await again.wait().catch((e: { exitCode?: number }) => e);
    assert.notEqual((killed as { exitCode?: number }).exitCode, 0);
    const out: string[] = [];
    const cat = await back.commands.connect(echo.pid, { onStdout: (d) => void out.push(d) });
    await back.commands.sendStdin(echo.pid, "input after the resume\n");
    await waitFor(() => out.join("") === "input after the resume\n", 10_000, "cat to echo its input");
    await back.commands.kill(echo.pid);
    await cat.wait().catch(() => {});
    assert.equal(await back.kill(), true);
  });
});

describe("sandbox ports: getHost, the header form, the traffic token", () => {
  const ECHO = `import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(s): s.answer()
    def do_POST(s): s.answer()
    def answer(s):
        body = s.rfile.read(int(s.headers.get("content-length") or 0)).decode()
        out = f"{s.command} {s.path} host={s.headers.get('host')} body={body}".encode()
        s.send_response(200); s.send_header("content-length", str(len(out))); s.end_headers(); s.wfile.write(out)
    def log_message(s, *a): pass
http.server.ThreadingHTTPServer(("0.0.0.0", int(sys.argv[1])), H).serve_forever()
`;
  /** An HTTP request to this server with a Host of our choosing (fetch cannot set one). */
  const viaHost = (host: string, path: string, o: { method?: string; body?: string; headers?: Record<string, string> } = {}) =>
    new Promise<{ status: number; body: string }>((resolve, reject) => {
      const u = new URL(base);
      const r = httpRequest({ host: u.hostname, port: u.port, path, method: o.method ?? "GET", headers: { host, ...o.headers } }, (res) => {
        let body = "";
        res.setEncoding("utf8");
        res.on("data", (c) => (body += c));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
      });
      r.on("error", reject);
      r.end(o.body);
    });
  const serve = async (s: Sandbox, port: number) => {
    await s.files.write("/tmp/echo.py", ECHO);
    // Detached, so that no call of the SDK's stays in flight (one would wake a paused sandbox by itself).
    await s.commands.run(`nohup python3 /tmp/echo.py ${port} >/dev/null 2>&1 &`);
    await s.commands.run(`for i in $(seq 100); do python3 -c 'import socket; socket.create_connection(("127.0.0.1", ${port}), 1)' 2>/dev/null && break; sleep 0.1; done`);
  };

  it("getHost(port) names this server, and a request to that Host reaches the guest's port, method, path and body intact", async () => {
    await serve(sbx, 8080);
    const host = sbx.getHost(8080);
    assert.equal(host, `8080-${sbx.sandboxId}.localhost:${new URL(base).port}`);
    assert.equal((await Sandbox.getInfo(sbx.sandboxId)).sandboxDomain, `localhost:${new URL(base).port}`);
    const got = await viaHost(host, "/some/path?q=1");
    assert.equal(got.status, 200);
    assert.equal(got.body, `GET /some/path?q=1 host=${host} body=`);
    const posted = await viaHost(host, "/form", { method: "POST", body: "a=1&b=2", headers: { "content-type": "application/x-www-form-urlencoded" } });
    assert.equal(posted.body, `POST /form host=${host} body=a=1&b=2`);
    // The header form E2B's proxy also takes, on any Host.
    const r = await fetch(`${base}/x`, { headers: { "e2b-sandbox-id": sbx.sandboxId, "e2b-sandbox-port": "8080" } });
    assert.equal(r.status, 200);
    assert.match(await r.text(), /^GET \/x host=127\.0\.0\.1:\d+ body=$/);
    // Closed ports and unknown sandboxes are E2B's 502s; the API key is not asked for (ports are public by default).
    const closed = await viaHost(sbx.getHost(9), "/");
    assert.equal(closed.status, 502);
    assert.match(JSON.parse(closed.body).message, /port 9 of sandbox .* is closed/);
    const unknown = await viaHost(`8080-sb-nope.localhost:${new URL(base).port}`, "/");
    assert.deepEqual(JSON.parse(unknown.body), { sandboxId: "sb-nope", message: "The sandbox was not found", code: 502 });
    // A Host that only looks like a sandbox's under another domain is this server's own API (which wants its key).
    assert.equal((await viaHost(`8080-${sbx.sandboxId}.example.com`, "/api/v1/sandboxes")).status, 401);
  });

  it("allowPublicTraffic: false needs the traffic access token; maskRequestHost is the Host the guest sees; a paused auto-resume sandbox wakes for port traffic", async () => {
    const s = await Sandbox.create({
      timeoutMs: 300_000,
      lifecycle: { onTimeout: "pause", autoResume: true },
      // biome-ignore lint/suspicious/noTemplateCurlyInString: E2B's placeholder, literal text on the wire
      network: { allowPublicTraffic: false, maskRequestHost: "localhost:${PORT}" },
    });
    try {
      await serve(s, 3000);
      const host = s.getHost(3000);
      assert.equal((await viaHost(host, "/")).status, 403);
      assert.equal((await viaHost(host, "/", { headers: { "e2b-traffic-access-token": "forged" } })).status, 403);
      const token = s.trafficAccessToken!;
      assert.ok(token);
      const ok = await viaHost(host, "/masked", { headers: { "e2b-traffic-access-token": token } });
      assert.equal(ok.body, "GET /masked host=localhost:3000 body=");
      // biome-ignore lint/suspicious/noTemplateCurlyInString: E2B's placeholder, as stored
      assert.deepEqual(JSON.parse(JSON.stringify((await s.getInfo()).network)), { allowPublicTraffic: false, maskRequestHost: "localhost:${PORT}" });
      await s.pause();
      assert.equal((await Sandbox.getInfo(s.sandboxId)).state, "paused");
      const woke = await viaHost(host, "/after-pause", { headers: { "e2b-traffic-access-token": token } });
      assert.equal(woke.body, "GET /after-pause host=localhost:3000 body=");
      const resumed = forge.events.replay(0, 1_000_000).filter((e) => e.sandbox_id === s.sandboxId && e.type === "sandbox.resumed");
      assert.equal(resumed.at(-1)?.data?.by, "port");
    } finally {
      await s.kill();
    }
  });
});

describe("snapshots, logs and team metrics in E2B's shape", () => {
  it("createSnapshot named and unnamed, listSnapshots, Sandbox.create(snapshotId) resumes memory and disk, deleteSnapshot", async () => {
    const src = await Sandbox.create({ timeoutMs: 300_000 });
    try {
      await src.files.write("snap.txt", "in the snapshot");
      await src.commands.run("nohup sleep 4242 >/dev/null 2>&1 &");
      // A background command, as the frameworks start a server: the copies list it, by its pid.
      const bg = await src.commands.run("sleep 4343", { background: true, timeoutMs: 0 });
      const named = await src.createSnapshot({ name: "e2b-snap" });
      assert.deepEqual(named, { snapshotId: "local/e2b-snap:default", names: ["local/e2b-snap"] });
      const unnamed = await Sandbox.createSnapshot(src.sandboxId);
      assert.match(unnamed.snapshotId, /^snap-[0-9a-f]+:default$/);
      assert.deepEqual(unnamed.names, []);
      const mine = await src.listSnapshots().nextItems();
      assert.deepEqual(mine.map((x) => x.snapshotId).sort(), [named.snapshotId, unnamed.snapshotId].sort());
      assert.equal((await Sandbox.listSnapshots({ name: "local/e2b-snap" }).nextItems()).length, 1);
      assert.equal((await Sandbox.listSnapshots({ name: "e2b-snap:default" }).nextItems()).length, 1);
      assert.deepEqual(await Sandbox.listSnapshots({ name: "no-such-snap" }).nextItems(), []);
      assert.ok(
        forge.snapshots.list().some((r) => r.name === "e2b-snap:default"),
        "our own snapshots list it too",
      );

      // Made from the snapshot: its file, and its process still running.
      const restored = await Sandbox.create(named.snapshotId, { timeoutMs: 120_000, envs: { FROM_RESTORE: "1" } });
      assert.equal(await restored.files.read("snap.txt"), "in the snapshot");
      assert.match((await restored.commands.run("pgrep -fx 'sleep 4242'")).stdout, /^\d+\n$/);
      assert.equal((await restored.commands.run("echo $FROM_RESTORE")).stdout, "1\n");
      const listed = (await restored.commands.list()).find((p) => p.pid === bg.pid);
      assert.ok(listed?.args.join(" ").includes("sleep 4343"), `the copy lists the command that ran when the snapshot was taken: ${JSON.stringify(listed)}`);
      // It is the copy's own, to signal, as any process it started.
      assert.equal(await restored.commands.kill(bg.pid), true);
      assert.match((await src.commands.run("pgrep -fx 'sleep 4343' || true")).stdout, /^\d+\n$/, "the source's own goes on");
      // Taken again under its name: a new build of the same snapshot, which now restores instead.
      await src.files.write("snap.txt", "second build");
      assert.equal((await src.createSnapshot({ name: "e2b-snap" })).snapshotId, named.snapshotId);
      assert.equal((await Sandbox.listSnapshots({ name: "local/e2b-snap" }).nextItems()).length, 1);
      await restored.kill();
      const again = await Sandbox.create("local/e2b-snap", { timeoutMs: 120_000 });
      assert.equal(await again.files.read("snap.txt"), "second build");
      // A snapshot a live sandbox was made from is not deleted; once it is gone, it is.
      await assert.rejects(Sandbox.deleteSnapshot(named.snapshotId), /400: cannot delete template .* running sandboxes using it/);
      await again.kill();
      assert.equal(await Sandbox.deleteSnapshot(named.snapshotId), true);
      assert.equal(await Sandbox.deleteSnapshot(named.snapshotId), false);
      assert.equal(await Sandbox.deleteSnapshot(unnamed.snapshotId), true);
      await assert.rejects(src.createSnapshot({ name: "other-team/x" }), /400: name: "other-team" is not your team/);
    } finally {
      await src.kill();
    }
  });

  it("sandbox logs (v2 structured, v1 lines) and team metrics through the SDK's ApiClient; another team's metrics are 403", async () => {
    const api = new ApiClient(new ConnectionConfig()).api;
    await sbx.commands.run("echo for-the-log");
    const v2 = await api.GET("/v2/sandboxes/{sandboxID}/logs", { params: { path: { sandboxID: sbx.sandboxId }, query: { limit: 1000, direction: "forward" } } });
    assert.equal(v2.response.status, 200);
    const logs = v2.data!.logs;
    assert.equal(logs[0].fields.event, "sandbox.created");
    assert.ok(logs.some((l) => l.message.includes("echo for-the-log") && l.level === "info"));
    const searched = await api.GET("/v2/sandboxes/{sandboxID}/logs", { params: { path: { sandboxID: sbx.sandboxId }, query: { search: "for-the-log", limit: 5 } } });
    assert.ok(searched.data!.logs.length >= 1 && searched.data!.logs.every((l) => l.message.includes("for-the-log")));
    const v1 = await api.GET("/sandboxes/{sandboxID}/logs", { params: { path: { sandboxID: sbx.sandboxId }, query: { start: Date.now() - 3_600_000, limit: 10 } } });
    assert.equal(typeof JSON.parse(v1.data!.logs[0].line).msg, "string");
    const none = await api.GET("/v2/sandboxes/{sandboxID}/logs", { params: { path: { sandboxID: "sb-nope" } } });
    assert.equal(none.response.status, 404);

    const teams = await api.GET("/teams");
    assert.equal(teams.data!.length, 1);
    const teamID = teams.data![0].teamID;
    const start = Math.floor(Date.now() / 1000) - 600;
    const m = await api.GET("/teams/{teamID}/metrics", { params: { path: { teamID }, query: { start, end: start + 660 } } });
    assert.equal(m.response.status, 200);
    assert.ok(m.data!.at(-1)!.concurrentSandboxes >= 1, "the suite's sandbox runs now");
    assert.ok(m.data!.some((p) => p.sandboxStartRate > 0));
    const max = await api.GET("/teams/{teamID}/metrics/max", { params: { path: { teamID }, query: { metric: "concurrent_sandboxes", start, end: start + 660 } } });
    assert.ok(max.data!.value >= 1);
    const bad = await api.GET("/teams/{teamID}/metrics/max", { params: { path: { teamID }, query: { metric: "cpu" as "concurrent_sandboxes" } } });
    assert.equal(bad.response.status, 400);
    const other = await api.GET("/teams/{teamID}/metrics", { params: { path: { teamID: "00000000-0000-4000-a000-000000000000" } } });
    assert.equal(other.response.status, 403);
  });
});

describe("volumes in E2B's shape, and their content API", () => {
  it("create, list, getInfo, the content calls on an unmounted volume (text and a 5 MiB binary), a mount at create, the calls while it is mounted, destroy", async () => {
    const vol = await Volume.create("e2b-data");
    assert.match(vol.volumeId, /^[0-9a-f-]{36}$/);
    assert.ok((await Volume.list()).some((v) => v.volumeId === vol.volumeId && v.name === "e2b-data"));
    assert.equal((await Volume.getInfo(vol.volumeId)).name, "e2b-data");
    await assert.rejects(Volume.create("e2b-data"), /400: Volume with name 'e2b-data' already exists/);
    await assert.rejects(Volume.create("bad name"), /400: name:/);

    // Unmounted: the content is read and written on the volume's image.
    await vol.makeDir("/d/e", { force: true });
    const written = await vol.writeFile("/d/e/a.txt", "hello volume", { mode: 0o600 });
    assert.equal(written.mode, 0o600);
    assert.equal(written.size, 12);
    // What the content API makes belongs to the volume's owner, E2B's default user (uid 1000), unless it says otherwise.
    assert.deepEqual([written.uid, written.gid, (await vol.getInfo("/d")).uid], [1000, 1000, 1000]);
    assert.equal(await vol.readFile("/d/e/a.txt"), "hello volume");
    const big = randomBytes(5 * 1024 * 1024);
    await vol.writeFile("/big.bin", new Blob([big]));
    assert.ok(Buffer.from(await vol.readFile("/big.bin", { format: "bytes" })).equals(big));
    assert.deepEqual((await vol.list("/", { depth: 3 })).map((e) => e.path).sort(), ["/big.bin", "/d", "/d/e", "/d/e/a.txt", "/lost+found"]);
    const meta = await vol.updateMetadata("/d/e/a.txt", { uid: 1000, gid: 1000, mode: 0o640 });
    assert.deepEqual([meta.uid, meta.gid, meta.mode], [1000, 1000, 0o640]);
    assert.equal(await vol.exists("/nope"), false);
    await assert.rejects(vol.writeFile("/no/parent.txt", "x"), (e: Error) => e.name === "VolumePathNotFoundError");
    await assert.rejects(vol.getInfo("/../etc/passwd"), /400/);
    await assert.rejects(vol.getInfo('/a"\nrm /x'), /400: path holds a quote/);
    const forged = await fetch(`${base}/volumecontent/${vol.volumeId}/path?path=%2F`, { headers: { authorization: "Bearer forged" } });
    assert.equal(forged.status, 401);
    // uid and gid are Linux ids (32 bits), refused by name past that, in the query and in the body.
    const auth = { authorization: `Bearer ${vol.token}` };
    const bigQuery = await fetch(`${base}/volumecontent/${vol.volumeId}/dir?path=%2Fbig&uid=9999999999`, { method: "POST", headers: auth });
    assert.equal(bigQuery.status, 400);
    assert.match(await bigQuery.text(), /uid must be 0-4294967294/);
    const bigBody = await fetch(`${base}/volumecontent/${vol.volumeId}/path?path=%2F`, {
      method: "PATCH",
      headers: { ...auth, "content-type": "application/json" },
      body: '{"gid": 1e308}',
    });
    assert.equal(bigBody.status, 400);
    assert.match(await bigBody.text(), /gid/);

    // Mounted at create: the sandbox sees the files, and content calls go through it meanwhile.
    await assert.rejects(Sandbox.create({ volumeMounts: { "/mnt/x": "no-such-volume" } }), /400: invalid mounts: - volume mount #0: volume "no-such-volume" not found/);
    const s = await Sandbox.create({ timeoutMs: 120_000, volumeMounts: { "/mnt/data": vol } });
    try {
      // The sandbox's default user reads and writes it, as on E2B.
      assert.equal((await s.commands.run("cat /mnt/data/d/e/a.txt")).stdout, "hello volume");
      assert.deepEqual((await s.getInfo()).volumeMounts, [{ name: "e2b-data", path: "/mnt/data" }]);
      await s.commands.run("echo from-the-sandbox > /mnt/data/inside.txt");
      assert.equal(await vol.readFile("/inside.txt"), "from-the-sandbox\n");
      await vol.writeFile("/while-mounted.txt", "through the sandbox");
      assert.equal((await s.commands.run("echo ' and the user' >> /mnt/data/while-mounted.txt && cat /mnt/data/while-mounted.txt")).stdout, "through the sandbox and the user\n");
      await assert.rejects(Volume.destroy(vol.volumeId), /409|mounted/);
    } finally {
      await s.kill();
    }
    // Gone: its writes are on the image.
    assert.equal(await vol.readFile("/inside.txt"), "from-the-sandbox\n");
    await vol.remove("/d");
    assert.equal(await vol.exists("/d/e/a.txt"), false);
    assert.equal(await Volume.destroy(vol.volumeId), true);
    assert.equal(await Volume.destroy(vol.volumeId), false);
    await assert.rejects(Volume.getInfo(vol.volumeId), (e: Error) => e.name === "VolumeNotFoundError");
  });
});

describe("lifecycle: pause at the timeout, and auto-resume", () => {
  it("the OpenAI Agents SDK's create (autoPause, autoResume) is taken; at its timeout it pauses; the next envd call wakes it", async () => {
    // What the OpenAI Agents SDK's E2B client sends on every default create.
    const raw = await fetch(`${base}/v2/sandboxes`, {
      method: "POST",
      headers: { "x-api-key": API_KEY, "content-type": "application/json" },
      body: JSON.stringify({ templateID: "base", timeout: 300, autoPause: true, autoResume: { enabled: true } }),
    });
    assert.equal(raw.status, 201, await raw.clone().text());
    const agents = (await raw.json()) as { sandboxID: string };
    assert.deepEqual((await Sandbox.getInfo(agents.sandboxID)).lifecycle, { onTimeout: "pause", autoResume: true });
    await Sandbox.kill(agents.sandboxID);

    const s = await Sandbox.create({ timeoutMs: 4000, lifecycle: { onTimeout: "pause", autoResume: true } });
    await s.files.write("kept.txt", "kept across the pause");
    await waitFor(async () => (await Sandbox.getInfo(s.sandboxId)).state === "paused", 30_000, "the sandbox to pause at its timeout");
    assert.deepEqual((await Sandbox.getInfo(s.sandboxId)).lifecycle, { onTimeout: "pause", autoResume: true }, "the policy survives the pause");
    // The same object as before the pause: its next call wakes the sandbox and is served.
    assert.equal(await s.files.read("kept.txt"), "kept across the pause");
    assert.equal((await Sandbox.getInfo(s.sandboxId)).state, "running");
    const resumed = forge.events.replay(0, 1_000_000).filter((e) => e.sandbox_id === s.sandboxId && e.type === "sandbox.resumed");
    assert.equal(resumed.at(-1)?.data?.by, "envd");
    const paused = forge.events.replay(0, 1_000_000).filter((e) => e.sandbox_id === s.sandboxId && e.type === "sandbox.paused");
    assert.equal(paused.at(-1)?.data?.reason, "timeout");
    await s.kill();
  });

  it("a background command whose output its client follows does not undo the pause at the timeout, nor does polling its state; the next call resumes it and the output goes on", async () => {
    // The OpenAI Agents SDK's and Mastra's default: pause at the timeout, resume on the next call.
    const s = await Sandbox.create({ timeoutMs: 4000, lifecycle: { onTimeout: "pause", autoResume: true } });
    const seen: string[] = [];
    const bg = await s.commands.run("i=0; while :; do echo tick $i; i=$((i+1)); sleep 0.3; done", { background: true, timeoutMs: 0, onStdout: (d) => void seen.push(d) });
    await waitFor(async () => (await Sandbox.getInfo(s.sandboxId)).state === "paused", 30_000, "the sandbox to pause at its timeout");
    // Followed, and polled: it stays paused.
    const until = Date.now() + 3000;
    while (Date.now() < until) {
      assert.equal((await Sandbox.getInfo(s.sandboxId)).state, "paused", "a followed stream or a status poll resumed it");
      await new Promise((r) => setTimeout(r, 200));
    }
    assert.equal(forge.events.replay(0, 1_000_000).filter((e) => e.sandbox_id === s.sandboxId && e.type === "sandbox.resumed").length, 0);
    const before = seen.join("").split("\n").filter(Boolean).length;
    // A call that wants an answer wakes it; the stream that waited goes on where it was.
    assert.equal((await s.commands.run("echo awake")).stdout, "awake\n");
    await waitFor(() => seen.join("").split("\n").filter(Boolean).length > before + 2, 10_000, "the followed output to go on");
    const ticks = seen
      .join("")
      .split("\n")
      .filter(Boolean)
      .map((l) => Number(l.split(" ")[1]));
    assert.deepEqual(
      ticks,
      ticks.map((_, i) => i),
      "nothing lost or repeated across the pause",
    );
    await bg.kill();
    await s.kill();
  });

  it("without autoResume a paused sandbox stays paused for envd (connect resumes it); E2B's combinations are checked", async () => {
    const s = await Sandbox.create({ timeoutMs: 4000, lifecycle: { onTimeout: "pause" } });
    await waitFor(async () => (await Sandbox.getInfo(s.sandboxId)).state === "paused", 30_000, "the sandbox to pause at its timeout");
    assert.equal(await s.isRunning(), false);
    const back = await Sandbox.connect(s.sandboxId);
    assert.equal((await back.commands.run("echo back")).stdout, "back\n");
    await back.kill();
    for (const body of [{ autoPauseMemory: false }, { autoPause: true, autoPauseMemory: false, autoResume: { enabled: true } }]) {
      const r = await fetch(`${base}/v2/sandboxes`, {
        method: "POST",
        headers: { "x-api-key": API_KEY, "content-type": "application/json" },
        body: JSON.stringify({ templateID: "base", ...body }),
      });
      assert.equal(r.status, 400, JSON.stringify(body));
      assert.match(((await r.json()) as { message: string }).message, /autoPauseMemory/);
    }
  });
});

describe("a pause that keeps the disk only", () => {
  it("pause({keepMemory: false}) keeps the files, not the processes; connect boots it cold over its disk, as connect({onResume: 'reboot'}) does a memory pause; autoPauseMemory: false pauses so at the timeout", async () => {
    const s = await Sandbox.create({ timeoutMs: 300_000 });
    await s.files.write("disk.txt", "on the disk");
    const bg = await s.commands.run("sleep 600", { background: true, timeoutMs: 0 });
    await bg.disconnect();
    // By its name, not its pid: a cold boot numbers its processes anew, and may give that pid to another
    // (the checking shell itself, even). Nothing else in the guest runs sleep.
    const sleeping = "pgrep -x sleep >/dev/null && echo alive || echo gone";
    assert.equal((await s.commands.run(sleeping)).stdout, "alive\n");
    assert.equal(await s.pause({ keepMemory: false }), true);
    const paused = forge.events.replay(0, 1_000_000).filter((e) => e.sandbox_id === s.sandboxId && e.type === "sandbox.paused");
    assert.equal(paused.at(-1)?.data?.memory, false);
    assert.equal(await s.isRunning(), false, "a disk-only pause is not resumed behind the caller's back");
    const back = await Sandbox.connect(s.sandboxId);
    assert.equal(await back.files.read("disk.txt"), "on the disk");
    assert.equal((await back.commands.run(sleeping)).stdout, "gone\n", "a cold boot: the processes are gone");
    const resumed = forge.events.replay(0, 1_000_000).filter((e) => e.sandbox_id === s.sandboxId && e.type === "sandbox.resumed");
    assert.equal(resumed.at(-1)?.data?.cold_boot, true);
    await back.kill();

    // connect({onResume: "reboot"}) boots a memory pause cold over its disk, too.
    const r = await Sandbox.create({ timeoutMs: 300_000 });
    await r.files.write("disk.txt", "rebooted over it");
    const held = await r.commands.run("sleep 600", { background: true, timeoutMs: 0 });
    await held.disconnect();
    assert.equal((await r.commands.run(sleeping)).stdout, "alive\n");
    assert.equal(await r.pause(), true);
    const rebooted = await Sandbox.connect(r.sandboxId, { onResume: "reboot" });
    assert.equal(await rebooted.files.read("disk.txt"), "rebooted over it");
    assert.equal((await rebooted.commands.run(sleeping)).stdout, "gone\n");
    const woke = forge.events.replay(0, 1_000_000).filter((e) => e.sandbox_id === r.sandboxId && e.type === "sandbox.resumed");
    assert.equal(woke.at(-1)?.data?.cold_boot, true);
    await rebooted.kill();

    const t = await Sandbox.create({ timeoutMs: 3000, lifecycle: { onTimeout: { action: "pause", keepMemory: false } } });
    await t.files.write("t.txt", "kept at the timeout");
    await waitFor(async () => (await Sandbox.getInfo(t.sandboxId)).state === "paused", 30_000, "the sandbox to pause at its timeout");
    const again = await Sandbox.connect(t.sandboxId);
    assert.equal(await again.files.read("t.txt"), "kept at the timeout");
    await again.kill();
  });
});

describe("an image without bash or the user", () => {
  it("gets the user at create, and runs commands with /bin/sh", async () => {
    const dir = await mkdtemp(join(tmpdir(), "fvm-e2b-img-"));
    try {
      const layout = await writeBusyboxImage(dir, ["sh", "chown", "id", "cat", "pwd", "readlink", "ls"], [{ path: "home/", type: "dir" }]);
      await forge.images.import(layout, { name: "local/busybox-e2b:v1" });
      const s = await Sandbox.create("local/busybox-e2b:v1", { timeoutMs: 120_000 });
      try {
        const r = await s.commands.run("id -un; id -u; pwd; readlink /proc/$$/exe");
        assert.equal(r.stdout, "user\n1000\n/home/user\n/bin/busybox\n");
        await s.files.write("mine.txt", "x");
        assert.equal((await s.files.getInfo("mine.txt")).owner, "user");
      } finally {
        await s.kill();
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
