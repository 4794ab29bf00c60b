// Pulling from a real registry: Debian's docker-registry on 127.0.0.1, images pushed by skopeo
// from layouts the tests write. Content is checked from inside booted VMs; tampering, an
// unreachable registry and a 401 must fail plainly and leave nothing behind.
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { ForgevmError } from "../../src/http/errors.js";
import type { Forge } from "../../src/index.js";
import { run } from "../../src/util/process.js";
import { fileURLToPath } from "node:url";
import { childEnv, imageLeftovers, openForge, serveForge, testForge, waitFor } from "../helpers.js";
import { pushImage, startRegistry, type LocalRegistry } from "../local-registry.js";
import { writeImage, type ImageSpec, type LayerSpec } from "../oci-writer.js";

let forge: Forge;
let work: string;
let registry: LocalRegistry;
let host: string;
let busybox: Buffer;
const pulled: string[] = [];

function base(marker: string) {
  return {
    entries: [
      { path: "bin/busybox", data: busybox, mode: 0o755 },
      { path: "bin/sh", type: "symlink" as const, linkname: "busybox" },
      { path: "etc/marker", data: marker },
    ],
  };
}

/** Writes an image into a fresh layout and pushes it with skopeo; returns the manifest digest. */
function push(repoTag: string, layers: LayerSpec[], opts: { multiArch?: boolean; config?: ImageSpec["config"] } = {}): Promise<string> {
  return pushImage(registry, work, repoTag, { layers, config: opts.config ?? { Env: ["PATH=/bin"], WorkingDir: "/" } }, opts.multiArch ? { layers: [base("arm64")] } : undefined);
}

/** The file holding a blob in the registry's storage. */
function registryBlob(digest: string): string {
  const hex = digest.slice(7);
  return join(registry.storage, "docker", "registry", "v2", "blobs", "sha256", hex.slice(0, 2), hex, "data");
}

before(async () => {
  forge = await testForge();
  busybox = await readFile("/bin/busybox");
  work = await mkdtemp(join(tmpdir(), "fvm-reg-"));
  registry = await startRegistry(work);
  host = registry.host;
});

after(async () => {
  registry?.stop();
  for (const n of pulled) await forge.images.remove(n).catch(() => {});
  await forge.images.pruneBlobs();
  await rm(work, { recursive: true, force: true });
});

describe("pulling from a registry", () => {
  it("pulls by tag and by digest, and a sandbox runs the image", async () => {
    // gzip base, then a zstd layer with a whiteout, an opaque directory, a hardlink and a setuid file.
    const digest = await push(
      "test/app:v1",
      [
        {
          entries: [
            ...base("amd64").entries,
            { path: "etc/passwd", data: "root:x:0:0::/root:/bin/sh\napp:x:1000:1000::/work:/bin/sh\n" },
            { path: "etc/old", data: "old" },
            { path: "opt/d/a", data: "a" },
          ],
        },
        {
          compression: "zstd",
          entries: [
            { path: "etc/.wh.old", data: "" },
            { path: "opt/d/.wh..wh..opq", data: "" },
            { path: "opt/d/b", data: "b" },
            { path: "work/hello.txt", data: "pulled\n" },
            { path: "work/link.txt", type: "hardlink", linkname: "work/hello.txt" },
            { path: "usr/bin/tool", data: "x", mode: 0o4755 },
          ],
        },
      ],
      { config: { Env: ["PATH=/bin"], WorkingDir: "/work", User: "app" } },
    );
    const img = await forge.images.pull(`${host}/test/app:v1`);
    pulled.push(img.name);
    assert.equal(img.name, `${host}/test/app:v1`);
    assert.equal(img.digest, digest);
    const sb = await forge.sandboxes.spawn({ image: `${host}/test/app:v1`, memoryMb: 256, user: "image" });
    try {
      const check =
        "cat /etc/marker; pwd; cat hello.txt; ls /opt/d; test -e /etc/old || echo old-gone; stat -c %a /usr/bin/tool; [ $(stat -c %i hello.txt) = $(stat -c %i link.txt) ] && echo same-inode; id -u";
      assert.equal((await sb.exec(["sh", "-c", check])).stdout, "amd64/work\npulled\nb\nold-gone\n4755\nsame-inode\n1000\n");
    } finally {
      await sb.destroy();
    }
    const pinned = await forge.images.pull(`${host}/test/app@${digest}`);
    pulled.push(pinned.name);
    assert.equal(pinned.digest, digest);
    // The same through the CLI, as a user would: per-layer progress, then a summary.
    const cli = fileURLToPath(new URL("../../src/cli/main.js", import.meta.url));
    await forge.images.remove(`${host}/test/app:v1`);
    const server = await serveForge(forge);
    try {
      // Through the server that owns the data directory, with its progress lines.
      const out = await run(process.execPath, [cli, "--data-dir", forge.paths.dataDir, "pull", `${host}/test/app:v1`], { env: childEnv() });
      assert.match(out.stdout, new RegExp(`^${host}/test/app:v1\n  digest ${digest}\n`));
      assert.match(out.stderr, /layer 2\/2 [0-9a-f]{12}: already present|layer 2\/2 [0-9a-f]{12}: [0-9.]+ MiB/);
    } finally {
      await server.close();
    }
  });

  it("picks linux/amd64 from a multi-arch index, and spawn pulls what is not local", async () => {
    await push("test/multi:v1", [base("amd64")], { multiArch: true });
    const events: string[] = [];
    const off = forge.events.subscribe((e) => e.type.startsWith("image.") && events.push(e.type));
    const sb = await forge.sandboxes.spawn({ image: `${host}/test/multi:v1`, memoryMb: 256 });
    off();
    pulled.push(`${host}/test/multi:v1`);
    try {
      assert.equal(events[0], "image.pulling");
      assert.equal(events.at(-1), "image.pulled");
      assert.ok(events.includes("image.progress"), "layer progress went out as events");
      assert.equal((await sb.exec(["sh", "-c", "cat /etc/marker"])).stdout, "amd64");
    } finally {
      await sb.destroy();
    }
  });

  it("refuses a tampered blob and a tampered manifest under a digest pin, leaving nothing", async () => {
    const digest = await push("test/tampered:v1", [base("t"), { entries: [{ path: "unique", data: `tamper-${Date.now()}` }] }]);
    const manifest = JSON.parse(await readFile(registryBlob(digest), "utf8"));
    const layerFile = registryBlob(manifest.layers[1].digest);
    const bytes = await readFile(layerFile);
    bytes[bytes.length - 3] ^= 0xff;
    await writeFile(layerFile, bytes);
    await assert.rejects(
      forge.images.pull(`${host}/test/tampered:v1`),
      (e: Error) => e instanceof ForgevmError && e.code === "BAD_REQUEST" && /does not match its digest/.test(e.message),
    );
    assert.equal(existsSync(join(forge.paths.blobsDir, "sha256", manifest.layers[1].digest.slice(7))), false);

    const d2 = await push("test/pinned:v1", [base("p")]);
    const mfile = registryBlob(d2);
    const m = JSON.parse(await readFile(mfile, "utf8"));
    m.annotations = { evil: "yes" };
    await writeFile(mfile, JSON.stringify(m));
    await assert.rejects(forge.images.pull(`${host}/test/pinned@${d2}`), /does not match the pinned digest/);
    await assert.rejects(forge.sandboxes.spawn({ image: `${host}/test/tampered:v1` }), /does not match/);
    assert.deepEqual(await imageLeftovers(forge), []);
  });

  it("says plainly when a registry cannot be reached or an image does not exist", async () => {
    await assert.rejects(
      forge.images.pull("127.0.0.1:1/library/alpine:latest"),
      (e: Error) => e instanceof ForgevmError && e.code === "UNAVAILABLE" && /cannot reach registry 127.0.0.1:1/.test(e.message),
    );
    await assert.rejects(forge.sandboxes.spawn({ image: "127.0.0.1:1/library/alpine:latest" }), /cannot reach registry 127.0.0.1:1/);
    await assert.rejects(forge.images.pull(`${host}/test/none:v1`), (e: Error) => e instanceof ForgevmError && e.code === "NOT_FOUND" && /not found in registry/.test(e.message));
    assert.deepEqual(await imageLeftovers(forge), []);
  });

  it("reports a 401 without credentials, naming where to put them", async () => {
    let tokenAsked = 0;
    const srv: Server = createServer((req, res) => {
      if (req.url?.startsWith("/token")) {
        tokenAsked++;
        res.writeHead(401).end();
        return;
      }
      res.writeHead(401, { "WWW-Authenticate": `Bearer realm="http://${req.headers.host}/token",service="test"` }).end();
    });
    await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
    const port = (srv.address() as AddressInfo).port;
    try {
      await assert.rejects(
        forge.images.pull(`127.0.0.1:${port}/private/app:v1`),
        (e: Error) => e instanceof ForgevmError && e.code === "BAD_REQUEST" && /refused access.*~\/\.docker\/config\.json/.test(e.message),
      );
      assert.equal(tokenAsked, 1);
    } finally {
      srv.close();
    }
  });
});

describe("registry logins and redirects", () => {
  it("uses config credentials, and never sends them to the blob storage a registry redirects to", async () => {
    const layout = await mkdtemp(join(work, "layout-"));
    const desc = await writeImage(layout, { layers: [base("redirected")] });
    const blob = (d: string) => readFile(join(layout, "blobs", "sha256", d.slice(7)));
    const manifest = JSON.parse((await blob(desc.digest)).toString());
    const seen: { registry: string[]; storage: (string | undefined)[] } = { registry: [], storage: [] };
    const storage = createServer(async (req, res) => {
      seen.storage.push(req.headers.authorization);
      res.end(await blob(req.url!.split("/").pop()!));
    });
    await new Promise<void>((r) => storage.listen(0, "127.0.0.1", r));
    const storagePort = (storage.address() as AddressInfo).port;
    const reg = createServer(async (req, res) => {
      const auth = req.headers.authorization;
      seen.registry.push(auth ?? "none");
      if (auth !== `Basic ${Buffer.from("alice:s3cret").toString("base64")}`) {
        res.writeHead(401, { "WWW-Authenticate": 'Basic realm="test"' }).end();
        return;
      }
      if (req.url!.includes("/manifests/")) {
        res.writeHead(200, { "Content-Type": desc.mediaType }).end(await blob(desc.digest));
      } else {
        const digest = req.url!.split("/").pop()!;
        res.writeHead(307, { Location: `http://127.0.0.1:${storagePort}/blob/${digest}` }).end();
      }
    });
    await new Promise<void>((r) => reg.listen(0, "127.0.0.1", r));
    const regHost = `127.0.0.1:${(reg.address() as AddressInfo).port}`;
    const f = await openForge({ reapIntervalMs: 0, registryAuth: { [regHost]: { username: "alice", password: "s3cret" } } });
    try {
      const img = await f.images.pull(`${regHost}/private/app:v1`);
      assert.equal(img.digest, desc.digest);
      await f.images.remove(img.name);
      assert.equal(seen.registry[0], "none", "first try is anonymous");
      assert.ok(seen.registry.slice(1).every((a) => a.startsWith("Basic ")));
      assert.equal(seen.storage.length, 1 + manifest.layers.length, "config and layers came from the storage origin");
      assert.deepEqual(seen.storage.filter(Boolean), [], "no credentials reached the other origin");
    } finally {
      await f.close();
      reg.close();
      storage.close();
    }
  });
});

describe("image routes", () => {
  it("lists, pulls as a job with progress, and deletes", async () => {
    const { buildApp } = await import("../../src/compose/app.js");
    const app = await buildApp({ forge, version: "test" });
    try {
      await push("test/api:v1", [base("api")]);
      const start = await app.inject({ method: "POST", url: "/api/v1/images/pull", payload: { image: `${host}/test/api:v1` } });
      assert.equal(start.statusCode, 202);
      const id = start.json().id;
      let job: any;
      await waitFor(
        async () => {
          job = (await app.inject({ method: "GET", url: `/api/v1/images/pulls/${id}` })).json();
          return job.state !== "running";
        },
        60_000,
        "the pull job",
      );
      assert.equal(job.state, "done", JSON.stringify(job));
      assert.ok(job.progress.some((l: string) => /layer 1\/1/.test(l)));
      const list = (await app.inject({ method: "GET", url: "/api/v1/images" })).json();
      const mine = list.find((i: any) => i.name === `${host}/test/api:v1`);
      assert.equal(mine.in_use, false);
      assert.match(mine.digest, /^sha256:/);
      const del = await app.inject({ method: "DELETE", url: `/api/v1/images/${encodeURIComponent(`${host}/test/api:v1`)}` });
      assert.equal(del.statusCode, 200, del.body);
      assert.equal((await app.inject({ method: "DELETE", url: `/api/v1/images/${encodeURIComponent(`${host}/test/api:v1`)}` })).statusCode, 404);
      const bad = await app.inject({ method: "POST", url: "/api/v1/images/pull", payload: { image: "127.0.0.1:1/x/y:z" } });
      let failed: any;
      await waitFor(
        async () => {
          failed = (await app.inject({ method: "GET", url: `/api/v1/images/pulls/${bad.json().id}` })).json();
          return failed.state !== "running";
        },
        30_000,
        "the failing pull job",
      );
      assert.equal(failed.state, "error");
      assert.match(failed.error, /cannot reach registry 127.0.0.1:1/);
      assert.equal((await app.inject({ method: "GET", url: "/api/v1/images/pulls/pull-nope" })).statusCode, 404);
    } finally {
      await app.close();
    }
  });
});
