// Images made from sandboxes and sent elsewhere, against real VMs and Debian's docker-registry:
// commit (one layer on top of the image, with whiteouts, links, devices and config changes; a
// squashed one), export to an OCI archive that skopeo reads and that imports again with the same
// digest, push to a registry (uploaded, then mounted, then found) and a pull that gives the same
// digest, the CLI verbs, and the errors.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { createWriteStream } from "node:fs";
import { mkdtemp, readdir, readFile, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { after, before, describe, it } from "node:test";
import type { RunningServer } from "../../src/compose/serve.js";
import { apiRequest, assertNoVmLeft, childEnv, removeAtExit, startTestServer, waitFor } from "../helpers.js";
import { startRegistry, type LocalRegistry } from "../local-registry.js";
import { writeBusyboxImage } from "../oci-writer.js";

const CLI = fileURLToPath(new URL("../../src/cli/main.js", import.meta.url));
const run = promisify(execFile);
const BUSYBOX = "local/bb:v1";
let server: RunningServer;
let base: string;
let registry: LocalRegistry;
let work: string;

const api = (method: string, path: string, body?: unknown) => apiRequest(base, method, path, body);
const img = (name: string) => encodeURIComponent(name);
const exec = async (id: string, command: string) => {
  const r = await api("POST", `/sandboxes/${id}/exec`, { command });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return r.body as { exit_code: number; stdout: string; stderr: string };
};
const spawn = async (image?: string) => {
  const r = await api("POST", "/sandboxes", image ? { image } : {});
  assert.equal(r.status, 201, JSON.stringify(r.body));
  return r.body.id as string;
};
const imageInfo = async (name: string) => ((await api("GET", "/images")).body as { name: string; digest: string; layers?: number; parent?: string }[]).find((i) => i.name === name);

before(async () => {
  server = await startTestServer();
  base = server.url;
  work = await mkdtemp(join(tmpdir(), "fvt-commit-"));
  removeAtExit(work);
  registry = await startRegistry(work);
  const layout = await writeBusyboxImage(await mkdtemp(join(work, "bb-")), ["sh", "cat", "echo", "ls", "mkdir", "rm", "stat", "sleep"], [], { Env: ["PATH=/bin"] });
  await server.forge.images.import(layout, { name: BUSYBOX });
});

after(async () => {
  registry?.stop();
  await server?.close();
  if (server) {
    await assertNoVmLeft(server.forge);
    const images = join(server.forge.paths.dataDir, "images");
    assert.deepEqual(
      (await readdir(images)).filter((n) => n.startsWith(".")),
      [],
      "no commit or staging leftovers",
    );
    const blobs = await readdir(join(server.forge.paths.dataDir, "blobs", "sha256"));
    assert.deepEqual(
      blobs.filter((n) => n.startsWith(".")),
      [],
      "no half-written blobs",
    );
  }
});

describe("commit", () => {
  let committedFrom: string;

  it("makes one layer on top of the built-in image: new and changed files, links, devices, whiteouts and config changes", async () => {
    const id = await spawn();
    committedFrom = id;
    const made = await exec(
      id,
      [
        "mkdir -p /opt/app && echo hello > /opt/app/greeting && chmod 4750 /opt/app/greeting",
        "ln /opt/app/greeting /opt/app/hard && ln -s greeting /opt/app/soft",
        "mkfifo /opt/app/fifo && mknod /opt/app/null c 1 3",
        "rm /etc/issue && rm -r /usr/share/doc/bash",
        "echo changed >> /etc/motd",
        // A process that runs through the commit: it is stopped while the disk is read, then goes on.
        // Only it goes to the background (a bare "&" would take the whole chain with it).
        "{ (while true; do date +%s%N > /tmp/tick; sleep 0.2; done) > /dev/null 2>&1 & echo $! > /tmp/tick.pid; }",
      ].join(" && "),
    );
    assert.equal(made.exit_code, 0, made.stderr);
    const r = await api("POST", `/sandboxes/${id}/commit`, {
      image: "local/app:v1",
      comment: "first",
      changes: { cmd: ["cat", "/opt/app/greeting"], env: { APP_MODE: "prod" }, workdir: "/opt/app", labels: { team: "forge" }, expose: ["8080"] },
    });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    assert.equal(r.body.image.name, "local/app:v1", "shown as it was typed");
    assert.equal(r.body.image.parent, "forgevm/debian:bookworm");
    const baseImage = await imageInfo("forgevm/debian:bookworm");
    assert.equal(baseImage?.layers, 1, "the built-in image got its own layer first");
    assert.equal(r.body.image.layers, 2, "one more layer than its base");
    // greeting, hard, soft, fifo, null, /opt and /opt/app, motd, and the directories whose entries changed.
    assert.ok(r.body.layer.entries >= 7 && r.body.layer.entries < 40, JSON.stringify(r.body.layer));
    assert.equal(r.body.layer.whiteouts, 2, "/etc/issue and /usr/share/doc/bash (not each file under it)");

    const before = (await exec(id, "cat /tmp/tick")).stdout;
    await waitFor(async () => (await exec(id, "cat /tmp/tick")).stdout !== before, 10_000, "the background process to run again after the commit");
    // Its work is done; left running, it would cost this sandbox's VMM a third of a core (TCG) to the file's end.
    assert.equal((await exec(id, "kill $(cat /tmp/tick.pid)")).exit_code, 0);

    const child = await spawn("local/app:v1");
    const seen = await exec(
      child,
      "cat /opt/app/greeting; stat -c '%a %h %F' /opt/app/greeting /opt/app/fifo; stat -c '%F %t:%T' /opt/app/null; readlink /opt/app/soft; ls /etc/issue /usr/share/doc/bash 2>&1; tail -1 /etc/motd; echo $APP_MODE; pwd",
    );
    assert.equal(
      seen.stdout,
      [
        "hello",
        "4750 2 regular file",
        "644 1 fifo",
        "character special file 1:3",
        "greeting",
        "ls: cannot access '/etc/issue': No such file or directory",
        "ls: cannot access '/usr/share/doc/bash': No such file or directory",
        "changed",
        "prod",
        "/opt/app",
        "",
      ].join("\n"),
    );
    const info = await api("GET", `/sandboxes/${child}`);
    assert.equal(info.status, 200);

    // A sandbox of the committed image, committed unchanged: an empty layer (the index is exact).
    const again = await api("POST", `/sandboxes/${child}/commit`, { image: "local/app:v2" });
    assert.equal(again.status, 201, JSON.stringify(again.body));
    assert.equal(again.body.layer.entries, 0, "nothing changed");
    assert.equal(again.body.layer.whiteouts, 0);
    assert.equal(again.body.image.layers, 3);
    for (const s of [child]) assert.equal((await api("DELETE", `/sandboxes/${s}`)).status, 200);
    assert.equal((await api("DELETE", `/images/${img("local/app:v2")}`)).status, 200);
  });

  it("squashes an imported image's sandbox into one layer that runs on its own", async () => {
    const id = await spawn(BUSYBOX);
    assert.equal((await exec(id, "mkdir -p /data && echo squashed > /data/f && rm /etc/group")).exit_code, 0);
    const r = await api("POST", `/sandboxes/${id}/commit`, { image: "local/bb-squashed:v1", squash: true });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    assert.equal(r.body.image.layers, 1);
    assert.equal(r.body.layer.whiteouts, 0, "a squashed layer leaves things out instead");
    const child = await spawn("local/bb-squashed:v1");
    assert.equal((await exec(child, "cat /data/f /etc/passwd; ls /etc/group 2>&1")).stdout, "squashed\nroot:x:0:0:root:/root:/bin/sh\nls: /etc/group: No such file or directory\n");
    for (const s of [id, child]) await api("DELETE", `/sandboxes/${s}`);
  });

  it("refuses what it cannot do, naming the field or the state", async () => {
    assert.equal((await api("POST", "/sandboxes/sb-nope/commit", { image: "x:v1" })).status, 404);
    const bad = await api("POST", `/sandboxes/${committedFrom}/commit`, { image: "has space:v1" });
    assert.equal(bad.status, 400);
    assert.match(bad.body.message, /image/);
    const rel = await api("POST", `/sandboxes/${committedFrom}/commit`, { image: "x:v1", changes: { workdir: "relative" } });
    assert.equal(rel.status, 400);
    assert.match(rel.body.message, /workdir/);
    assert.equal((await api("POST", `/sandboxes/${committedFrom}/commit`, {})).status, 400);
    const inUse = await api("POST", `/sandboxes/${committedFrom}/commit`, { image: "forgevm/debian:bookworm" });
    assert.equal(inUse.status, 409);
    assert.match(inUse.body.message, /in use/);
    const created = await api("POST", "/sandboxes", { start: false });
    assert.equal(created.status, 201);
    const notRunning = await api("POST", `/sandboxes/${created.body.id}/commit`, { image: "x:v1" });
    assert.equal(notRunning.status, 409);
    assert.match(notRunning.body.message, /created/);
    await api("DELETE", `/sandboxes/${created.body.id}`);
    assert.equal((await api("GET", `/images/${img("no/such:image")}/export`)).status, 404);
    const unreachable = await api("POST", `/images/${img("local/app:v1")}/push`, { reference: "127.0.0.1:1/x:v1" });
    assert.equal(unreachable.status, 503, JSON.stringify(unreachable.body));
    assert.equal((await api("POST", `/images/${img("local/app:v1")}/push`, { reference: "Bad Ref" })).status, 400);
    for (const name of ["\u0000", "../../../etc/passwd", "x".repeat(300)]) {
      const r = await api("POST", `/sandboxes/${committedFrom}/commit`, { image: name });
      assert.equal(r.status, 400, `${JSON.stringify(name.slice(0, 20))}: ${JSON.stringify(r.body)}`);
      assert.ok(JSON.stringify(r.body).length < 2000, "the error does not echo a long name whole");
    }
  });

  it("keeps names apart that differ only where the store's directory names did not (a/b and a_b)", async () => {
    for (const name of ["probe/a/b:1", "probe/a_b:1"]) assert.equal((await api("POST", `/sandboxes/${committedFrom}/commit`, { image: name })).status, 201, name);
    const names = ((await api("GET", "/images")).body as { name: string }[]).map((i) => i.name);
    assert.ok(names.includes("probe/a/b:1") && names.includes("probe/a_b:1"), names.join(", "));
    for (const name of ["probe/a/b:1", "probe/a_b:1"]) assert.equal((await api("DELETE", `/images/${img(name)}`)).status, 200, name);
  });
});

describe("export and push", () => {
  it("exports an OCI archive skopeo reads and that imports with the same digest", async () => {
    const want = await imageInfo("local/app:v1");
    assert.ok(want?.digest);
    const res = await fetch(`${base}/api/v1/images/${img("local/app:v1")}/export`);
    assert.equal(res.status, 200);
    assert.match(res.headers.get("content-disposition") ?? "", /app_v1\.tar/);
    const file = join(work, "app.tar");
    await pipeline(Readable.fromWeb(res.body as import("node:stream/web").ReadableStream), createWriteStream(file));
    const inspected = JSON.parse((await run("skopeo", ["inspect", `oci-archive:${file}`])).stdout);
    assert.equal(inspected.Digest, want.digest);
    assert.equal(inspected.Layers.length, 2);
    assert.deepEqual(inspected.Labels, { team: "forge" });
    const imported = await fetch(`${base}/api/v1/images/import?name=local/copy:v1`, {
      method: "POST",
      headers: { "content-type": "application/x-tar" },
      body: await readFile(file),
    }).then((r) => r.json() as Promise<{ digest: string }>);
    assert.equal(imported.digest, want.digest, "the archive keeps the manifest's bytes");
    assert.equal((await api("DELETE", `/images/${img("local/copy:v1")}`)).status, 200);
  });

  it("pushes to a registry: uploads, then mounts into a second repository, then finds everything; a pull gives the same digest", async () => {
    const want = (await imageInfo("local/app:v1"))!.digest;
    const first = await api("POST", `/images/${img("local/app:v1")}/push`, { reference: `${registry.host}/team/app:v1` });
    assert.equal(first.status, 200, JSON.stringify(first.body));
    assert.equal(first.body.digest, want);
    assert.deepEqual(new Set(first.body.blobs.map((b: { status: string }) => b.status)), new Set(["uploaded"]));
    assert.equal(first.body.blobs.length, 3, "config and two layers");
    const second = await api("POST", `/images/${img("local/app:v1")}/push`, { reference: `${registry.host}/team/other:v1` });
    assert.deepEqual(
      second.body.blobs.map((b: { status: string }) => b.status),
      ["mounted", "mounted", "mounted"],
    );
    assert.equal(second.body.uploaded_bytes, 0);
    const third = await api("POST", `/images/${img("local/app:v1")}/push`, { reference: `${registry.host}/team/app:v1` });
    assert.deepEqual(
      third.body.blobs.map((b: { status: string }) => b.status),
      ["exists", "exists", "exists"],
    );
    // Another client sees the same manifest; our own pull verifies every byte and gets the same digest.
    const remote = JSON.parse((await run("skopeo", ["inspect", "--tls-verify=false", `docker://${registry.host}/team/app:v1`])).stdout);
    assert.equal(remote.Digest, want);
    const pull = await server.forge.images.pull(`${registry.host}/team/app:v1`);
    assert.equal(pull.digest, want);
    const child = await spawn(`${registry.host}/team/app:v1`);
    assert.equal((await exec(child, "cat /opt/app/greeting")).stdout, "hello\n");
    await api("DELETE", `/sandboxes/${child}`);
  });

  it("the CLI commits with --change, exports with -o and pushes", async () => {
    const cli = (...args: string[]) => run("node", [CLI, "--server", base, ...args], { env: childEnv() });
    const id = await spawn(BUSYBOX);
    await exec(id, "echo from-cli > /note");
    const c = JSON.parse((await cli("commit", id, "local/cli:v1", "-c", 'CMD ["cat", "/note"]', "-c", "ENV A=1 B=two", "-m", "by the cli", "--json")).stdout);
    assert.equal(c.image.layers, 2);
    const file = join(work, "cli.tar");
    await cli("export", "local/cli:v1", "-o", file);
    assert.ok((await stat(file)).size > 1000);
    const config = JSON.parse((await run("skopeo", ["inspect", "--config", `oci-archive:${file}`])).stdout);
    assert.deepEqual(config.config.Cmd, ["cat", "/note"]);
    assert.ok(config.config.Env.includes("A=1") && config.config.Env.includes("B=two"));
    assert.equal(config.history.at(-1).comment, "by the cli");
    const p = JSON.parse((await cli("push", "local/cli:v1", `${registry.host}/cli:v1`, "--json")).stdout);
    assert.equal(p.digest, c.image.digest);
    await assert.rejects(cli("commit", id, "local/cli:v2", "-c", "RUN rm -rf /"), /RUN cannot be changed by a commit/);
    await api("DELETE", `/sandboxes/${id}`);
  });
});
