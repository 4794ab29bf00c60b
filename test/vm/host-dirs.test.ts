// Host directories in sandboxes, against real VMs: a host change is seen live in the guest and a
// guest change on the host; set-id bits, device nodes and FIFOs do not reach the host; links are
// resolved in the guest, never followed on the host; read-only is enforced; a running sandbox
// gets one mounted and unmounted live, and again after a stop and start; only directories the
// operator allows can be mounted. The FUSE server is also fed hostile requests directly.
import assert from "node:assert/strict";
import { lstat, mkdir, mkdtemp, readFile, stat, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PassThrough } from "node:stream";
import { after, before, describe, it } from "node:test";
import type { RunningServer } from "../../src/compose/serve.js";
import { serveShare } from "../../src/fuse/server.js";
import { apiRequest, assertNoVmLeft, removeAtExit, startTestServer, waitFor } from "../helpers.js";

let server: RunningServer;
let base: string;
let allowed: string;
let proj: string;
let outside: string;

const api = (method: string, path: string, body?: unknown) => apiRequest(base, method, path, body);
const exec = async (id: string, command: string) => (await api("POST", `/sandboxes/${id}/exec`, { command })).body as { exit_code: number; stdout: string; stderr: string };

before(async () => {
  const work = await mkdtemp(join(tmpdir(), "fvt-hostdirs-"));
  removeAtExit(work);
  allowed = join(work, "allowed");
  proj = join(allowed, "proj");
  outside = join(work, "outside");
  await mkdir(proj, { recursive: true });
  await mkdir(outside);
  await writeFile(join(proj, "hello"), "from the host\n");
  await writeFile(join(outside, "secret"), "host-only secret\n");
  // A link the host made, pointing out of the share.
  await symlink(outside, join(proj, "escape"));
  server = await startTestServer((c) => {
    c.mounts.host_dirs = [allowed];
  });
  base = server.url;
});

after(async () => {
  await server?.close();
  if (server) await assertNoVmLeft(server.forge);
});

describe("host directories", () => {
  it("are live both ways, and nothing the guest does reaches past them", async () => {
    const r = await api("POST", "/sandboxes", { volumes: [`${proj}:/work`] });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    const id = r.body.id;
    assert.deepEqual(r.body.host_dirs, [{ host: proj, path: "/work", read_only: false }]);
    assert.equal((await exec(id, "cat /work/hello")).stdout, "from the host\n");

    // The host changes a file and adds one: the guest sees both.
    await writeFile(join(proj, "hello"), "changed on the host\n");
    await writeFile(join(proj, "new"), "new on the host\n");
    await waitFor(async () => (await exec(id, "cat /work/hello /work/new")).stdout === "changed on the host\nnew on the host\n", 10_000, "the host's change in the guest");

    // The guest writes: the host has it, without set-id bits.
    const w = await exec(id, "echo from-guest > /work/g.txt && chmod 6755 /work/g.txt && mkdir -p /work/sub/dir && echo deep > /work/sub/dir/f");
    assert.equal(w.exit_code, 0, w.stderr);
    assert.equal(await readFile(join(proj, "g.txt"), "utf8"), "from-guest\n");
    assert.equal((await stat(join(proj, "g.txt"))).mode & 0o7777, 0o755, "no set-id bits on the host");
    assert.equal(await readFile(join(proj, "sub/dir/f"), "utf8"), "deep\n");

    // No device nodes, FIFOs or owner changes; links resolve in the guest only.
    const refused = await exec(id, "mknod /work/null c 1 3; echo $?; mkfifo /work/fifo; echo $?; chown 1000 /work/g.txt; echo $?");
    assert.deepEqual(refused.stdout.trim().split("\n"), ["1", "1", "1"], refused.stderr);
    await assert.rejects(lstat(join(proj, "null")));
    const links = await exec(id, "cat /work/escape/secret 2>&1; ln -s /etc/hostname /work/mine && cat /work/mine");
    assert.doesNotMatch(links.stdout, /host-only secret/, "the host's link is not followed on the host");
    assert.match(links.stdout, new RegExp(`${id}\\n$`), "a link the guest made resolves in the guest (its own hostname)");
    assert.equal((await lstat(join(proj, "mine"))).isSymbolicLink(), true);
    const dots = await exec(id, "cat /work/../etc/hostname; ls /work/.. | head -1");
    assert.equal(dots.exit_code, 0);
    assert.equal(dots.stdout.split("\n")[0], id, ".. is the guest's own parent directory");
    await api("DELETE", `/sandboxes/${id}`);
  });

  it("enforces read-only, mounts and unmounts live, and mounts again after a stop and start", async () => {
    const r = await api("POST", "/sandboxes", { volumes: [`${proj}:/ro:ro`], main: { command: ["sleep", "infinity"] } });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    const id = r.body.id;
    const denied = await exec(id, "echo x > /ro/nope");
    assert.notEqual(denied.exit_code, 0);
    assert.match(denied.stderr, /Read-only file system/);

    const live = await api("POST", `/sandboxes/${id}/mounts`, { host: join(allowed, "proj"), path: "/mnt/live" });
    assert.equal(live.status, 201, JSON.stringify(live.body));
    assert.equal((await exec(id, "cat /mnt/live/hello")).stdout, "changed on the host\n");
    assert.equal((await api("POST", `/sandboxes/${id}/mounts`, { host: proj, path: "/mnt/live" })).status, 409, "one mount per path");

    assert.equal((await api("POST", `/sandboxes/${id}/stop`, { timeout: "2s" })).status, 200);
    assert.equal((await api("POST", `/sandboxes/${id}/start`, {})).status, 200);
    assert.equal((await exec(id, "cat /ro/hello /mnt/live/new")).stdout, "changed on the host\nnew on the host\n", "both are there again");

    const gone = await api("DELETE", `/sandboxes/${id}/mounts?path=/mnt/live`);
    assert.equal(gone.status, 200, JSON.stringify(gone.body));
    assert.deepEqual(
      gone.body.map((m: { path: string }) => m.path),
      ["/ro"],
    );
    assert.equal((await exec(id, "grep -c /mnt/live /proc/mounts")).stdout.trim(), "0");
    assert.equal((await api("DELETE", `/sandboxes/${id}/mounts?path=/mnt/live`)).status, 404);
    await api("DELETE", `/sandboxes/${id}`);
  });

  it("mounts only what the operator allows", async () => {
    const out = await api("POST", "/sandboxes", { volumes: [`${outside}:/x`] });
    assert.equal(out.status, 403);
    assert.match(out.body.message, /mounts\.host_dirs/);
    const through = await api("POST", "/sandboxes", { volumes: [`${join(proj, "escape")}:/x`] });
    assert.equal(through.status, 403, "a link inside the allowed directory that leads out is resolved first");
    assert.equal((await api("POST", "/sandboxes", { volumes: [`${join(allowed, "missing")}:/x`] })).status, 400);
    assert.equal((await api("POST", "/sandboxes", { volumes: [`${proj}:/proc`] })).status, 400);
  });
});

/** One FUSE request: header (40 bytes) and argument. */
function request(opcode: number, unique: number, nodeid: number, arg: Buffer): Buffer {
  const h = Buffer.alloc(40);
  h.writeUInt32LE(40 + arg.length, 0);
  h.writeUInt32LE(opcode, 4);
  h.writeBigUInt64LE(BigInt(unique), 8);
  h.writeBigUInt64LE(BigInt(nodeid), 16);
  return Buffer.concat([h, arg]);
}

describe("the FUSE server on its own", () => {
  it("refuses names that climb out and paths through links, and answers every request", async () => {
    const requests = new PassThrough();
    const replies = new PassThrough();
    const done = serveShare(requests, replies, { root: proj, readOnly: false });
    const got: Buffer[] = [];
    replies.on("data", (c: Buffer) => got.push(c));
    const name = (s: string) => Buffer.from(`${s}\0`);
    requests.write(request(1, 1, 1, name(".."))); // LOOKUP ..
    requests.write(request(1, 2, 1, name("a/b"))); // LOOKUP with a slash
    requests.write(request(1, 3, 1, name("escape"))); // LOOKUP of the link itself: fine, it is a link
    requests.write(request(1, 4, 1, Buffer.from("no terminator"))); // a name without its NUL
    requests.write(request(999, 5, 1, Buffer.alloc(0))); // an unknown operation
    requests.write(request(3, 6, 12345, Buffer.alloc(16))); // GETATTR of a node never looked up
    requests.write(request(1, 7, 2, name("secret"))); // through the link (node 2, from request 3): never followed
    requests.end();
    await done;
    const replies_ = Buffer.concat(got);
    const out: [number, number][] = [];
    for (let off = 0; off < replies_.length; ) {
      const len = replies_.readUInt32LE(off);
      out.push([Number(replies_.readBigUInt64LE(off + 8)), replies_.readInt32LE(off + 4)]);
      off += len;
    }
    assert.deepEqual(out, [
      [1, -22],
      [2, -22],
      [3, 0],
      [4, -22],
      [5, -38],
      [6, -2],
      [7, -40],
    ]);
  });
});
