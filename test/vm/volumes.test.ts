// Named volumes against real VMs: data written by one sandbox is read by the next, read-only
// mounts are enforced, one writer or many readers at a time, copies that would share a volume
// are refused, a stopped sandbox gets its volume back when it starts, and the CLI verbs.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { after, before, describe, it } from "node:test";
import type { RunningServer } from "../../src/compose/serve.js";
import { apiRequest, assertNoVmLeft, childEnv, startTestServer } from "../helpers.js";

const CLI = fileURLToPath(new URL("../../src/cli/main.js", import.meta.url));
const run = promisify(execFile);
let server: RunningServer;
let base: string;

const api = (method: string, path: string, body?: unknown) => apiRequest(base, method, path, body);
const exec = async (id: string, command: string) => (await api("POST", `/sandboxes/${id}/exec`, { command })).body as { exit_code: number; stdout: string; stderr: string };
const spawn = async (volumes: string[], expect = 201) => {
  const r = await api("POST", "/sandboxes", { volumes });
  assert.equal(r.status, expect, JSON.stringify(r.body));
  return r;
};

before(async () => {
  server = await startTestServer();
  base = server.url;
});

after(async () => {
  await server?.close();
  if (server) await assertNoVmLeft(server.forge);
});

describe("named volumes", () => {
  it("keep a file from one sandbox for the next; read-only is enforced; one writer or many readers", async () => {
    const created = await api("POST", "/volumes", { name: "data", size_mb: 64 });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    assert.equal(created.body.size_mb, 64);
    assert.deepEqual(created.body.mounted_by, []);

    const a = (await spawn(["data:/data"])).body;
    assert.deepEqual(a.volumes, [{ name: "data", path: "/data", read_only: false }]);
    const wrote = await exec(a.id, "echo kept > /data/hello && df -k /data | tail -1 | awk '{print $2}'");
    assert.equal(wrote.exit_code, 0, wrote.stderr);
    assert.ok(Number(wrote.stdout) > 50_000 && Number(wrote.stdout) < 70_000, `a 64 MiB filesystem: ${wrote.stdout}`);

    // While A writes, nobody else may mount it, nor may it be deleted or copied with A.
    for (const v of ["data:/data:ro", "data:/other"]) {
      const r = await spawn([v], 409);
      assert.match(r.body.message, /mounted read-write by sandbox/);
    }
    assert.equal((await api("DELETE", "/volumes/data")).status, 409);
    const fork = await api("POST", `/sandboxes/${a.id}/fork`, {});
    assert.equal(fork.status, 409);
    assert.match(fork.body.message, /volume data/);
    assert.equal((await api("POST", `/sandboxes/${a.id}/snapshot`, {})).status, 409);
    assert.deepEqual((await api("GET", "/volumes/data")).body.mounted_by, [{ sandbox: a.id, path: "/data", read_only: false }]);
    assert.equal((await api("DELETE", `/sandboxes/${a.id}`)).status, 200);

    // Two readers at once; neither can write; a writer must wait for both.
    const b = (await spawn(["data:/data:ro"])).body;
    const c = (await spawn(["data:/srv/in:ro"])).body;
    assert.equal((await exec(b.id, "cat /data/hello")).stdout, "kept\n");
    assert.equal((await exec(c.id, "cat /srv/in/hello")).stdout, "kept\n");
    const denied = await exec(b.id, "echo x > /data/new");
    assert.notEqual(denied.exit_code, 0);
    assert.match(denied.stderr, /Read-only file system/);
    await spawn(["data:/data"], 409);
    for (const s of [b, c]) await api("DELETE", `/sandboxes/${s.id}`);
    assert.equal((await api("DELETE", "/volumes/data")).status, 200);
    assert.equal(existsSync(join(server.forge.paths.dataDir, "volumes", "data.ext4")), false, "its data went with it");
  });

  it("creates a missing volume on first mount, and a stopped sandbox has it again when it starts", async () => {
    const r = await api("POST", "/sandboxes", { volumes: ["auto:/var/lib/app"], main: { command: ["sleep", "infinity"], restart: "no" } });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    const id = r.body.id;
    assert.equal((await api("GET", "/volumes/auto")).body.size_mb, 1024);
    assert.equal((await exec(id, "echo one > /var/lib/app/f")).exit_code, 0);
    assert.equal((await api("POST", `/sandboxes/${id}/stop`, { timeout: "2s" })).status, 200);
    // Stopped, it still holds the volume.
    await spawn(["auto:/x"], 409);
    const started = await api("POST", `/sandboxes/${id}/start`, {});
    assert.equal(started.status, 200, JSON.stringify(started.body));
    const seen = await exec(id, "cat /var/lib/app/f; grep -c ' /var/lib/app ext4' /proc/mounts; echo two >> /var/lib/app/f && cat /var/lib/app/f");
    assert.equal(seen.stdout, "one\n1\none\ntwo\n", seen.stderr);
    await api("DELETE", `/sandboxes/${id}`);
    assert.equal((await api("DELETE", "/volumes/auto")).status, 200);
  });

  it("refuses bad volume requests, naming the field", async () => {
    // A host directory on a server that allows none is refused by the operator's rule.
    const host = await spawn(["/home/user:/x"], 403);
    assert.match(host.body.message, /mounts\.host_dirs/);
    for (const [v, re] of [
      ["data", /NAME:\/path/],
      ["data:relative", /absolute/],
      ["data:/", /cannot mount over \//],
      ["data:/proc/x", /cannot mount over/],
      ["bad name!:/x", /not a volume name/],
      ["data:/x:rx", /NAME:\/path\[:ro\]/],
    ] as const) {
      const r = await spawn([v], 400);
      assert.match(r.body.message, /volumes/);
      assert.match(r.body.message, re);
    }
    assert.equal((await spawn(["d1:/a", "d1:/b"], 400)).body.message.includes("named twice"), true);
    assert.equal((await spawn(["d1:/a", "d2:/a"], 400)).body.message.includes("two volumes at /a"), true);
    assert.equal((await api("POST", "/volumes", { name: "tiny", size_mb: 1 })).status, 400);
    assert.equal((await api("POST", "/volumes", { name: "-bad" })).status, 400);
    assert.equal((await api("POST", "/volumes", { name: "twice", size_mb: 16 })).status, 201);
    assert.equal((await api("POST", "/volumes", { name: "twice", size_mb: 16 })).status, 409);
    assert.equal((await api("GET", "/volumes/nope")).status, 404);
    assert.equal((await api("DELETE", "/volumes/twice")).status, 200);
    assert.deepEqual((await api("GET", "/volumes")).body, [], "refused spawns created no volumes");
  });

  it("the CLI creates, mounts, lists and removes volumes", async () => {
    const cli = (...args: string[]) => run("node", [CLI, "--server", base, ...args], { env: childEnv() });
    await cli("volume", "create", "cli-vol", "--size", "32m");
    const id = (await cli("spawn", "-v", "cli-vol:/mnt/v")).stdout.trim();
    assert.equal((await exec(id, "echo via-cli > /mnt/v/f && cat /mnt/v/f")).stdout, "via-cli\n");
    const list = JSON.parse((await cli("volume", "ls", "--json")).stdout);
    assert.deepEqual(
      list.map((v: { name: string; size_mb: number; mounted_by: unknown[] }) => [v.name, v.size_mb, v.mounted_by.length]),
      [["cli-vol", 32, 1]],
    );
    await assert.rejects(cli("volume", "rm", "cli-vol"), /mounted by/);
    await cli("kill", id);
    await cli("volume", "rm", "cli-vol");
    assert.equal((await cli("volume", "ls")).stdout.trim(), "no volumes");
    await assert.rejects(cli("volume", "create", "x", "--size", "lots"), /--size must be a size/);
  });
});
