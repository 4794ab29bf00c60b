// Idle memory reclaim against real VMs: a sandbox that read a lot of files holds that page cache
// in host memory; once it has been unused for memory.reclaim_after, the guest drops its clean
// page cache and free page reporting gives the blocks back, so its VMM's PSS falls, with nothing
// lost (its files read the same, its process runs on). Work in flight keeps it from being asked.
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { after, before, describe, it } from "node:test";
import type { RunningServer } from "../../src/compose/serve.js";
import { apiRequest, assertNoVmLeft, startTestServer, waitFor } from "../helpers.js";

let server: RunningServer;
const api = (method: string, path: string, body?: unknown) => apiRequest(server.url, method, path, body);
const reclaimed = (id: string) => server.forge.events.replay(0, 1_000_000).filter((e) => e.sandbox_id === id && e.type === "sandbox.reclaimed");

/** Resident MiB of the VMM's guest RAM that is this VM's own (its copy-on-write copies, or its own RAM file). */
async function guestMib(pid: number, memoryMb: number): Promise<number> {
  const text = await readFile(`/proc/${pid}/smaps`, "utf8");
  for (const block of text.split(/\n(?=[0-9a-f]+-[0-9a-f]+ )/)) {
    const field = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+)`, "m").exec(block)?.[1] ?? 0);
    if (field("Size") === memoryMb * 1024) return Math.round(field("Pss") / 1024);
  }
  throw new Error(`no guest RAM mapping of ${memoryMb} MiB in process ${pid}`);
}

before(async () => {
  server = await startTestServer((c) => {
    c.memory.reclaim_after = "3s";
  });
});

after(async () => {
  await server?.close();
  if (server) await assertNoVmLeft(server.forge);
});

// Each test has a sandbox of its own and reads only its own VMM's memory and its own events: they
// run at once, so that their waits (the idle time, free page reporting) overlap.
describe("idle memory reclaim", { concurrency: true }, () => {
  for (const forkable of [false, true]) {
    it(`gives an unused sandbox's page cache back to the host, and it reads its files as before${forkable ? " (forkable: its own RAM file)" : ""}`, async () => {
      const sb = (await api("POST", "/sandboxes", { forkable })).body;
      const row = () => server.forge.sandboxes.get(sb.id);
      // ~150 MiB of page cache: every file under /usr read once.
      const read = await api("POST", `/sandboxes/${sb.id}/exec`, {
        command: "find /usr -type f -exec cat {} + >/dev/null 2>&1; md5sum /usr/bin/* 2>/dev/null | md5sum; nohup sleep 600 >/dev/null 2>&1 & echo $!",
      });
      assert.equal(read.body.exit_code, 0, read.body.stderr);
      const [sum, pid] = read.body.stdout.trim().split("\n");
      const full = await guestMib(row().vm_pid!, row().memory_mb);
      assert.ok(full > 120, `after reading /usr the guest's RAM holds ${full} MiB`);
      await waitFor(async () => reclaimed(sb.id).length > 0, 30_000, "the reclaim of the unused sandbox");
      // Free page reporting hands blocks over once they stayed free for ~2 s.
      await waitFor(async () => (await guestMib(row().vm_pid!, row().memory_mb)) < full - 80, 20_000, `its guest RAM to shrink from ${full} MiB`);
      const again = await api("POST", `/sandboxes/${sb.id}/exec`, { command: `md5sum /usr/bin/* 2>/dev/null | md5sum; kill -0 ${pid} && echo alive` });
      assert.equal(again.body.stdout.trim(), `${sum}\nalive`);
      // Asked once per idle spell: the exec made it eligible again, and nothing was asked meanwhile.
      assert.equal(reclaimed(sb.id).length, 1);
      await api("DELETE", `/sandboxes/${sb.id}`);
    });
  }

  it("work in flight keeps a sandbox from being asked", async () => {
    const sb = (await api("POST", "/sandboxes", {})).body;
    const r = await api("POST", `/sandboxes/${sb.id}/exec`, { command: "sleep 6; echo done" });
    assert.equal(r.body.stdout.trim(), "done");
    assert.equal(reclaimed(sb.id).length, 0, "nothing is reclaimed while an exec runs");
    await api("DELETE", `/sandboxes/${sb.id}`);
  });
});
