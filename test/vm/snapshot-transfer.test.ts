// Snapshots moved between hosts: two servers with their own data directories stand in for two
// machines. A running sandbox's snapshot is exported from one and imported into the other, where
// a restore has its files and its processes; an archive that would read the host's files, or
// was saved by another VMM, is refused.
import assert from "node:assert/strict";
import { execFile, execFileSync } from "node:child_process";
import { mkdtemp, readFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { after, before, describe, it } from "node:test";
import type { RunningServer } from "../../src/compose/serve.js";
import { TAR_END, tarHeader, tarPadding } from "../../src/util/tar-write.js";
import { apiRequest, assertNoVmLeft, childEnv, removeAtExit, startTestServer } from "../helpers.js";

const CLI = fileURLToPath(new URL("../../src/cli/main.js", import.meta.url));
const run = promisify(execFile);
let a: RunningServer;
let b: RunningServer;
let work: string;

before(async () => {
  // b lists exactly what was imported into it: no base snapshot of its own.
  [a, b] = await Promise.all([startTestServer(), startTestServer(undefined, undefined, { sharedBases: false })]);
  work = await mkdtemp(join(tmpdir(), "fvt-snapmove-"));
  removeAtExit(work);
});

after(async () => {
  for (const s of [a, b]) {
    await s?.close();
    if (s) await assertNoVmLeft(s.forge);
  }
});

const importTo = (s: RunningServer, body: Uint8Array, name?: string) =>
  fetch(`${s.url}/api/v1/snapshots/import${name ? `?name=${name}` : ""}`, { method: "POST", headers: { "content-type": "application/x-tar" }, body }).then(async (r) => ({
    status: r.status,
    body: (await r.json()) as any,
  }));

function tarOf(files: Record<string, Buffer>): Buffer {
  return Buffer.concat([
    ...Object.entries(files).flatMap(([name, data]) => [tarHeader({ path: name, type: "file", mode: 0o600, size: data.length }), data, tarPadding(data.length)]),
    TAR_END,
  ]);
}

describe("snapshot export and import", () => {
  let archive: Buffer;

  it("moves a running sandbox's snapshot to another host: its files and its processes", async () => {
    const sb = await apiRequest(a.url, "POST", "/sandboxes", {});
    assert.equal(sb.status, 201);
    const id = sb.body.id;
    const prep = await apiRequest(a.url, "POST", `/sandboxes/${id}/exec`, { command: "echo moved-here > /root/note; (sleep 1000 & echo $! > /root/pid)" });
    assert.equal(prep.body.exit_code, 0, prep.body.stderr);
    assert.equal((await apiRequest(a.url, "POST", `/sandboxes/${id}/snapshot`, { name: "moving" })).status, 201);
    await apiRequest(a.url, "DELETE", `/sandboxes/${id}`);

    const file = join(work, "moving.tar");
    await run("node", [CLI, "--server", a.url, "snapshot", "export", "moving", "-o", file], { env: childEnv() });
    archive = await readFile(file);
    const imported = JSON.parse((await run("node", [CLI, "--server", b.url, "snapshot", "import", file, "--name", "moved", "--json"], { env: childEnv() })).stdout);
    assert.equal(imported.name, "moved");
    assert.equal(imported.kind, "sandbox");

    const restored = await apiRequest(b.url, "POST", "/snapshots/moved/spawn", {});
    assert.equal(restored.status, 201, JSON.stringify(restored.body));
    const child = restored.body.sandboxes[0].id;
    const seen = await apiRequest(b.url, "POST", `/sandboxes/${child}/exec`, { command: "cat /root/note; kill -0 $(cat /root/pid) && echo alive" });
    assert.equal(seen.body.stdout, "moved-here\nalive\n", seen.body.stderr);
    await apiRequest(b.url, "DELETE", `/sandboxes/${child}`);
    assert.equal((await importTo(b, archive, "moved")).status, 409, "the name is taken");
  });

  it("refuses archives it cannot restore safely, saying why", async () => {
    const garbage = await importTo(b, Buffer.from("not a tar at all"));
    assert.equal(garbage.status, 400);
    const bare = await importTo(b, tarOf({ state: Buffer.from("x") }));
    assert.equal(bare.status, 400);
    assert.match(bare.body.message, /snapshot\.json/);
    const desc = JSON.parse(execFileSync("tar", ["-xOf", "-", "snapshot.json"], { input: archive }).toString());
    // A disk that reads a host file through its backing file.
    const evil = join(work, "evil.qcow2");
    await run("qemu-img", ["create", "-q", "-f", "qcow2", "-b", "/etc/passwd", "-F", "raw", evil]);
    const backed = await importTo(b, tarOf({ "snapshot.json": Buffer.from(JSON.stringify(desc)), state: Buffer.from("x"), "disk.qcow2": await readFile(evil) }), "evil");
    assert.equal(backed.status, 400);
    assert.match(backed.body.message, /standalone/);
    // Memory saved by another VMM.
    const other = await importTo(
      b,
      tarOf({ "snapshot.json": Buffer.from(JSON.stringify({ ...desc, machine: "qemu-9.9|kvm" })), state: Buffer.from("x"), "disk.qcow2": Buffer.from("x") }),
      "other",
    );
    assert.equal(other.status, 409);
    assert.match(other.body.message, /another VMM build or accelerator/);
    assert.deepEqual(
      ((await apiRequest(b.url, "GET", "/snapshots")).body as { name: string }[]).map((s) => s.name),
      ["moved"],
      "nothing half-imported is left",
    );
  });
});
