// Sandboxes that fail: a guest that breaks its agent channel, a VM killed from outside, an image
// that does not boot. Each becomes `error` with its reason, is announced, is cleaned up like any
// other, and stays visible (GET, list --all, its console) for the history's lifetime.
import assert from "node:assert/strict";
import { mkdir, readdir, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import type { FastifyInstance } from "fastify";
import { buildApp } from "../../src/compose/app.js";
import type { Forge } from "../../src/index.js";
import { alive, openForge, waitFor } from "../helpers.js";

let forge: Forge;
let app: FastifyInstance;

before(async () => {
  forge = await openForge({ reapIntervalMs: 0 });
  app = await buildApp({ forge, version: "test" });
});

after(async () => {
  await app?.close();
  await forge?.close();
});

const api = async (method: "GET" | "POST", url: string, body?: object) => {
  const r = await app.inject({ method, url: `/api/v1${url}`, payload: body });
  return { status: r.statusCode, body: r.json() };
};

/** Events recorded for a sandbox, in order. */
const eventsOf = (id: string) => forge.events.replay(0, 100_000).filter((e) => e.sandbox_id === id);

async function assertCleanedUp(id: string, vmDir: string, pid: number) {
  await waitFor(() => !alive(pid), 10_000, "the VMM to be gone");
  await waitFor(
    () =>
      stat(vmDir).then(
        () => false,
        () => true,
      ),
    10_000,
    "the VM directory to be gone",
  );
  assert.deepEqual(
    forge.sandboxes
      .list()
      .map((s) => s.id)
      .filter((s) => s === id),
    [],
    "not listed as live",
  );
}

describe("a sandbox whose VM stops answering", () => {
  it("becomes error with the reason when the guest breaks its agent channel, and is cleaned up", async () => {
    const sb = await forge.sandboxes.spawn();
    const { dir, pid } = sb.vm.info;
    // Root in the guest rebinds the console driver and writes a raw frame no agent would send.
    await sb.exec(
      `nohup sh -c 'sleep 1; echo virtio0 > /sys/bus/virtio/drivers/virtio_console/unbind; echo virtio0 > /sys/bus/virtio/drivers/virtio_console/bind; sleep 1; printf "\\377\\377\\377\\377 a frame header no agent sends" > /dev/vport0p1' >/dev/null 2>&1 &`,
    );
    await waitFor(() => forge.sandboxes.get(sb.id).state === "error", 20_000, "the sandbox to become error");
    const row = forge.sandboxes.get(sb.id);
    assert.match(row.error ?? "", /agent channel/);
    assert.ok(row.destroyed_at);
    await waitFor(() => eventsOf(sb.id).some((e) => e.type === "sandbox.error"), 10_000, "the sandbox.error event");
    assert.deepEqual(
      eventsOf(sb.id)
        .map((e) => e.type)
        .slice(-1),
      ["sandbox.error"],
    );
    assert.match(String(eventsOf(sb.id).at(-1)?.data?.error), /agent channel/);
    await assertCleanedUp(sb.id, dir, pid);
    // It says so, rather than 503 until its TTL.
    const exec = await api("POST", `/sandboxes/${sb.id}/exec`, { command: "true" });
    assert.equal(exec.status, 404, JSON.stringify(exec.body));
    assert.match(exec.body.message, /is error \(.*agent channel/);
    assert.equal(exec.body.sandbox_id, sb.id);
  });

  it("becomes error when its VMM is killed from outside", async () => {
    const sb = await forge.sandboxes.spawn();
    const { dir, pid } = sb.vm.info;
    process.kill(pid, "SIGKILL");
    await waitFor(() => forge.sandboxes.get(sb.id).state === "error", 20_000, "the sandbox to become error");
    assert.match(forge.sandboxes.get(sb.id).error ?? "", /VM (stopped|exited)|agent channel/);
    await assertCleanedUp(sb.id, dir, pid);
  });

  it("a sandbox destroyed on purpose is not an error", async () => {
    const sb = await forge.sandboxes.spawn();
    await sb.destroy();
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(forge.sandboxes.get(sb.id).state, "destroyed");
    assert.ok(!eventsOf(sb.id).some((e) => e.type === "sandbox.error"));
  });
});

describe("failures stay visible", () => {
  it("a sandbox that failed to boot keeps its state, reason and console: GET shows it, list all lists it", async () => {
    // An image whose root filesystem is no filesystem at all.
    const dir = join(forge.paths.imagesDir, "forgevm_broken");
    await mkdir(dir, { recursive: true });
    await writeFile(join(dir, "rootfs.ext4"), Buffer.alloc(8 * 1024 * 1024));
    await writeFile(join(dir, "image.json"), JSON.stringify({ name: "forgevm/broken", source: "test", createdAt: new Date().toISOString(), size: 8 * 1024 * 1024 }));
    const made = await api("POST", "/sandboxes", { image: "forgevm/broken", memory_mb: 256 });
    assert.ok(made.status >= 500, JSON.stringify(made.body));
    const failed = forge.sandboxes.list(undefined, ["error"]).find((s) => s.image === "forgevm/broken");
    assert.ok(failed, "the failed sandbox has a row");
    const got = await api("GET", `/sandboxes/${failed.id}`);
    assert.equal(got.status, 200, JSON.stringify(got.body));
    assert.equal(got.body.state, "error");
    assert.match(got.body.error, /failed to boot|did not start/);
    assert.ok(!(await api("GET", "/sandboxes")).body.some((s: { id: string }) => s.id === failed.id), "not among the live ones");
    assert.ok((await api("GET", "/sandboxes?all=true")).body.some((s: { id: string; state: string }) => s.id === failed.id && s.state === "error"));
    const logs = await api("GET", `/sandboxes/${failed.id}/logs?lines=200`);
    assert.equal(logs.status, 200);
    assert.ok(
      logs.body.some((l: string) => /cannot mount root filesystem|VFS|Kernel panic/i.test(l)),
      logs.body.join("\n"),
    );
    // Destroyed ones are history too, but GET keeps answering 404 for them, as the contract says.
    const sb = await forge.sandboxes.spawn();
    await sb.destroy();
    assert.equal((await api("GET", `/sandboxes/${sb.id}`)).status, 404);
    assert.ok((await api("GET", "/sandboxes?all=true")).body.some((s: { id: string; state: string }) => s.id === sb.id && s.state === "destroyed"));
    assert.deepEqual(await readdir(forge.paths.vmsDir), []);
  });
});

describe("copies that fail end what they started", () => {
  it("a fork whose child is destroyed while it starts fails whole: no child's VM runs on, none is left half-made", async () => {
    for (const forkable of [false, true]) {
      const parent = await forge.sandboxes.spawn({ memoryMb: 256, forkable });
      const before = forge.events.replay(0, 1_000_000).length;
      const forking = forge.snapshots.fork(parent.id, { count: 3 }).then(
        () => null,
        (e: Error) => e,
      );
      // The first child as soon as it has a row: destroyed before the fork hands it out.
      let victim: string | undefined;
      await waitFor(
        () => {
          victim = forge.sandboxes.list(undefined, ["creating"]).find((r) => r.id !== parent.id)?.id;
          return !!victim;
        },
        20_000,
        "a child's row",
      );
      await forge.sandboxes.destroy(victim!);
      const failed = await forking;
      assert.ok(failed instanceof Error, `forkable ${forkable}: the fork failed`);
      const children = forge.events
        .replay(0, 1_000_000)
        .slice(before)
        .filter((e) => e.type === "sandbox.created" && e.data?.forked_from === parent.id)
        .map((e) => e.sandbox_id as string);
      assert.equal(children.length, 3);
      for (const id of children) {
        const row = forge.sandboxes.get(id);
        assert.ok(row.state === "destroyed" || row.state === "error", `${id} is ${row.state}`);
        await waitFor(() => !row.vm_pid || !alive(row.vm_pid), 10_000, `the VMM of ${id} to be gone`);
        await waitFor(async () => !(await readdir(forge.paths.vmsDir)).includes(id), 10_000, `the VM directory of ${id} to go`);
      }
      assert.equal((await parent.exec("echo still")).stdout, "still\n", "the parent goes on");
      await parent.destroy();
    }
    assert.deepEqual(await readdir(forge.paths.vmsDir), []);
  });
});
