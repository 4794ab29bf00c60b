// Uploads that break off, against `forgevm serve` in a process of its own (an error nothing
// handles would end it): every upload route — REST files, archive, image and snapshot import,
// builds; E2B envd's multipart, octet-stream and gzip — gets bodies that are cut short in their
// content (a multipart part without its closing boundary, a tar or gzip stream that stops) and
// bodies whose client goes before sending what it declared. Each content error is a 400; each
// time the server still answers, and no partial file appears under a final name (a file that
// was there keeps what it had).
import assert from "node:assert/strict";
import type { ChildProcess } from "node:child_process";
import { once } from "node:events";
import { readdir, writeFile } from "node:fs/promises";
import { connect } from "node:net";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { gzipSync } from "node:zlib";
import { freePort, removeAtExit, startServerProcess, stopProcess, testDataDir, waitFor } from "../helpers.js";
import { tarOf } from "../tar-writer.js";

const KEY = "uploads-test-key";
let port: number;
let root: string;
let dataDir: string;
let server: ChildProcess;
let sandbox: string;
let envdToken: string;

before(async () => {
  dataDir = await testDataDir();
  port = await freePort();
  root = `http://127.0.0.1:${port}`;
  const configFile = join(dataDir, "forgevm.yaml");
  await writeFile(configFile, `data_dir: ${dataDir}\nserver:\n  port: ${port}\n  request_log: false\n  on_stop: destroy\nauth:\n  api_key: ${KEY}\n`);
  server = await startServerProcess(configFile, `${root}/api/v1`, KEY);
  // Created through E2B's control plane, for the envd access token; the REST routes use the same sandbox.
  const r = await fetch(`${root}/sandboxes`, {
    method: "POST",
    headers: { "x-api-key": KEY, "content-type": "application/json" },
    body: JSON.stringify({ templateID: "base", timeout: 600 }),
  });
  const created = (await r.json()) as { sandboxID: string; envdAccessToken: string };
  assert.equal(r.status, 201, JSON.stringify(created));
  sandbox = created.sandboxID;
  envdToken = created.envdAccessToken;
  await rest("POST", `/sandboxes/${sandbox}/files`, JSON.stringify({ path: "/tmp/up/keep", content: "kept\n" }), { "content-type": "application/json" });
});

after(async () => {
  if (server) await stopProcess(server);
  removeAtExit(dataDir);
});

async function rest(method: string, path: string, body?: string | Buffer, headers: Record<string, string> = {}) {
  const r = await fetch(`${root}/api/v1${path}`, { method, body, headers: { "x-api-key": KEY, ...headers } });
  const text = await r.text();
  return { status: r.status, text, json: text.startsWith("{") || text.startsWith("[") ? JSON.parse(text) : null };
}

const envd = (extra: Record<string, string> = {}) => ({ "e2b-sandbox-id": sandbox, "x-access-token": envdToken, ...extra });

/** Sends a request that declares `declared` bytes of body, sends `sent` of them, and goes. */
async function cutOff(method: string, path: string, headers: Record<string, string>, declared: number, sent: Buffer): Promise<void> {
  const sock = connect(port, "127.0.0.1");
  await once(sock, "connect");
  const head = Object.entries({ host: `127.0.0.1:${port}`, ...headers, "content-length": String(declared) })
    .map(([k, v]) => `${k}: ${v}\r\n`)
    .join("");
  sock.write(`${method} ${path} HTTP/1.1\r\n${head}\r\n`);
  sock.write(sent);
  await sleep(300);
  sock.destroy();
}

/** The server process runs and serves a command in the sandbox. */
async function stillServing(): Promise<void> {
  assert.equal(server.exitCode, null, "the server process is still running");
  const r = await rest("POST", `/sandboxes/${sandbox}/exec`, JSON.stringify({ command: "echo alive" }), { "content-type": "application/json" });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.stdout, "alive\n");
}

/** What /tmp/up holds, hidden files included (a write's temporary file is one). */
async function uploaded(): Promise<string[]> {
  const r = await rest("POST", `/sandboxes/${sandbox}/exec`, JSON.stringify({ command: "ls -A /tmp/up" }), { "content-type": "application/json" });
  return r.json.stdout.split("\n").filter(Boolean);
}

async function onlyKept(): Promise<void> {
  await waitFor(async () => (await uploaded()).join() === "keep", 10_000, "no file but /tmp/up/keep");
  const r = await rest("GET", `/sandboxes/${sandbox}/files?path=/tmp/up/keep`);
  assert.equal(r.text, "kept\n", "an overwrite that broke off left the file as it was");
}

/** Leftovers of uploads in the data directory (an import's or a build's scratch). */
async function scratchLeft(): Promise<string[]> {
  return (await readdir(dataDir)).filter((f) => f.startsWith(".import-") || f.startsWith(".build-context-") || f.startsWith(".snapshot-import"));
}

const tarBytes = tarOf([{ path: "a.txt", data: "x".repeat(5000) }]);
const brokenTar = tarBytes.subarray(0, 1024); // a header and part of the file, no end
const multipartHead = '--XB\r\nContent-Disposition: form-data; name="file"; filename="/tmp/up/keep"\r\n\r\n';

describe("bodies whose content breaks off are 400s, and the server goes on", () => {
  it("E2B envd: a multipart part without its closing boundary", async () => {
    const r = await fetch(`${root}/files`, { method: "POST", headers: envd({ "content-type": "multipart/form-data; boundary=XB" }), body: `${multipartHead}hel` });
    assert.equal(r.status, 400, await r.text());
    await stillServing();
    await onlyKept();
  });

  it("E2B envd: a gzip body that stops, and one that is not gzip", async () => {
    const gz = gzipSync(Buffer.alloc(200_000, 7));
    for (const body of [gz.subarray(0, gz.length - 30), Buffer.from("this is not gzip")]) {
      const r = await fetch(`${root}/files?path=/tmp/up/keep`, { method: "POST", headers: envd({ "content-type": "application/octet-stream", "content-encoding": "gzip" }), body });
      assert.equal(r.status, 400, await r.text());
      await stillServing();
    }
    await onlyKept();
  });

  it("REST: an archive that stops in the middle of a file, and bodies that are not tar at all", async () => {
    const put = (body: string | Buffer | undefined, type?: string, query = "?path=/tmp/up") =>
      rest("PUT", `/sandboxes/${sandbox}/archive${query}`, body, type ? { "content-type": type } : {});
    const cases: [string, Promise<{ status: number; text: string; json: any }>][] = [
      ["a tar that stops", put(brokenTar, "application/x-tar")],
      ["JSON", put('{"a":1}', "application/json")],
      ["text", put("hello", "text/plain")],
      ["an empty body", put(undefined)],
      ["an empty tar body", put(Buffer.alloc(0), "application/x-tar")],
      ["no path", put(tarBytes, "application/x-tar", "")],
      ["two paths", put(tarBytes, "application/x-tar", "?path=/tmp/up&path=/tmp")],
    ];
    for (const [what, p] of cases) {
      const r = await p;
      assert.equal(r.status, 400, `${what}: ${r.text}`);
      assert.equal(r.json.code, "BAD_REQUEST", what);
    }
    // A chunked body of text with the tar content type.
    const chunked = await fetch(`${root}/api/v1/sandboxes/${sandbox}/archive?path=/tmp/up`, {
      method: "PUT",
      headers: { "x-api-key": KEY, "content-type": "application/x-tar" },
      body: new ReadableStream({
        start(c) {
          c.enqueue(new TextEncoder().encode("not a tar ".repeat(100)));
          c.close();
        },
      }),
      duplex: "half",
    } as RequestInit);
    assert.equal(chunked.status, 400, await chunked.text());
    await stillServing();
    await waitFor(async () => !(await uploaded()).some((f) => f.includes("fvm-")), 10_000, "no temporary file");
  });

  it("REST: image and snapshot imports and builds of a tar that stops, or of no tar", async () => {
    for (const path of ["/images/import?name=local/broken", "/snapshots/import", "/builds?tag=local/broken"]) {
      for (const [what, body, type] of [
        ["a tar that stops", brokenTar, "application/x-tar"],
        ["JSON", '{"a":1}', "application/json"],
        ["nothing", undefined, undefined],
      ] as const) {
        const r = await rest("POST", path, body, type ? { "content-type": type } : {});
        assert.ok(r.status >= 400 && r.status < 500, `${path}, ${what}: ${r.status} ${r.text}`);
      }
    }
    // A whole tar that is no image: the answer names the upload, not the server's file for it.
    const notImage = await rest("POST", "/images/import?name=local/not-image", tarBytes, { "content-type": "application/x-tar" });
    assert.equal(notImage.status, 400, notImage.text);
    assert.match(notImage.text, /the uploaded archive is neither a docker save tarball/);
    assert.doesNotMatch(notImage.text, /\.import-|\/tmp\/|forgevm/, notImage.text);
    const q = await rest("POST", "/builds?tag=local/x&memory_mb=abc", tarBytes, { "content-type": "application/x-tar" });
    assert.equal(q.status, 400, q.text);
    assert.match(q.json.message, /memory_mb/);
    await stillServing();
    assert.deepEqual(await scratchLeft(), []);
  });
});

describe("clients that go before their body is sent", () => {
  it("every upload route: the server goes on, and no partial file or scratch is left", async () => {
    const part = Buffer.alloc(40_000, 1);
    const tarType = { "content-type": "application/x-tar", "x-api-key": KEY };
    await cutOff("POST", `/api/v1/sandboxes/${sandbox}/files?path=/tmp/up/keep`, { "content-type": "application/octet-stream", "x-api-key": KEY }, 1_000_000, part);
    await cutOff("POST", `/api/v1/sandboxes/${sandbox}/files?path=/tmp/up/new`, { "content-type": "application/octet-stream", "x-api-key": KEY }, 1_000_000, part);
    await cutOff("PUT", `/api/v1/sandboxes/${sandbox}/archive?path=/tmp/up`, tarType, 1_000_000, tarBytes.subarray(0, 3000));
    await cutOff("POST", "/api/v1/images/import?name=local/cut", tarType, 1_000_000, tarBytes.subarray(0, 3000));
    await cutOff("POST", "/api/v1/snapshots/import", tarType, 1_000_000, tarBytes.subarray(0, 3000));
    await cutOff("POST", "/api/v1/builds?tag=local/cut", tarType, 1_000_000, tarBytes.subarray(0, 3000));
    const e2b = { "e2b-sandbox-id": sandbox, "x-access-token": envdToken };
    await cutOff("POST", "/files", { ...e2b, "content-type": "multipart/form-data; boundary=XB" }, 1_000_000, Buffer.concat([Buffer.from(multipartHead), part]));
    await cutOff("POST", "/files?path=/tmp/up/keep", { ...e2b, "content-type": "application/octet-stream" }, 1_000_000, part);
    await cutOff(
      "POST",
      "/files?path=/tmp/up/keep",
      { ...e2b, "content-type": "application/octet-stream", "content-encoding": "gzip" },
      1_000_000,
      gzipSync(part).subarray(0, 100),
    );
    await stillServing();
    await onlyKept();
    await waitFor(async () => (await scratchLeft()).length === 0, 10_000, "no import or build scratch in the data directory");
  });
});

describe("endless and synthetic files", () => {
  it("a /proc file is streamed whole, and a read of /dev/zero stops when its client goes", async () => {
    const proc = await rest("GET", `/sandboxes/${sandbox}/files?path=/proc/self/status`);
    assert.equal(proc.status, 200);
    assert.match(proc.text, /^Name:/);
    const e2bProc = await fetch(`${root}/files?path=/proc/meminfo&username=root`, { headers: envd() });
    assert.equal(e2bProc.status, 200, await e2bProc.clone().text());
    assert.match(await e2bProc.text(), /MemTotal/);
    for (const [url, headers] of [
      [`${root}/api/v1/sandboxes/${sandbox}/files?path=/dev/zero`, { "x-api-key": KEY }],
      [`${root}/files?path=/dev/zero&username=root`, envd()],
    ] as const) {
      const ac = new AbortController();
      const r = await fetch(url, { headers, signal: ac.signal });
      assert.equal(r.status, 200);
      const reader = r.body!.getReader();
      let got = 0;
      while (got < 3_000_000) got += (await reader.read()).value?.length ?? 0;
      ac.abort();
    }
    // The agent (PID 1) stops reading: what it has read stops growing (a read that went on
    // would add hundreds of MB a second, and keep a core busy until the VM is destroyed).
    const rchar = async () => Number(/rchar: (\d+)/.exec((await rest("GET", `/sandboxes/${sandbox}/files?path=/proc/1/io`)).text)![1]);
    await waitFor(
      async () => {
        const a = await rchar();
        await sleep(1000);
        return (await rchar()) - a < 1_000_000;
      },
      20_000,
      "the agent to stop reading /dev/zero",
    );
    await stillServing();
  });
});
