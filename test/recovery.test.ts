// Crash recovery: SIGKILL the server while sandboxes run and an exec is in flight, restart it,
// and check that nothing stays running that is not, no QEMU is orphaned, and expiry still works.
// Design today: VMs of a dead server are destroyed and marked `error` on restart.
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { readdir, readFile, stat } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, it } from "node:test";
import { defaultDataDir } from "../src/config/paths.js";
import { alive, waitFor } from "./helpers.js";

const main = fileURLToPath(new URL("../src/cli/main.js", import.meta.url));
const PORT = 7431;
const base = `http://127.0.0.1:${PORT}/api/v1`;
let server: ChildProcess | null = null;

function startServer(): ChildProcess {
  const p = spawn(process.execPath, [main, "serve"], { env: { ...process.env, FORGEVM_SERVER_PORT: String(PORT) }, stdio: ["ignore", "ignore", "inherit"] });
  return p;
}

async function ready(): Promise<void> {
  await waitFor(async () => (await fetch(`${base}/health`).then((r) => r.ok, () => false)), 20_000, "the server");
}

/** QEMU processes whose command line names this sandbox's VM directory. */
async function qemuPidsOf(id: string): Promise<number[]> {
  const out: number[] = [];
  for (const p of await readdir("/proc")) {
    if (!/^\d+$/.test(p)) continue;
    const cmd = await readFile(`/proc/${p}/cmdline`, "utf8").catch(() => "");
    if (cmd.startsWith("qemu-system") && cmd.includes(`/vms/${id}/`)) out.push(Number(p));
  }
  return out;
}

after(async () => {
  if (server && server.exitCode === null) {
    server.kill("SIGTERM");
    await new Promise((r) => server!.once("exit", r));
  }
});

it("after a SIGKILL and restart: no orphan VM, nothing falsely running, expiry still works", async () => {
  server = startServer();
  await ready();
  const ids: string[] = [];
  for (let i = 0; i < 2; i++) {
    const r = await fetch(`${base}/sandboxes`, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ ttl: "10m" }) });
    assert.equal(r.status, 201);
    ids.push(((await r.json()) as { id: string }).id);
  }
  const inflight = fetch(`${base}/sandboxes/${ids[0]}/exec`, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ command: "sleep 60" }) }).catch((e) => e);
  await new Promise((r) => setTimeout(r, 300));
  const qemuBefore = (await Promise.all(ids.map(qemuPidsOf))).flat();
  assert.equal(qemuBefore.length, 2, "both VMs run");

  server.kill("SIGKILL");
  await new Promise((r) => server!.once("exit", r));
  assert.ok((await inflight) instanceof Error, "the in-flight exec failed with the server");
  // QEMU runs detached: it outlives the server until the restart deals with it.
  assert.ok(qemuBefore.every(alive));

  server = startServer();
  await ready();
  for (const id of ids) {
    const r = await fetch(`${base}/sandboxes/${id}`);
    assert.equal(r.status, 404);
    assert.match(((await r.json()) as { message: string }).message, /error/);
    await assert.rejects(stat(join(defaultDataDir(), "vms", id)), { code: "ENOENT" });
  }
  await waitFor(() => qemuBefore.every((p) => !alive(p)), 5000, "the old QEMU processes to exit");
  const list = (await (await fetch(`${base}/sandboxes`)).json()) as { id: string }[];
  assert.ok(!list.some((s) => ids.includes(s.id)), "nothing from before is listed as live");

  const r = await fetch(`${base}/sandboxes`, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ ttl: "2s" }) });
  const { id } = (await r.json()) as { id: string };
  await waitFor(async () => (await fetch(`${base}/sandboxes/${id}`)).status === 404, 30_000, "expiry after restart");
  await waitFor(async () => (await qemuPidsOf(id)).length === 0, 10_000, "the expired VM to stop");

  server.kill("SIGTERM");
  const code = await new Promise((r) => server!.once("exit", r));
  assert.equal(code, 0);
});
