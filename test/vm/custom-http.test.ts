// The ForgeVM Custom HTTP provider protocol both ways, with real VMs: a server whose `custom`
// provider is another server's /custom-http routes (ours speaking to ours), and the same provider
// against a small backend written here that speaks only the protocol (commands run on this host
// in a directory per sandbox: a stand-in for "any backend", not a sandbox — so the commands this
// test sends it use relative paths only, and nothing it does reaches outside that directory).
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtemp, readdir, readFile, rm, stat, writeFile, mkdir, rename, chmod } from "node:fs/promises";
import { createServer, type IncomingMessage, type Server } from "node:http";
import { tmpdir } from "node:os";
import { dirname, join, resolve as resolvePath } from "node:path";
import { after, before, describe, it } from "node:test";
import { promisify } from "node:util";
import type { RunningServer } from "../../src/compose/serve.js";
import { CustomProvider } from "../../src/providers/custom-http/custom-provider.js";
import { apiRequest, startTestServer } from "../helpers.js";
import { providerContract } from "../provider-contract.js";

const FAR_KEY = "far-custom-key";
const far: RunningServer = await startTestServer((c) => {
  c.auth.api_key = FAR_KEY;
});
const near: RunningServer = await startTestServer((c) => {
  c.providers.custom = { base_url: `${far.url}/custom-http`, api_key: FAR_KEY, timeout: "60s", name: "custom" };
});

// The provider contract every backend meets, on the other server's /custom-http routes.
providerContract("custom", {
  make: (paths) => new CustomProvider({ paths, baseUrl: `${far.url}/custom-http`, apiKey: FAR_KEY, timeoutMs: 60_000, name: "custom" }),
  vmsDir: (paths) => join(paths.dataDir, "custom-http"),
  noVmm: "the backend's VMM is its own",
  foreignHostname: "the protocol has no hostname to give: a backend names its sandboxes itself",
});

// After the contract's own hook, which ends the VMs it made.
after(async () => {
  await near?.close();
  const left = await apiRequest(far.url, "GET", "/sandboxes", undefined, { "X-API-Key": FAR_KEY });
  await far?.close();
  assert.deepEqual(left.body, [], "no sandbox is left on the backend");
});

describe("our custom provider on our own /custom-http routes", () => {
  let id = "";
  before(async () => {
    const sb = await apiRequest(near.url, "POST", "/sandboxes", { provider: "custom" });
    assert.equal(sb.status, 201, JSON.stringify(sb.body));
    id = sb.body.id;
  });
  after(async () => {
    if (id) await apiRequest(near.url, "DELETE", `/sandboxes/${id}`);
  });

  it("is a provider with the backend's address; its sandbox is a sandbox of the backend", async () => {
    const p = await apiRequest(near.url, "GET", "/providers/custom");
    assert.equal(p.status, 200);
    assert.equal(p.body.healthy, true, JSON.stringify(p.body));
    const farList = await apiRequest(far.url, "GET", "/sandboxes", undefined, { "X-API-Key": FAR_KEY });
    assert.equal(farList.body.filter((s: { metadata?: Record<string, string> }) => s.metadata?.forgevm_id === id).length, 1);
  });

  it("runs commands: output, exit code, env and working directory", async () => {
    const r = await apiRequest(near.url, "POST", `/sandboxes/${id}/exec`, {
      command: 'echo "$GREETING from $(pwd)"; echo err >&2; exit 3',
      env: { GREETING: "hi" },
      workdir: "/tmp",
    });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.deepEqual([r.body.exit_code, r.body.stdout, r.body.stderr], [3, "hi from /tmp\n", "err\n"]);
  });

  it("writes, reads, stats, lists, moves, chmods, globs and deletes files", async () => {
    const w = await apiRequest(near.url, "POST", `/sandboxes/${id}/files`, { path: "/work/notes/a.txt", content: "hello custom\n" });
    assert.ok(w.status < 300, JSON.stringify(w.body));
    const read = await fetch(`${near.url}/api/v1/sandboxes/${id}/files?path=/work/notes/a.txt`);
    assert.equal(await read.text(), "hello custom\n");
    const listed = await apiRequest(near.url, "GET", `/sandboxes/${id}/files/list?path=/work/notes`);
    assert.deepEqual(
      listed.body.map((e: { name: string; size: number }) => [e.name, e.size]),
      [["a.txt", 13]],
    );
    const moved = await apiRequest(near.url, "POST", `/sandboxes/${id}/files/move`, { old_path: "/work/notes/a.txt", new_path: "/work/b.txt" });
    assert.ok(moved.status < 300, JSON.stringify(moved.body));
    const ch = await apiRequest(near.url, "POST", `/sandboxes/${id}/files/chmod`, { path: "/work/b.txt", mode: "0750" });
    assert.ok(ch.status < 300, JSON.stringify(ch.body));
    const st = await apiRequest(near.url, "GET", `/sandboxes/${id}/files/stat?path=/work/b.txt`);
    assert.equal(st.body.mode, "750", JSON.stringify(st.body));
    const g = await apiRequest(near.url, "GET", `/sandboxes/${id}/files/glob?pattern=${encodeURIComponent("/work/*.txt")}`);
    assert.deepEqual(g.body, ["/work/b.txt"]);
    const del = await apiRequest(near.url, "DELETE", `/sandboxes/${id}/files?path=/work&recursive=true`);
    assert.ok(del.status < 300, JSON.stringify(del.body));
    assert.equal((await apiRequest(near.url, "GET", `/sandboxes/${id}/files/stat?path=/work`)).status, 404);
  });

  it("refuses by name what the protocol cannot carry: snapshots, a binary file, stdin", async () => {
    const snap = await apiRequest(near.url, "POST", `/sandboxes/${id}/snapshot`, {});
    assert.ok(snap.status >= 400 && snap.status < 500, JSON.stringify(snap.body));
    const bin = await fetch(`${near.url}/api/v1/sandboxes/${id}/files?path=/tmp/x.bin`, {
      method: "POST",
      headers: { "content-type": "application/octet-stream" },
      body: Buffer.from([0xff, 0xfe, 0x00, 0x80]),
    });
    assert.ok(bin.status >= 400 && bin.status < 500);
    assert.match(await bin.text(), /binary file/);
    const stdin = await apiRequest(near.url, "POST", `/sandboxes/${id}/exec`, { command: "cat", stdin: "x" });
    assert.ok(stdin.status >= 400 && stdin.status < 500, JSON.stringify(stdin.body));
    assert.match(JSON.stringify(stdin.body), /stdin/);
  });

  it("a spawn's numbers have the same bounds as on every interface: 4xx naming the field, never a 500 or a 503 that cannot succeed", async () => {
    for (const [field, value] of [
      ["disk_size_mb", 1e308],
      ["memory_mb", 64],
      ["memory_mb", 1e308],
      ["vcpus", 1000],
    ] as const) {
      const r = await fetch(`${far.url}/custom-http/spawn`, {
        method: "POST",
        headers: { "content-type": "application/json", "x-api-key": FAR_KEY },
        body: JSON.stringify({ image: "forgevm/debian:bookworm", [field]: value }),
      });
      const text = await r.text();
      assert.equal(r.status, 400, `${field}=${value}: ${text}`);
      assert.match(text, new RegExp(field));
      assert.doesNotMatch(text, /\/tmp\/|qemu-img/);
    }
    // The same memory bound on our own API.
    const rest = await apiRequest(near.url, "POST", "/sandboxes", { memory_mb: 64 });
    assert.equal(rest.status, 400, JSON.stringify(rest.body));
    assert.match(JSON.stringify(rest.body), /memory_mb/);
  });
});

describe("our custom provider on a backend that speaks only the protocol", () => {
  let backend: Server;
  let root: string;
  const sandboxes = new Map<string, string>();
  let requests: string[] = [];
  let other: RunningServer;
  const run = promisify(execFile);

  before(async () => {
    root = await mkdtemp(join(tmpdir(), "forgevm-custom-backend-"));
    backend = createServer(
      (req, res) =>
        void serve(req).then(
          ({ status, body, raw }) => {
            res.writeHead(status, { "content-type": raw ? "application/octet-stream" : "application/json" });
            res.end(raw ?? JSON.stringify(body));
          },
          (e) => {
            res.writeHead(500, { "content-type": "text/plain" });
            res.end(String(e));
          },
        ),
    );
    await new Promise<void>((r) => backend.listen(0, "127.0.0.1", r));
    const port = (backend.address() as { port: number }).port;
    other = await startTestServer((c) => {
      c.providers.default = "custom";
      c.providers.custom = { base_url: `http://127.0.0.1:${port}`, api_key: "backend-key", timeout: 30, name: "tiny" };
    });
  });
  after(async () => {
    await other?.close();
    await new Promise((r) => backend.close(r));
    assert.deepEqual([...sandboxes.keys()], [], "the backend's sandboxes were destroyed");
    await rm(root, { recursive: true, force: true });
  });

  /** The protocol, as small as it gets: a directory per sandbox, paths inside it. */
  async function serve(req: IncomingMessage): Promise<{ status: number; body?: unknown; raw?: Buffer }> {
    if (req.headers["x-api-key"] !== "backend-key") return { status: 401, body: { error: "bad key" } };
    const u = new URL(req.url ?? "/", "http://x");
    requests.push(`${req.method} ${u.pathname}`);
    let text = "";
    for await (const c of req) text += c;
    const b = text ? (JSON.parse(text) as Record<string, unknown>) : {};
    const dirOf = (id: unknown) => {
      const d = sandboxes.get(String(id));
      if (!d) throw Object.assign(new Error("no such sandbox"), { status: 404 });
      return d;
    };
    const inside = (id: unknown, p: unknown) => resolvePath(dirOf(id), `.${resolvePath("/", String(p))}`);
    // Go-style keys, as the original's Go structs would marshal them: the client must match them without regard to case.
    const info = async (p: string, shown: string) => {
      const s = await stat(p);
      return { Path: shown, Size: s.size, Mode: (s.mode & 0o777).toString(8).padStart(4, "0"), IsDir: s.isDirectory(), ModTime: s.mtime.toISOString() };
    };
    try {
      if (req.method === "GET" && u.pathname === "/health") return { status: 200, body: { ok: true } };
      if (req.method === "POST" && u.pathname === "/spawn") {
        const id = `tiny-${sandboxes.size}-${Date.now()}`;
        sandboxes.set(id, await mkdtemp(join(root, "sb-")));
        return { status: 200, body: { id } };
      }
      if (req.method === "POST" && u.pathname === "/exec") {
        const cwd = b.workdir ? inside(b.sandbox_id, b.workdir) : dirOf(b.sandbox_id);
        const argv = b.args ? [String(b.command), ...(b.args as string[])] : ["/bin/sh", "-c", String(b.command)];
        // A command sees the sandbox's directory as its root only by convention: paths in tests stay relative.
        const r = await run(argv[0], argv.slice(1), { cwd, env: { PATH: process.env.PATH, ...(b.env as Record<string, string>) } }).then(
          (x) => ({ code: 0, stdout: x.stdout, stderr: x.stderr }),
          (e: { code?: number; stdout?: string; stderr?: string }) => ({ code: typeof e.code === "number" ? e.code : 127, stdout: e.stdout ?? "", stderr: e.stderr ?? "" }),
        );
        return { status: 200, body: { exit_code: r.code, stdout: r.stdout, stderr: r.stderr } };
      }
      if (u.pathname === "/files" && req.method === "POST") {
        await mkdir(dirname(inside(b.sandbox_id, b.path)), { recursive: true });
        await writeFile(inside(b.sandbox_id, b.path), String(b.content));
        if (b.mode) await chmod(inside(b.sandbox_id, b.path), Number.parseInt(String(b.mode), 8));
        return { status: 200, body: {} };
      }
      if (u.pathname === "/files" && req.method === "GET") return { status: 200, raw: await readFile(inside(u.searchParams.get("sandbox_id"), u.searchParams.get("path"))) };
      if (u.pathname === "/files" && req.method === "DELETE") {
        await rm(inside(b.sandbox_id, b.path), { recursive: !!b.recursive });
        return { status: 200, body: {} };
      }
      if (u.pathname === "/files/stat")
        return { status: 200, body: await info(inside(u.searchParams.get("sandbox_id"), u.searchParams.get("path")), String(u.searchParams.get("path"))) };
      if (u.pathname === "/files/list") {
        const dir = String(u.searchParams.get("path"));
        const full = inside(u.searchParams.get("sandbox_id"), dir);
        return { status: 200, body: await Promise.all((await readdir(full)).map((n) => info(join(full, n), join(dir, n)))) };
      }
      if (u.pathname === "/files/move") {
        await rename(inside(b.sandbox_id, b.old_path), inside(b.sandbox_id, b.new_path));
        return { status: 200, body: {} };
      }
      if (u.pathname === "/files/chmod") {
        await chmod(inside(b.sandbox_id, b.path), Number.parseInt(String(b.mode), 8));
        return { status: 200, body: {} };
      }
      if (u.pathname === "/files/glob") return { status: 200, body: [] };
      const st = /^\/status\/(.+)$/.exec(u.pathname);
      if (st) return sandboxes.has(st[1]) ? { status: 200, body: { ID: st[1], State: "running" } } : { status: 404, body: { error: "gone" } };
      const del = /^\/sandboxes\/(.+)$/.exec(u.pathname);
      if (del && req.method === "DELETE") {
        await rm(dirOf(del[1]), { recursive: true, force: true });
        sandboxes.delete(del[1]);
        return { status: 200, body: {} };
      }
      return { status: 404, body: { error: `no ${req.method} ${u.pathname}` } };
    } catch (e) {
      const err = e as { status?: number; code?: string; message: string };
      return { status: err.status ?? (err.code === "ENOENT" ? 404 : 400), body: { error: err.message } };
    }
  }

  it("spawns on it by default, runs commands and moves files with its routes; destroy removes its sandbox", async () => {
    requests = [];
    const sb = await apiRequest(other.url, "POST", "/sandboxes", {});
    assert.equal(sb.status, 201, JSON.stringify(sb.body));
    assert.equal(sb.body.provider, "tiny");
    assert.equal(sandboxes.size, 1);
    const r = await apiRequest(other.url, "POST", `/sandboxes/${sb.body.id}/exec`, { command: "echo made here > note.txt && cat note.txt && exit 2" });
    assert.deepEqual([r.body.exit_code, r.body.stdout], [2, "made here\n"]);
    const w = await apiRequest(other.url, "POST", `/sandboxes/${sb.body.id}/files`, { path: "/dir/x.txt", content: "via the protocol\n" });
    assert.ok(w.status < 300, JSON.stringify(w.body));
    assert.equal(await readFile(join([...sandboxes.values()][0], "dir", "x.txt"), "utf8"), "via the protocol\n");
    const listed = await apiRequest(other.url, "GET", `/sandboxes/${sb.body.id}/files/list?path=/dir`);
    assert.deepEqual(
      listed.body.map((e: { name: string; size: number; is_dir: boolean }) => [e.name, e.size, e.is_dir]),
      [["x.txt", 17, false]],
    );
    const read = await fetch(`${other.url}/api/v1/sandboxes/${sb.body.id}/files?path=/dir/x.txt`);
    assert.equal(await read.text(), "via the protocol\n");
    await mkdir(join([...sandboxes.values()][0], "sub"));
    assert.equal((await apiRequest(other.url, "GET", `/sandboxes/${sb.body.id}/files/stat?path=/sub`)).body.is_dir, true);
    await apiRequest(other.url, "DELETE", `/sandboxes/${sb.body.id}`);
    assert.equal(sandboxes.size, 0);
    // Each route as such ("GET /files" is the read, not a prefix of the list); the destroy names its sandbox.
    for (const route of ["POST /spawn", "POST /exec", "POST /files", "GET /files/list", "GET /files", "GET /files/stat"])
      assert.ok(requests.includes(route), `the backend got ${route}`);
    assert.ok(
      requests.some((r) => /^DELETE \/sandboxes\/tiny-/.test(r)),
      "the backend got DELETE /sandboxes/{id}",
    );
  });
});
