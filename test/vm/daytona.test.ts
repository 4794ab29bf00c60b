// The unmodified Daytona SDK (npm `@daytonaio/sdk@0.218.0`) against a real server with real VMs,
// configured as docs/daytona.md says: DAYTONA_API_URL at the server's /daytona, DAYTONA_API_KEY its key.
// Past 400 lines because the calls share one sandbox made once (a create costs seconds under TCG),
// and each describe goes on from the state the one before left.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { request as httpRequest } from "node:http";
import { readFile, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, describe, it } from "node:test";
import { Daytona, DaytonaAuthenticationError, DaytonaNotFoundError, DaytonaTimeoutError, Image, type Sandbox } from "@daytonaio/sdk";
import type { FastifyInstance } from "fastify";
import { buildApp } from "../../src/compose/app.js";
import type { Forge } from "../../src/index.js";
import { run } from "../../src/util/process.js";
import { assertNoVmLeft, childEnv, freePort, openForge } from "../helpers.js";

const API_KEY = "daytona_0123456789abcdef";
const repo = fileURLToPath(new URL("../../../", import.meta.url));
let forge: Forge;
let app: FastifyInstance;
let base: string;
let daytona: Daytona;
let sbx: Sandbox;

/** Points the SDK at this server and only at it. */
function daytonaEnv(url: string): void {
  for (const k of Object.keys(process.env)) if (k.startsWith("DAYTONA_")) delete process.env[k];
  process.env.DAYTONA_API_URL = `${url}/daytona`;
  process.env.DAYTONA_API_KEY = API_KEY;
  process.env.DAYTONA_TARGET = "us";
}

before(async () => {
  forge = await openForge({ reapIntervalMs: 200 });
  app = await buildApp({ forge, version: "test", apiKey: API_KEY });
  base = await app.listen({ host: "127.0.0.1", port: 0 });
  daytonaEnv(base);
  daytona = new Daytona();
  sbx = await daytona.create({ labels: { suite: "daytona", run: "1" }, envVars: { FROM_CREATE: "yes" } });
});

after(async () => {
  await app?.close();
  await forge?.close();
  if (forge) await assertNoVmLeft(forge);
});

describe("the control plane", () => {
  it("creates a started sandbox with labels, env and the toolbox URL; lists it by label; gets it by id and by name", async () => {
    assert.equal(sbx.state, "started");
    assert.equal(sbx.target, "us");
    assert.equal(sbx.labels.suite, "daytona");
    assert.equal(sbx.labels["code-toolbox-language"], "python");
    assert.equal(sbx.toolboxProxyUrl, `${base}/daytona/toolbox`);
    const listed: Sandbox[] = [];
    for await (const s of daytona.list({ labels: { suite: "daytona" } })) listed.push(s);
    assert.deepEqual(
      listed.map((s) => s.id),
      [sbx.id],
    );
    const none: Sandbox[] = [];
    for await (const s of daytona.list({ labels: { suite: "nope" } })) none.push(s);
    assert.deepEqual(none, []);
    assert.equal((await daytona.get(sbx.id)).id, sbx.id);
    assert.equal((await daytona.get(sbx.name)).id, sbx.id);
    // The list of the SDKs before 0.16x (Mastra and LangChain pin 0.143): pages numbered from 1.
    const paged = await fetch(`${base}/daytona/sandbox/paginated?page=1&limit=10&labels=${encodeURIComponent(JSON.stringify({ suite: "daytona" }))}`, {
      headers: { authorization: `Bearer ${API_KEY}` },
    });
    const page = (await paged.json()) as { items: { id: string }[]; total: number; page: number; totalPages: number };
    assert.deepEqual([page.items.map((i) => i.id), page.total, page.page, page.totalPages], [[sbx.id], 1, 1, 1]);
    // The same sandbox, to our own API.
    assert.deepEqual(forge.sandboxes.get(sbx.id).metadata, { suite: "daytona", run: "1", "code-toolbox-language": "python", "daytona.target": "us" });
  });

  it("a wrong key is the SDK's auth error; an unknown sandbox its not-found error", async () => {
    const wrong = new Daytona({ apiKey: "wrong", apiUrl: `${base}/daytona`, target: "us" });
    await assert.rejects(wrong.get(sbx.id), DaytonaAuthenticationError);
    await assert.rejects(daytona.get("no-such-sandbox"), DaytonaNotFoundError);
    // The toolbox refuses a wrong key too.
    const raw = await fetch(`${base}/daytona/toolbox/${sbx.id}/process/execute`, {
      method: "POST",
      headers: { authorization: "Bearer wrong", "content-type": "application/json" },
      body: JSON.stringify({ command: "id" }),
    });
    assert.equal(raw.status, 401);
    assert.equal(((await raw.json()) as { source: string }).source, "DAYTONA_DAEMON");
  });
});

describe("the toolbox", () => {
  it("executeCommand: output, exit code, cwd, env, and a timeout that kills it", async () => {
    const r = await sbx.process.executeCommand('echo "$FROM_CREATE $(whoami) $(pwd) $EXTRA"; echo err >&2; exit 3', "/tmp", { EXTRA: "x" });
    assert.equal(r.exitCode, 3);
    assert.equal(r.result, "yes daytona /tmp x\nerr\n");
    assert.equal((await sbx.getUserHomeDir()) ?? "", "/home/daytona");
    assert.equal(await sbx.getWorkDir(), "/home/daytona");
    const started = Date.now();
    await assert.rejects(sbx.process.executeCommand("sleep 30", undefined, undefined, 1), DaytonaTimeoutError);
    assert.ok(Date.now() - started < 15_000);
  });

  it("codeRun runs Python", async () => {
    const r = await sbx.process.codeRun('import sys\nprint("py", sys.version_info[0])');
    assert.equal(r.exitCode, 0);
    assert.equal(r.result, "py 3\n");
  });
});

describe("sessions", () => {
  it("cd and export carry over between commands of a session; exit codes; logs as JSON", async () => {
    await sbx.process.createSession("s1");
    await sbx.process.executeSessionCommand("s1", { command: "mkdir -p /tmp/work && cd /tmp/work && export GREETING=hi" });
    const r = await sbx.process.executeSessionCommand("s1", { command: 'echo "$GREETING from $(pwd)"; echo warn >&2' });
    assert.equal(r.exitCode, 0);
    assert.equal(r.stdout, "hi from /tmp/work\n");
    assert.equal(r.stderr, "warn\n");
    const failed = await sbx.process.executeSessionCommand("s1", { command: "sh -c 'exit 4'" });
    assert.equal(failed.exitCode, 4);
    const logs = await sbx.process.getSessionCommandLogs("s1", r.cmdId!);
    assert.deepEqual({ stdout: logs.stdout, stderr: logs.stderr }, { stdout: "hi from /tmp/work\n", stderr: "warn\n" });
    const session = await sbx.process.getSession("s1");
    assert.deepEqual(
      session.commands?.map((c) => c.exitCode),
      [0, 0, 4],
    );
    assert.ok((await sbx.process.listSessions()).some((s) => s.sessionId === "s1"));
  });

  it("an async command is followed live over the WebSocket, takes input, and the follow ends when it does", async () => {
    await sbx.process.createSession("s2");
    const cmd = await sbx.process.executeSessionCommand("s2", {
      command: 'for i in 1 2; do echo tick$i; sleep 0.5; done; echo bad >&2; read line; echo "got:$line"; exit_code=5; (exit $exit_code)',
      runAsync: true,
    });
    assert.ok(cmd.cmdId);
    const out: string[] = [];
    const err: string[] = [];
    let firstAt = 0;
    const started = Date.now();
    const following = sbx.process.getSessionCommandLogs(
      "s2",
      cmd.cmdId!,
      (s) => {
        firstAt ||= Date.now();
        out.push(s);
      },
      (s) => err.push(s),
    );
    // Input once the command waits for it.
    for (let i = 0; i < 100 && !err.join("").includes("bad"); i++) await new Promise((r) => setTimeout(r, 100));
    await sbx.process.sendSessionCommandInput("s2", cmd.cmdId!, "hello");
    await following;
    assert.ok(firstAt - started < 1500, `the first chunk came after ${firstAt - started} ms`);
    const stdout = out.join("");
    assert.match(stdout, /^tick1\ntick2\n/);
    assert.ok(stdout.includes("got:hello"), stdout);
    assert.equal(err.join(""), "bad\n");
    const done = await sbx.process.getSessionCommand("s2", cmd.cmdId!);
    assert.equal(done.exitCode, 5);
    await assert.rejects(sbx.process.sendSessionCommandInput("s2", cmd.cmdId!, "late"), /already completed/);
    await sbx.process.deleteSession("s2");
    await assert.rejects(sbx.process.getSession("s2"), DaytonaNotFoundError);
  });
});

describe("terminals", () => {
  it("createPty runs a shell on a terminal of the size asked, with its envs; resize, info, and the exit code at the end", async () => {
    let out = "";
    const until = async (re: RegExp) => {
      for (let i = 0; i < 150 && !re.test(out); i++) await new Promise((r) => setTimeout(r, 100));
      assert.match(out, re);
    };
    const pty = await sbx.process.createPty({ id: "t1", cols: 100, rows: 30, envs: { HELLO: "from-envs" }, onData: (d) => void (out += new TextDecoder().decode(d)) });
    await pty.sendInput('echo "$HELLO size $(stty size)"\n');
    await until(/from-envs size 30 100/);
    const resized = await sbx.process.resizePtySession("t1", 120, 40);
    assert.deepEqual([resized.cols, resized.rows, resized.active], [120, 40, true]);
    await pty.sendInput("echo now $(stty size)\n");
    await until(/now 40 120/);
    assert.ok((await sbx.process.listPtySessions()).some((s) => s.id === "t1"));
    await pty.sendInput("exit 7\n");
    const r = await pty.wait();
    assert.equal(r.exitCode, 7);
    await pty.disconnect();
    assert.equal((await sbx.process.getPtySessionInfo("t1")).active, false);
  });
});

describe("files", () => {
  it("uploads and downloads text and a 5 MiB binary byte for byte; relative paths are the work directory's", async () => {
    const big = randomBytes(5 * 1024 * 1024);
    await sbx.fs.uploadFiles([
      { source: Buffer.from("hello daytona\n"), destination: "acc/a.txt" },
      { source: big, destination: "/tmp/big.bin" },
    ]);
    assert.equal((await sbx.fs.downloadFile("acc/a.txt")).toString(), "hello daytona\n");
    assert.equal((await sbx.fs.downloadFile("/home/daytona/acc/a.txt")).toString(), "hello daytona\n");
    assert.ok((await sbx.fs.downloadFile("/tmp/big.bin")).equals(big));
    const many = await sbx.fs.downloadFiles([{ source: "acc/a.txt" }, { source: "/nope.txt" }]);
    assert.equal(many[0].result?.toString(), "hello daytona\n");
    assert.match(String(many[1].error), /not found/i);
    await assert.rejects(sbx.fs.downloadFile("/no/such/file"), DaytonaNotFoundError);
    // The owner is the toolbox's user.
    assert.equal((await sbx.process.executeCommand("stat -c %U acc/a.txt")).result, "daytona\n");
  });

  it("lists, details, makes folders, moves, finds, searches, replaces, sets permissions and deletes", async () => {
    await sbx.fs.createFolder("proj/src", "755");
    await sbx.fs.uploadFile(Buffer.from("one TODO here\ntwo\nTODO again\n"), "proj/src/main.py");
    const listed = await sbx.fs.listFiles("proj");
    assert.deepEqual(
      listed.map((f) => [f.name, f.isDir]),
      [["src", true]],
    );
    const deep = await sbx.fs.listFiles("proj", { depth: 2 });
    assert.deepEqual(deep.map((f) => f.name).sort(), ["main.py", "src"]);
    const info = await sbx.fs.getFileDetails("proj/src/main.py");
    assert.equal(info.size, 29);
    assert.equal(info.isDir, false);
    assert.equal(info.mode, "-rw-r--r--");
    await assert.rejects(sbx.fs.getFileDetails("proj/none"), DaytonaNotFoundError);
    const found = await sbx.fs.findFiles("proj", "TODO");
    assert.deepEqual(
      found.map((m) => [m.file, m.line, m.content]),
      [
        ["/home/daytona/proj/src/main.py", 1, "one TODO here"],
        ["/home/daytona/proj/src/main.py", 3, "TODO again"],
      ],
    );
    assert.deepEqual((await sbx.fs.searchFiles("proj", "*.py")).files, ["/home/daytona/proj/src/main.py"]);
    const replaced = await sbx.fs.replaceInFiles(["proj/src/main.py", "proj/missing.py"], "TODO", "DONE");
    assert.deepEqual(
      replaced.map((r) => r.success),
      [true, false],
    );
    assert.equal((await sbx.fs.downloadFile("proj/src/main.py")).toString(), "one DONE here\ntwo\nDONE again\n");
    await sbx.fs.setFilePermissions("proj/src/main.py", { mode: "750" });
    assert.equal((await sbx.fs.getFileDetails("proj/src/main.py")).permissions, "0750");
    await sbx.fs.moveFiles("proj/src/main.py", "proj/app.py");
    assert.deepEqual((await sbx.fs.listFiles("proj")).map((f) => f.name).sort(), ["app.py", "src"]);
    await assert.rejects(sbx.fs.deleteFile("proj"), /directory/);
    await sbx.fs.deleteFile("proj", true);
    await assert.rejects(sbx.fs.getFileDetails("proj"), DaytonaNotFoundError);
  });
});

describe("previews, labels, stop and start", () => {
  it("a preview URL reaches the guest's port with its token, and is refused without it", async () => {
    await sbx.fs.uploadFile(Buffer.from("hi from the preview\n"), "site/hello.txt");
    await sbx.process.createSession("web");
    await sbx.process.executeSessionCommand("web", { command: "cd site && python3 -m http.server 8000 --bind 0.0.0.0 >/dev/null 2>&1", runAsync: true });
    const link = await sbx.getPreviewLink(8000);
    assert.equal(link.url, `${base}/daytona/preview/${sbx.id}/8000`);
    const page = new URL("hello.txt", `${link.url}/`);
    let r: Response | null = null;
    for (let i = 0; i < 100; i++) {
      r = await fetch(page, { headers: { "X-Daytona-Preview-Token": link.token } });
      if (r.status === 200) break;
      await new Promise((res) => setTimeout(res, 100));
    }
    assert.equal(r?.status, 200);
    assert.equal(await r?.text(), "hi from the preview\n");
    const refused = await fetch(page);
    assert.equal(refused.status, 401);
    assert.doesNotMatch(await refused.text(), /hi from the preview/);
    assert.equal((await fetch(page, { headers: { "X-Daytona-Preview-Token": "forged" } })).status, 401);
    // With a preview domain (wildcard DNS pointing here), links are `<port>-<id>.<domain>`, and a request for that Host is the preview.
    const wild = await buildApp({ forge, version: "test", apiKey: API_KEY, daytonaPreviewDomain: "preview.test" });
    const wildBase = await wild.listen({ host: "127.0.0.1", port: 0 });
    try {
      const other = new Daytona({ apiKey: API_KEY, apiUrl: `${wildBase}/daytona`, target: "us" });
      const wildLink = await (await other.get(sbx.id)).getPreviewLink(8000);
      assert.equal(wildLink.url, `http://8000-${sbx.id}.preview.test`);
      const byHost = (token?: string) =>
        new Promise<{ status: number; body: string }>((resolve, reject) => {
          const u = new URL(wildBase);
          const r = httpRequest(
            { host: u.hostname, port: u.port, path: "/hello.txt", headers: { host: `8000-${sbx.id}.preview.test`, ...(token ? { "x-daytona-preview-token": token } : {}) } },
            (res) => {
              let body = "";
              res.on("data", (c) => (body += c));
              res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
            },
          );
          r.on("error", reject);
          r.end();
        });
      assert.deepEqual(await byHost(wildLink.token), { status: 200, body: "hi from the preview\n" });
      assert.equal((await byHost()).status, 401);
    } finally {
      await wild.close();
    }
    await assert.rejects(buildApp({ forge, version: "test", e2bDomain: "same.test", daytonaPreviewDomain: "same.test" }), /must differ from e2b\.domain/);
    // A signed URL needs no header and no path; expiring it early shuts it.
    const signed = await sbx.getSignedPreviewUrl(8000, 120);
    assert.deepEqual([signed.sandboxId, signed.port], [sbx.id, 8000]);
    const su = new URL(signed.url);
    assert.equal(su.pathname, "/");
    const viaSigned = await fetch(`${su.origin}/hello.txt${su.search}`);
    assert.equal(await viaSigned.text(), "hi from the preview\n");
    // A browser that follows a link loses the query: the cookie it was given carries the token.
    const cookie = String(viaSigned.headers.get("set-cookie")).split(";")[0];
    assert.equal((await fetch(`${su.origin}/hello.txt`, { headers: { cookie } })).status, 200);
    assert.equal((await fetch(`${su.origin}/hello.txt`)).status, 401);
    await sbx.expireSignedPreviewUrl(8000, signed.token);
    assert.equal((await fetch(`${su.origin}/hello.txt${su.search}`)).status, 401);
    await assert.rejects(sbx.getSignedPreviewUrl(8000, 10 ** 6), /expiresInSeconds must be 1-86400/);
    await sbx.process.deleteSession("web");
  });

  it("setLabels replaces the labels; stop keeps the disk and start brings the sandbox back with it", async () => {
    await sbx.setLabels({ suite: "daytona", phase: "two", "code-toolbox-language": "python" });
    assert.deepEqual((await daytona.get(sbx.id)).labels, { suite: "daytona", phase: "two", "code-toolbox-language": "python" });
    assert.equal(forge.sandboxes.get(sbx.id).metadata?.["daytona.target"], "us", "the server's own keys survive");
    await sbx.fs.uploadFile(Buffer.from("kept\n"), "keep.txt");
    await sbx.stop();
    assert.equal(sbx.state, "stopped");
    assert.equal(forge.sandboxes.get(sbx.id).state, "stopped");
    await sbx.start();
    assert.equal(sbx.state, "started");
    assert.equal((await sbx.fs.downloadFile("keep.txt")).toString(), "kept\n");
  });

  it("a declarative image without local files is built by our builder, once", async () => {
    // A short one: every build boots a build VM from the base and scans it (~17 s here under TCG).
    const image = Image.base("forgevm/debian:bookworm").env({ BUILT_FOR: "daytona" }).workdir("/srv/app");
    const made = await daytona.create({ image, labels: { suite: "daytona-image" } }, { timeout: 300 });
    try {
      assert.equal((await made.process.executeCommand("echo $BUILT_FOR in $(pwd)")).result, "daytona in /srv/app\n");
      assert.equal(await made.getWorkDir(), "/srv/app");
      assert.match(made.snapshot ?? "", /^forgevm\/daytona-build:[0-9a-f]{16}$/);
      const again = await daytona.create({ image, labels: { suite: "daytona-image" } }, { timeout: 300 });
      assert.equal(again.snapshot, made.snapshot, "the same Dockerfile is the same image, built once");
      await again.delete();
    } finally {
      await made.delete();
    }
    // Local files would need object storage: refused, saying what to do instead.
    const withFiles = await fetch(`${base}/daytona/sandbox`, {
      method: "POST",
      headers: { authorization: `Bearer ${API_KEY}`, "content-type": "application/json" },
      body: JSON.stringify({ buildInfo: { dockerfileContent: "FROM x\nCOPY a /a\n", contextHashes: ["abc"] } }),
    });
    assert.equal(withFiles.status, 400);
    assert.match(((await withFiles.json()) as { message: string }).message, /forgevm build/);
  });

  it("the auto-stop interval is our idle stop, shown back; auto-archive and auto-delete are kept", async () => {
    await sbx.setAutostopInterval(7);
    await sbx.setAutoDeleteInterval(120);
    const again = await daytona.get(sbx.id);
    assert.equal(again.autoStopInterval, 7);
    assert.equal(again.autoDeleteInterval, 120);
    const row = forge.sandboxes.get(sbx.id);
    assert.deepEqual([row.idle_ms, row.idle_action], [7 * 60_000, "stop"]);
    await sbx.setAutostopInterval(0);
    assert.equal((await daytona.get(sbx.id)).autoStopInterval, 0);
    assert.equal(forge.sandboxes.get(sbx.id).idle_ms, null);
    // Bounded as REST's TTL is, at a year, on create and on every interval route.
    await assert.rejects(sbx.setAutostopInterval(999_999_999), /autoStopInterval must be 0 \(off\) or up to 525600 minutes/);
    await assert.rejects(sbx.setAutoDeleteInterval(525_601), /autoDeleteInterval must be -1 \(never\)/);
    await assert.rejects(daytona.create({ autoStopInterval: 999_999_999 }), /autoStopInterval/);
    assert.equal(forge.sandboxes.get(sbx.id).idle_ms, null);
  });

  it("delete ends it: a get is the SDK's not-found error, and our API sees it destroyed", async () => {
    const other = await daytona.create({ labels: { suite: "daytona-delete" } });
    await other.delete();
    await assert.rejects(daytona.get(other.id), DaytonaNotFoundError);
    assert.equal(forge.sandboxes.get(other.id).state, "destroyed");
  });
});

describe("the Daytona guide, and scripts that end", () => {
  it("its snippet runs unchanged with the guide's variables, and a script that leaves its sandbox running exits at once", async () => {
    const readme = await readFile(join(repo, "docs", "daytona.md"), "utf8");
    const m = /<!-- snippet:daytona -->\s*```js\n([\s\S]*?)```/.exec(readme);
    assert.ok(m, "docs/daytona.md has the Daytona snippet");
    const vars = /```sh\n(export DAYTONA_API_URL=[\s\S]*?)```/.exec(readme);
    assert.ok(vars, "docs/daytona.md has the Daytona variables");
    const env: Record<string, string> = {};
    // The guide's address becomes this server's (with the path it names), its placeholder key this server's key.
    for (const [, name, value] of vars[1].matchAll(/^export (DAYTONA_\w+)=(\S+)/gm)) {
      env[name] = /^https?:/.test(value) ? `${base}${new URL(value).pathname}` : name === "DAYTONA_API_KEY" ? API_KEY : value;
    }
    assert.deepEqual(Object.keys(env).sort(), ["DAYTONA_API_KEY", "DAYTONA_API_URL", "DAYTONA_TARGET"]);
    const file = join(repo, `.readme-daytona-${process.pid}.mjs`);
    const leaver = join(repo, `.daytona-leaver-${process.pid}.mjs`);
    await writeFile(file, m[1]);
    // Without socket.io's handshake, this one would keep its process alive for about three minutes.
    await writeFile(leaver, `import { Daytona } from "@daytonaio/sdk";\nconst s = await new Daytona().create({ labels: { suite: "daytona-leaver" } });\nconsole.log(s.id);\n`);
    try {
      const before = new Set(forge.sandboxes.list().map((s) => s.id));
      const { stdout } = await run(process.execPath, [file], { cwd: repo, env: childEnv(env) });
      assert.equal(stdout, "hello from daytona\n42\n");
      assert.deepEqual(
        forge.sandboxes.list().filter((s) => !before.has(s.id)),
        [],
        "the snippet's sandbox is gone",
      );
      const started = Date.now();
      const left = await run(process.execPath, [leaver], { cwd: repo, env: childEnv(env) });
      const tookMs = Date.now() - started;
      await forge.sandboxes.destroy(left.stdout.trim());
      assert.ok(tookMs < 20_000, `the script took ${tookMs} ms`);
    } finally {
      await rm(file, { force: true });
      await rm(leaver, { force: true });
    }
  });
});

describe("one sandbox, every interface", () => {
  it("a sandbox made through our REST API is a Daytona sandbox too, and one made through Daytona answers our API", async () => {
    const hostPort = await freePort();
    const r = await fetch(`${base}/api/v1/sandboxes`, {
      method: "POST",
      headers: { "x-api-key": API_KEY, "content-type": "application/json" },
      body: JSON.stringify({ metadata: { made: "rest" }, ports: [`${hostPort}:8001`] }),
    });
    assert.equal(r.status, 201);
    const { id } = (await r.json()) as { id: string };
    try {
      const viaDaytona = await daytona.get(id);
      assert.equal(viaDaytona.state, "started");
      assert.equal(viaDaytona.labels.made, "rest");
      assert.equal((await viaDaytona.process.executeCommand("echo $((6*7))")).result, "42\n");
      // A published port and a preview URL reach the same server in the guest.
      await viaDaytona.process.executeCommand("mkdir -p /tmp/www && echo same-server > /tmp/www/index.txt && (cd /tmp/www && nohup python3 -m http.server 8001 >/dev/null 2>&1 &)");
      const link = await viaDaytona.getPreviewLink(8001);
      let viaPreview = "";
      for (let i = 0; i < 100 && viaPreview !== "same-server\n"; i++) {
        const p = await fetch(`${link.url}/index.txt`, { headers: { "X-Daytona-Preview-Token": link.token } });
        viaPreview = p.status === 200 ? await p.text() : "";
        if (viaPreview !== "same-server\n") await new Promise((res) => setTimeout(res, 100));
      }
      assert.equal(viaPreview, "same-server\n");
      assert.equal(await (await fetch(`http://127.0.0.1:${hostPort}/index.txt`)).text(), "same-server\n");
      const listed: string[] = [];
      for await (const s of daytona.list({ labels: { made: "rest" } })) listed.push(s.id);
      assert.deepEqual(listed, [id]);
    } finally {
      await forge.sandboxes.destroy(id);
    }
    const ours = await fetch(`${base}/api/v1/sandboxes/${sbx.id}/exec`, {
      method: "POST",
      headers: { "x-api-key": API_KEY, "content-type": "application/json" },
      body: JSON.stringify({ command: "cat /home/daytona/keep.txt" }),
    });
    assert.equal(((await ours.json()) as { stdout: string }).stdout, "kept\n");
  });
});

describe("bad input", () => {
  const call = (method: string, path: string, body?: unknown, headers: Record<string, string> = {}) =>
    fetch(`${base}/daytona${path}`, {
      method,
      headers: { authorization: `Bearer ${API_KEY}`, ...(body !== undefined ? { "content-type": "application/json" } : {}), ...headers },
      body: body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body),
    });

  it("malformed bodies are Daytona-shaped 4xx answers that name the field, never a 500", async () => {
    const cases: [string, string, unknown, RegExp][] = [
      ["POST", "/sandbox", { labels: "x" }, /labels/],
      ["POST", "/sandbox", { env: { A: 1 } }, /env/],
      ["POST", "/sandbox", { snapshot: "no-such-image-here" }, /Snapshot no-such-image-here not found/],
      ["POST", "/sandbox", { volumes: [{ volumeId: "v", mountPath: "/data" }] }, /volumes/],
      ["POST", "/sandbox", "{not json", /JSON|body/i],
      ["PUT", `/sandbox/${sbx.id}/labels`, { labels: ["a"] }, /labels/],
      ["POST", `/toolbox/${sbx.id}/process/execute`, { cmd: "id" }, /command/],
      ["POST", `/toolbox/${sbx.id}/process/execute`, { command: "id", timeout: "5" }, /timeout/],
      ["POST", `/toolbox/${sbx.id}/process/code-run`, { code: "1", language: "cobol" }, /language/],
      ["POST", `/toolbox/${sbx.id}/files/bulk-download`, { paths: "a" }, /paths/],
      ["POST", `/toolbox/${sbx.id}/files/replace`, { files: ["a"] }, /pattern/],
      ["POST", `/toolbox/${sbx.id}/process/session`, { sessionId: "bad id!" }, /sessionId/],
    ];
    for (const [method, path, body, field] of cases) {
      const r = await call(method, path, body);
      const text = await r.text();
      assert.ok(r.status >= 400 && r.status < 500, `${method} ${path} ${JSON.stringify(body)}: ${r.status} ${text}`);
      const json = JSON.parse(text) as { statusCode: number; message: string };
      assert.equal(json.statusCode, r.status);
      assert.match(json.message, field, `${method} ${path}: ${json.message}`);
    }
    // A NUL in an upload's path would name the file short of what the answer says: refused.
    const form = new FormData();
    form.append("files[0].path", "/tmp/nul\0tail.txt");
    form.append("files[0].file", new Blob(["x"]), "x");
    const nul = await fetch(`${base}/daytona/toolbox/${sbx.id}/files/bulk-upload`, { method: "POST", headers: { authorization: `Bearer ${API_KEY}` }, body: form });
    assert.equal(nul.status, 400);
    assert.match(((await nul.json()) as { message: string }).message, /NUL/);
    assert.equal((await sbx.process.executeCommand("ls /tmp/nul* 2>/dev/null | wc -l")).result.trim(), "0");
  });

  it("an upload cut off mid-way leaves no file under its final name", async () => {
    const boundary = "----cutoff0123456789";
    const head = `--${boundary}\r\nContent-Disposition: form-data; name="files[0].path"\r\n\r\n/tmp/cut.bin\r\n--${boundary}\r\nContent-Disposition: form-data; name="files[0].file"; filename="cut.bin"\r\nContent-Type: application/octet-stream\r\n\r\n`;
    const { request } = await import("node:http");
    await new Promise<void>((resolve) => {
      const u = new URL(`${base}/daytona/toolbox/${sbx.id}/files/bulk-upload`);
      const req = request({
        host: u.hostname,
        port: u.port,
        path: u.pathname,
        method: "POST",
        headers: { authorization: `Bearer ${API_KEY}`, "content-type": `multipart/form-data; boundary=${boundary}`, "content-length": "10000000" },
      });
      req.on("error", () => resolve());
      req.on("response", (res) => {
        res.resume();
        res.on("end", resolve);
      });
      req.write(head);
      req.write(randomBytes(256 * 1024), () => setTimeout(() => req.destroy(), 300));
    });
    // The agent writes beside the target and renames at the end: nothing under the name, and no leftover.
    for (let i = 0; i < 20; i++) {
      const ls = await sbx.process.executeCommand("ls -a /tmp | grep -c cut.bin || true");
      if (ls.result.trim() === "0") break;
      await new Promise((r) => setTimeout(r, 200));
    }
    assert.equal((await sbx.process.executeCommand("ls -a /tmp | grep cut.bin || true")).result, "");
  });
});
