// A full disk under `forgevm serve`: its data directory on a small filesystem this test makes
// (ext4 in a file, loop-mounted: what a data directory is on; on a tmpfs a full disk also
// takes the pages of the sparse RAM files guests map, which no real disk does), filled by the
// sandboxes' own writes. While it is full the server stays up, answers
// 507 for what needs room (spawn, snapshot, a call to a sandbox whose guest waits) and keeps its
// database consistent; once there is room again the waiting guests go on and every file the
// server acknowledged, before and during, reads back whole.
import assert from "node:assert/strict";
import type { ChildProcess } from "node:child_process";
import { execFile } from "node:child_process";
import { mkdtemp, rm, statfs, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { after, before, describe, it } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { seedDataDir } from "../../src/setup/seed.js";
import { preparedDataDir } from "../../src/setup/index.js";
import { freePort, startServerProcess, stopProcess, waitFor } from "../helpers.js";

const run = promisify(execFile);
const KEY = "full-disk-key";
const root = process.getuid?.() === 0;
let mnt: string;
let image: string;
let dataDir: string;
let base: string;
let server: ChildProcess;
const sandboxes: string[] = [];
/** path → content of every file the server acknowledged. */
const acknowledged = new Map<string, { sandbox: string; content: string }>();

async function api(method: string, path: string, body?: unknown, timeoutMs = 30_000) {
  const r = await fetch(`${base}${path}`, {
    method,
    headers: { "X-API-Key": KEY, ...(body !== undefined ? { "Content-Type": "application/json" } : {}) },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(timeoutMs),
  });
  const text = await r.text();
  return { status: r.status, body: text.startsWith("{") || text.startsWith("[") ? JSON.parse(text) : text };
}

const free = async () => {
  const s = await statfs(mnt);
  return s.bavail * s.bsize;
};

before(async () => {
  if (!root) return;
  mnt = await mkdtemp(join(tmpdir(), "fvt-full-"));
  image = `${mnt}.ext4`;
  await run("truncate", ["-s", "700M", image]);
  await run("mkfs.ext4", ["-q", "-m", "0", image]);
  await run("mount", ["-o", "loop", image, mnt]);
  dataDir = join(mnt, "data");
  await seedDataDir(preparedDataDir(), dataDir);
  const port = await freePort();
  base = `http://127.0.0.1:${port}/api/v1`;
  const config = join(mnt, "forgevm.yaml");
  await writeFile(
    config,
    `data_dir: ${dataDir}\nserver:\n  port: ${port}\n  request_log: false\n  on_stop: destroy\nauth:\n  api_key: ${KEY}\nmetrics:\n  interval: 1s\n  guest_every: 1\n`,
  );
  server = await startServerProcess(config, base, KEY);
});

after(async () => {
  if (!root) return;
  // Room first, whatever a failed test left: the server's stop then destroys its sandboxes.
  await rm(join(mnt, "ballast"), { force: true });
  if (server) await stopProcess(server);
  await run("umount", [mnt]).catch(() => run("umount", ["-l", mnt]).catch(() => {}));
  await rm(mnt, { recursive: true, force: true });
  await rm(image, { force: true });
});

describe("a full data directory", { skip: !root && "needs root to mount a small filesystem" }, () => {
  it("refuses with 507 what needs room, keeps every acknowledged file, and goes on when there is room again", async () => {
    for (let i = 0; i < 2; i++) {
      const r = await api("POST", "/sandboxes", { memory_mb: 256, ttl: "30m" });
      assert.equal(r.status, 201, JSON.stringify(r.body));
      sandboxes.push(r.body.id);
    }
    // A third one whose VM is killed from outside while the disk is full.
    const doomed = (await api("POST", "/sandboxes", { memory_mb: 256, ttl: "30m" })).body.id as string;
    const write = async (sandbox: string, path: string, content: string, timeoutMs = 5000) => {
      const r = await api("POST", `/sandboxes/${sandbox}/files`, { path, content }, timeoutMs).catch((e) => ({ status: 0, body: String(e) }));
      if (r.status === 200) acknowledged.set(`${sandbox}:${path}`, { sandbox, content });
      return r;
    };
    for (const sb of sandboxes) for (let i = 0; i < 10; i++) assert.equal((await write(sb, `/root/before-${i}.txt`, `before ${i} in ${sb}\n`)).status, 200);

    // A ballast the test removes later, then each guest writes more than is left.
    const ballastMb = 120;
    await run("dd", ["if=/dev/zero", `of=${join(mnt, "ballast")}`, "bs=1M", `count=${ballastMb}`]);
    // One guest alone writes more than is left (so it certainly meets the wall), and less than
    // the ballast gives back (so it finishes once there is room).
    const left = Math.floor((await free()) / 1048576);
    const fills = [sandboxes[0]].map((sb) =>
      api("POST", `/sandboxes/${sb}/exec`, { command: `dd if=/dev/urandom of=/root/fill bs=1M count=${left + ballastMb / 3} conv=fsync 2>&1 | tail -1` }, 600_000).catch((e) => ({
        status: 0,
        body: String(e),
      })),
    );
    await waitFor(async () => (await free()) < 8 * 1048576, 300_000, "the disk to fill");
    // A write sent as the guest meets the wall is in flight when QEMU pauses it: answered all the same.
    const inFlight = write(sandboxes[0], "/root/in-flight.txt", "x".repeat(1 << 20), 30_000);
    // The server says so, and then a spawn and a snapshot are 507s, at once.
    await waitFor(async () => (await api("GET", "/health")).body.storage?.full === true, 20_000, "the server to see the disk full");
    const spawn = await api("POST", "/sandboxes", { memory_mb: 256 }, 5000);
    assert.equal(spawn.status, 507, JSON.stringify(spawn.body));
    const snap = await api("POST", `/sandboxes/${sandboxes[0]}/snapshot`, {}, 5000);
    assert.equal(snap.status, 507, JSON.stringify(snap.body));
    assert.equal(snap.body.code, "INSUFFICIENT_STORAGE");
    assert.equal(snap.body.retryable, true);
    // Guests that wait for room answer 507 rather than hang. The one filling the disk met the wall;
    // another may have too (a guest writes its own logs now and then), and waits as well.
    const waiting = sandboxes[0];
    await waitFor(async () => (await api("GET", "/health")).body.storage.waiting_sandboxes.includes(waiting), 120_000, "the guest that met the wall to wait for room");
    const call = await api("POST", `/sandboxes/${waiting}/exec`, { command: "true" }, 5000);
    assert.equal(call.status, 507, JSON.stringify(call.body));
    assert.match(call.body.message, /paused until there is room/);
    // The server goes on through several metrics ticks on a full disk (it used to exit on SQLITE_FULL).
    await sleep(3000);
    assert.equal(server.exitCode, null, "the server is still running");
    assert.equal((await api("GET", "/health")).status, 200);
    const listed = await api("GET", "/sandboxes");
    assert.equal(listed.status, 200);
    assert.deepEqual(listed.body.map((s: { id: string }) => s.id).sort(), [...sandboxes, doomed].sort());
    // Writes to a guest that has not hit the wall are acknowledged and kept; to one that waits, 507s.
    const flew = await inFlight;
    assert.ok(flew.status === 200 || flew.status === 507, `the write in flight: ${JSON.stringify(flew).slice(0, 300)}`);
    // Every write is answered, at once or within the disk watch's look (a write in flight when
    // its guest paused is answered 507 then): none is left hanging.
    for (const sb of sandboxes) {
      const r = await write(sb, "/root/during.txt", `during in ${sb}\n`, 20_000);
      assert.ok(r.status === 200 || r.status === 507, JSON.stringify(r));
    }
    const { stdout } = await run("pgrep", ["-f", `fvm.hostname=${doomed}`]);
    process.kill(Number(stdout.trim().split("\n")[0]), "SIGKILL");
    // Its end is known at once, though the disk has no room to record it yet: error, with why,
    // and a call to it is told so (not that another server runs it).
    await waitFor(async () => (await api("GET", `/sandboxes/${doomed}`)).body.state === "error", 15_000, "the killed sandbox to read as error on the full disk");
    assert.match((await api("GET", `/sandboxes/${doomed}`)).body.error, /agent channel closed|VMM exited|went away/);
    const toDoomed = await api("POST", `/sandboxes/${doomed}/exec`, { command: "true" }, 5000);
    assert.ok(toDoomed.status >= 400 && toDoomed.status < 500 && toDoomed.status !== 409, JSON.stringify(toDoomed));
    assert.doesNotMatch(JSON.stringify(toDoomed.body), /another ForgeVM process/);
    assert.ok(!(await api("GET", "/sandboxes")).body.some((s: { id: string }) => s.id === doomed), "it is no longer listed as live");

    // Room again: the waiting guests go on, their writes finish, and everything reads back.
    await rm(join(mnt, "ballast"));
    const done = await Promise.all(fills);
    for (const d of done) assert.equal(d.status, 200, JSON.stringify(d.body));
    for (const sb of sandboxes) assert.equal((await write(sb, "/root/after.txt", `after in ${sb}\n`)).status, 200);
    for (const [key, { sandbox, content }] of acknowledged) {
      const path = key.slice(sandbox.length + 1);
      const r = await api("GET", `/sandboxes/${sandbox}/files?path=${encodeURIComponent(path)}`);
      assert.equal(r.body, content, `${key} reads back`);
    }
    for (const sb of sandboxes) {
      const info = await api("GET", `/sandboxes/${sb}`);
      assert.equal(info.body.state, "running", JSON.stringify(info.body));
      assert.equal((await api("DELETE", `/sandboxes/${sb}`)).status, 200);
    }
    // The one whose VM went away while nothing could be written says so now, as error (not running, not a 503).
    await waitFor(async () => (await api("GET", `/sandboxes/${doomed}`)).body.state === "error", 10_000, "the killed sandbox to be marked error");
    assert.match((await api("GET", `/sandboxes/${doomed}`)).body.error, /agent channel closed|VMM exited|went away/);
    // A spawn works again.
    const again = await api("POST", "/sandboxes", { memory_mb: 256 });
    assert.equal(again.status, 201, JSON.stringify(again.body));
    assert.equal((await api("DELETE", `/sandboxes/${again.body.id}`)).status, 200);
    assert.equal(server.exitCode, null);
  });
});
