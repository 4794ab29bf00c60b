// The egress proxy's package cache: a real pip (Debian's wheel) in two sandboxes downloads a
// package from a local index; the second download is answered from the host's cache, while index
// pages always go upstream and a sandbox without the cache fetches for itself. Also the cache's
// rules (what may be kept, the byte budget) on their own.
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { execFile } from "node:child_process";
import { mkdtemp, readdir, readFile } from "node:fs/promises";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { after, before, describe, it } from "node:test";
import type { Forge } from "../../src/index.js";
import { cacheable, PackageCache, storable } from "../../src/net/package-cache.js";
import { assertNoVmLeft, openForge, removeAtExit } from "../helpers.js";

const run = promisify(execFile);
const INDEX = "pypi.test";
const WHEEL = "demo_pkg-1.0-py3-none-any.whl";
let forge: Forge;
let server: Server;
let port: number;
let wheel: Buffer;
let pipWheel: Buffer;
const hits = { index: 0, wheel: 0 };

before(async () => {
  const work = await mkdtemp(join(tmpdir(), "fvt-pkgcache-"));
  removeAtExit(work);
  // A real wheel: a zip with the package and its dist-info, made by the host's Python.
  const script = `
import zipfile, sys
with zipfile.ZipFile(sys.argv[1], "w") as z:
    z.writestr("demo_pkg/__init__.py", "VALUE = 42\\n")
    z.writestr("demo_pkg-1.0.dist-info/METADATA", "Metadata-Version: 2.1\\nName: demo-pkg\\nVersion: 1.0\\n")
    z.writestr("demo_pkg-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\\nGenerator: test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n")
    z.writestr("demo_pkg-1.0.dist-info/RECORD", "")
`;
  await run("python3", ["-c", script, join(work, WHEEL)]);
  wheel = await readFile(join(work, WHEEL));
  const wheels = await readdir("/usr/share/python-wheels");
  pipWheel = await readFile(join("/usr/share/python-wheels", wheels.find((w) => w.startsWith("pip-"))!));
  const sha = createHash("sha256").update(wheel).digest("hex");
  server = createServer((req, res) => {
    if (req.url === "/simple/demo-pkg/") {
      hits.index++;
      res.setHeader("content-type", "text/html");
      return res.end(`<html><body><a href="/packages/${WHEEL}#sha256=${sha}">${WHEEL}</a></body></html>`);
    }
    if (req.url === `/packages/${WHEEL}`) {
      hits.wheel++;
      res.setHeader("content-type", "application/octet-stream");
      return res.end(wheel);
    }
    res.statusCode = 404;
    res.end("not here");
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  port = (server.address() as AddressInfo).port;
  forge = await openForge({ network: { hostsOverride: { [INDEX]: "127.0.0.1" }, cacheMaxMb: 64 } });
});

after(async () => {
  server?.close();
  if (forge) {
    await forge.close();
    await assertNoVmLeft(forge);
  }
});

/** pip download of demo-pkg in a new sandbox; returns the sandbox's egress log. */
async function pipDownload(cache: boolean) {
  const sb = await forge.sandboxes.spawn({ network: "allowlist", allow: [`${INDEX}:${port}`], cache });
  try {
    await sb.writeFile("/tmp/pip.whl", pipWheel);
    const r = await sb.exec(
      `python3 /tmp/pip.whl/pip download --no-deps --no-cache-dir --disable-pip-version-check --trusted-host ${INDEX} --index-url http://${INDEX}:${port}/simple/ demo-pkg -d /tmp/dl && sha256sum /tmp/dl/${WHEEL}`,
      { timeoutMs: 120_000 },
    );
    assert.equal(r.exitCode, 0, r.stderr);
    assert.equal(r.stdout.trim().split("\n").at(-1)?.split(" ")[0], createHash("sha256").update(wheel).digest("hex"));
    return await forge.network.egressLog(sb.id, 50);
  } finally {
    await sb.destroy();
  }
}

describe("the package cache", () => {
  it("answers a second sandbox's pip download from the host, while index pages go upstream", async () => {
    const first = await pipDownload(true);
    assert.deepEqual(hits, { index: 1, wheel: 1 });
    assert.ok(
      first.some((e) => e.cache === "miss"),
      JSON.stringify(first),
    );
    const second = await pipDownload(true);
    assert.deepEqual(hits, { index: 2, wheel: 1 }, "the wheel came from the cache");
    const hit = second.find((e) => e.cache === "hit");
    assert.ok(hit, JSON.stringify(second));
    assert.equal(hit.decision, "allow");
    assert.equal(hit.host, INDEX);
    // Without the cache the sandbox fetches for itself (plain urllib through the same proxy).
    const sb = await forge.sandboxes.spawn({ network: "allowlist", allow: [`${INDEX}:${port}`], cache: false });
    try {
      const r = await sb.exec(`python3 -c "import urllib.request; print(len(urllib.request.urlopen('http://${INDEX}:${port}/packages/${WHEEL}').read()))"`);
      assert.equal(r.stdout.trim(), String(wheel.length), r.stderr);
    } finally {
      await sb.destroy();
    }
    assert.deepEqual(hits, { index: 2, wheel: 2 });
  });

  it("refuses the cache for a sandbox without an allowlist", async () => {
    await assert.rejects(forge.sandboxes.spawn({ network: "none", cache: true }), /cache needs network "allowlist"/);
  });
});

describe("cache rules", () => {
  const h = (o: Record<string, string> = {}) => new Map(Object.entries(o));
  it("keeps versioned package files only, and only whole, shareable responses", () => {
    assert.equal(cacheable("GET", new URL("http://x/packages/a-1.0-py3-none-any.whl"), h()), true);
    assert.equal(cacheable("GET", new URL("http://x/pool/main/b/bash_5.2.deb"), h()), true);
    assert.equal(cacheable("GET", new URL("http://x/-/left-pad-1.3.0.tgz"), h()), true);
    assert.equal(cacheable("GET", new URL("http://x/simple/a/"), h()), false, "an index page changes");
    assert.equal(cacheable("HEAD", new URL("http://x/a.whl"), h()), false);
    assert.equal(cacheable("GET", new URL("http://x/a.whl"), h({ range: "bytes=0-1" })), false);
    assert.equal(cacheable("GET", new URL("http://x/a.whl"), h({ authorization: "Basic x" })), false);
    assert.equal(storable(200, {}), true);
    assert.equal(storable(206, {}), false);
    assert.equal(storable(200, { "cache-control": "no-store" }), false);
    assert.equal(storable(200, { "cache-control": "private, max-age=0" }), false);
  });

  it("stays within its budget, dropping the least recently used first, and drops short bodies", async () => {
    const dir = await mkdtemp(join(tmpdir(), "fvt-pkgcache-unit-"));
    removeAtExit(dir);
    const cache = new PackageCache(dir, 4096);
    const put = async (url: string, n: number, expected = n) => {
      const w = (await cache.store(url, "application/octet-stream", expected))!;
      w.write(Buffer.alloc(n, 1));
      await w.commit();
    };
    await put("http://x/a.whl", 1000);
    await put("http://x/b.whl", 1000);
    await put("http://x/c.whl", 1000);
    assert.ok(await cache.lookup("http://x/a.whl")); // a is now the most recently used
    await put("http://x/d.whl", 1000);
    await put("http://x/e.whl", 1000);
    assert.equal((await cache.stats()).bytes <= 4096, true);
    assert.equal(await cache.lookup("http://x/b.whl"), null, "the least recently used went first");
    assert.ok(await cache.lookup("http://x/a.whl"));
    assert.ok(await cache.lookup("http://x/e.whl"));
    await put("http://x/short.whl", 10, 20);
    assert.equal(await cache.lookup("http://x/short.whl"), null, "a body shorter than its length is not kept");
    assert.equal(await cache.store("http://x/huge.whl", "x", 10_000), null, "one file may not take the whole budget");
    // A new cache on the same directory finds what was kept.
    const again = new PackageCache(dir, 4096);
    assert.ok(await again.lookup("http://x/e.whl"));
    assert.deepEqual(
      (await readdir(dir)).filter((f) => f.startsWith(".")),
      [],
      "no partial files",
    );
  });
});
