// The balloon by hand (core/sandboxes/balloon.ts): a running sandbox left less of its memory
// without a restart; the guest's kernel sees the smaller total, and the host gets the memory back
// (its VMM's proportional set size, read from /proc, falls). Sizes it cannot take are refused
// with the figures.
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { after, before, describe, it } from "node:test";
import type { RunningServer } from "../../src/compose/serve.js";
import { apiRequest, assertNoVmLeft, childEnv, runCli, startTestServer } from "../helpers.js";

let server: RunningServer;
let id: string;

/** The VMM's proportional set size, in MiB. */
async function pssMb(pid: number): Promise<number> {
  const kb = /^Pss:\s+(\d+) kB/m.exec(await readFile(`/proc/${pid}/smaps_rollup`, "utf8"))?.[1];
  return Number(kb) / 1024;
}

before(async () => {
  server = await startTestServer();
  const r = await apiRequest(server.url, "POST", "/sandboxes", { memory_mb: 512 });
  assert.equal(r.status, 201, JSON.stringify(r.body));
  id = r.body.id;
});

after(async () => {
  await server?.close();
  if (server) await assertNoVmLeft(server.forge);
});

describe("the balloon", () => {
  it("lowers a running guest's memory and the host's share of it, and gives it back", async () => {
    const pid = server.forge.sandboxes.get(id).vm_pid;
    assert.ok(pid, "the sandbox has a VMM");
    // Fill the guest's page cache, so that its VMM holds memory the balloon must take back.
    const fill = await apiRequest(server.url, "POST", `/sandboxes/${id}/exec`, {
      command: "dd if=/dev/zero of=/root/fill bs=1M count=200 2>/dev/null && sync && cat /root/fill > /dev/null",
    });
    assert.equal(fill.body.exit_code, 0, JSON.stringify(fill.body));
    const before = await apiRequest(server.url, "GET", `/sandboxes/${id}/balloon`);
    assert.equal(before.status, 200);
    assert.equal(before.body.memory_mb, 512);
    assert.equal(before.body.actual_mb, 512);
    const pssBefore = await pssMb(pid);
    assert.ok(pssBefore > 200, `the VMM holds the guest's cache (${pssBefore} MiB)`);

    const set = await runCli(["--server", server.url, "balloon", id, "160m", "--json"], childEnv());
    assert.equal(set.status, 0, set.stderr);
    const after = JSON.parse(set.stdout);
    assert.equal(after.actual_mb, 160);
    assert.ok(after.guest_total_mb <= before.body.guest_total_mb - 300, `the guest's total fell: ${before.body.guest_total_mb} → ${after.guest_total_mb} MiB`);
    const free = await apiRequest(server.url, "POST", `/sandboxes/${id}/exec`, { command: "awk '/MemTotal/ {print int($2/1024)}' /proc/meminfo" });
    assert.equal(Number(free.body.stdout.trim()), after.guest_total_mb);
    const pssAfter = await pssMb(pid);
    assert.ok(pssAfter < pssBefore - 100, `the host got memory back: PSS ${pssBefore.toFixed(0)} → ${pssAfter.toFixed(0)} MiB`);

    const back = await apiRequest(server.url, "PUT", `/sandboxes/${id}/balloon`, { memory_mb: 512 });
    assert.equal(back.status, 200, JSON.stringify(back.body));
    assert.equal(back.body.actual_mb, 512);
    assert.ok(back.body.guest_total_mb >= before.body.guest_total_mb - 2);
  });

  it("refuses 0, more than the sandbox was given, and less than the guest needs, with the figures", async () => {
    const zero = await apiRequest(server.url, "PUT", `/sandboxes/${id}/balloon`, { memory_mb: 0 });
    assert.equal(zero.status, 400);
    assert.match(zero.body.message, /memory_mb/);
    const above = await apiRequest(server.url, "PUT", `/sandboxes/${id}/balloon`, { memory_mb: 1024 });
    assert.equal(above.status, 400);
    assert.match(above.body.message, /1024 MiB is more than .* was given \(512 MiB\)/);
    // The guest holds 200 MiB of a file in memory (tmpfs): it cannot give that back.
    const hold = await apiRequest(server.url, "POST", `/sandboxes/${id}/exec`, {
      command: "rm -f /root/fill && mkdir -p /mnt/hold && mount -t tmpfs -o size=300m tmpfs /mnt/hold && dd if=/dev/zero of=/mnt/hold/f bs=1M count=200 2>/dev/null",
    });
    assert.equal(hold.body.exit_code, 0, JSON.stringify(hold.body));
    const below = await apiRequest(server.url, "PUT", `/sandboxes/${id}/balloon`, { memory_mb: 160 });
    assert.equal(below.status, 400);
    assert.match(below.body.message, /cannot give back enough for 160 MiB: it uses \d+ MiB of \d+ .*needs at least \d+ MiB/);
    const cli = await runCli(["--server", server.url, "balloon", id, "lots"], childEnv());
    assert.notEqual(cli.status, 0);
    assert.match(cli.stderr, /SIZE must be MiB or a size like 256m/);
  });
});
