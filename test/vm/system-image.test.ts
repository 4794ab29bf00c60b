// System images (docs/system-images.md): forgevm/system:debian-12 boots systemd as PID 1, which
// starts the agent as its first service, so exec, files, pause and ssh work as on any image while
// `systemctl` manages real units. A unit's service runs, `systemctl status` answers, the service
// survives a pause (same process) and comes back after a cold boot over the sandbox's disk; a
// unit's server answers on a published port, a fork runs on with its services, metrics answer; ssh
// reaches the image's own sshd, socket-activated, with host keys of each sandbox's own. Asking for
// systemd where an image has none, or for a system image ForgeVM does not build, is refused.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdir, mkdtemp, readFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { after, before, describe, it } from "node:test";
import { pathsFor } from "../../src/config/paths.js";
import { startServer, type RunningServer } from "../../src/compose/serve.js";
import { DEFAULT_IMAGE, SYSTEM_IMAGE } from "../../src/images/store.js";
import { ensureSystemImage } from "../../src/setup/base-image.js";
import { preparedSystemImage } from "../../src/setup/index.js";
import type { Sandbox } from "../../src/index.js";
import type { BuiltInImages } from "../../src/images/built-in.js";
import { apiRequest, assertNoVmLeft, childEnv, removeAtExit, runCli, testConfig } from "../helpers.js";

const run = promisify(execFile);
let server: RunningServer;
let sb: Sandbox;

const sh = async (command: string, box = sb) => {
  const r = await box.exec(command, { timeoutMs: 60_000 });
  return { code: r.exitCode, out: r.stdout.trim(), err: r.stderr.trim() };
};

/** Logs a line to the journal and reads it back with journalctl, as a user of the sandbox would. */
const journalReads = async (box = sb) => {
  const mark = `journal-${process.hrtime.bigint()}`;
  const r = await sh(
    `logger -t forgevm-test ${mark} && for i in $(seq 100); do journalctl -q -t forgevm-test --no-pager | grep -q ${mark} && exit 0; sleep 0.1; done; ls -l /var/log/journal; cat /etc/machine-id; exit 1`,
    box,
  );
  return { ok: r.code === 0, why: `${r.out}\n${r.err}` };
};

let firstSpawn: { events: { type: string; image?: unknown; message?: unknown }[]; concurrent: number };

before(async () => {
  const cfg = await testConfig(undefined, [DEFAULT_IMAGE]);
  // The checkout's prepared copy, which the suite builds ahead (minutes, once): waited for here,
  // not inside the spawn's request, which a client gives up on after five minutes.
  await preparedSystemImage();
  const t0 = performance.now();
  // The server builds the image when a spawn first names it. Its builder here gives the data
  // directory that prepared copy (built by setup's ensureSystemImage, the function the server's
  // own builder runs), so the build's minutes are not spent again in every run.
  let builds = 0;
  const builtInImages: BuiltInImages = {
    canBuild: (name) => name === SYSTEM_IMAGE,
    build: async (_name, log) => {
      builds++;
      log("giving the data directory the prepared system image");
      await preparedSystemImage(cfg.data_dir, log);
    },
  };
  server = await startServer(cfg, "test", { builtInImages });
  removeAtExit(cfg.data_dir);
  const from = server.forge.events.lastSeq();
  // Two spawns that name it at once share one build.
  const [r, other] = await Promise.all([
    apiRequest(server.url, "POST", "/sandboxes", { image: SYSTEM_IMAGE, name: "sys", memory_mb: 512 }),
    apiRequest(server.url, "POST", "/sandboxes", { image: SYSTEM_IMAGE, memory_mb: 512 }),
  ]);
  console.log(`# ${SYSTEM_IMAGE} built by the first spawn and running in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  assert.equal(r.status, 201, JSON.stringify(r.body));
  assert.equal(other.status, 201, JSON.stringify(other.body));
  await apiRequest(server.url, "DELETE", `/sandboxes/${other.body.id}`);
  firstSpawn = {
    events: server.forge.events
      .replay(from, 1_000_000)
      .filter((e) => e.type.startsWith("image."))
      .map((e) => ({ type: e.type, ...(e.data as object) })),
    concurrent: builds,
  };
  sb = server.forge.sandboxes.running(r.body.id);
});

after(async () => {
  await server?.close();
  if (server) await assertNoVmLeft(server.forge);
});

describe("system images", () => {
  it("are built by the first spawn that names one, with its steps as events; spawns at once share the build", () => {
    assert.equal(firstSpawn.concurrent, 1);
    const types = firstSpawn.events.map((e) => e.type);
    assert.equal(types[0], "image.building", types.join());
    assert.equal(types.at(-1), "image.built", types.join());
    assert.ok(
      types.slice(1, -1).every((t) => t === "image.progress"),
      types.join(),
    );
    assert.ok(firstSpawn.events.every((e) => e.image === SYSTEM_IMAGE));
    assert.equal(firstSpawn.events[1].message, "giving the data directory the prepared system image");
  });

  it("boot systemd as PID 1, with the agent as its first service and execs in a cgroup under it", async () => {
    assert.equal((await sh("readlink /proc/1/exe")).out, "/usr/lib/systemd/systemd");
    assert.equal((await apiRequest(server.url, "GET", `/sandboxes/${sb.id}`)).body.init, "systemd");
    // Spawning waits for the boot to settle: the system is up, not starting.
    const state = await sh("systemctl is-system-running");
    assert.match(state.out, /^(running|degraded)$/, `${state.out}\n${(await sh("systemctl --failed --no-legend")).out}`);
    const agent = await sh("systemctl show -p ActiveState -p MainPID forgevm-agent.service");
    assert.match(agent.out, /ActiveState=active/);
    assert.equal((await sh("cat /proc/$(systemctl show -p MainPID --value forgevm-agent.service)/comm")).out, "agent");
    assert.match((await sh("cat /proc/self/cgroup")).out, /^0::\/system\.slice\/forgevm-agent\.service\/sandbox\/x\d+$/);
    // The hostname the host gave, journald running, files through the agent as anywhere.
    assert.equal((await sh("hostname")).out, sb.id);
    assert.equal((await sh("systemctl is-active systemd-journald.service")).out, "active");
    // journald writes where it started, under the machine ID it read then; journalctl reads under
    // the sandbox's own: the agent links the one to the other.
    const journal = await journalReads();
    assert.ok(journal.ok, `journalctl shows what was just logged: ${journal.why}`);
    await sb.writeFile("/etc/motd", Buffer.from("a system sandbox\n"));
    assert.equal((await sh("cat /etc/motd")).out, "a system sandbox");
  });

  it("runs a unit's service that `systemctl status` reports and that survives a pause with the same process", async () => {
    const unit =
      "[Unit]\nDescription=ticks once a second\n[Service]\nExecStart=/bin/sh -c 'while :; do date +%s >> /var/tmp/ticks; sleep 1; done'\n[Install]\nWantedBy=multi-user.target\n";
    await sb.writeFile("/etc/systemd/system/ticker.service", Buffer.from(unit));
    const enabled = await sh("systemctl daemon-reload && systemctl enable --now ticker.service");
    assert.equal(enabled.code, 0, enabled.err);
    const status = await sh("systemctl status ticker.service --no-pager");
    assert.equal(status.code, 0, status.err);
    assert.match(status.out, /Active: active \(running\)/);
    // Started by systemd, not by the agent: the unit's own cgroup.
    const pid = (await sh("systemctl show -p MainPID --value ticker.service")).out;
    assert.match((await sh(`cat /proc/${pid}/cgroup`)).out, /system\.slice\/ticker\.service/);
    await server.forge.sandboxes.pause(sb.id);
    assert.equal(server.forge.sandboxes.get(sb.id).state, "paused");
    sb = await server.forge.sandboxes.resume(sb.id);
    assert.equal((await sh("systemctl show -p MainPID --value ticker.service")).out, pid, "the same process runs on after the pause");
    const lines = Number((await sh("wc -l < /var/tmp/ticks")).out);
    await new Promise((r) => setTimeout(r, 2500));
    assert.ok(Number((await sh("wc -l < /var/tmp/ticks")).out) > lines, "it still ticks");
  });

  it("serves a unit's web server on a published port, forks with its services running, and reports metrics", async () => {
    await sb.writeFile("/srv/index.html", Buffer.from("served by a unit\n"));
    const unit = "[Service]\nExecStart=/usr/bin/python3 -m http.server 8080 --bind 127.0.0.1 --directory /srv\n[Install]\nWantedBy=multi-user.target\n";
    await sb.writeFile("/etc/systemd/system/web.service", Buffer.from(unit));
    assert.equal((await sh("systemctl daemon-reload && systemctl enable --now web.service")).code, 0);
    const up = await sh("for i in $(seq 100); do curl -sf http://127.0.0.1:8080/ && exit 0; sleep 0.2; done; exit 1");
    assert.equal(up.code, 0, "the unit's server answers in the guest");
    const port = await server.forge.network.publishPort(sb.id, "0:8080");
    const res = await fetch(`http://127.0.0.1:${port.host_port}/`);
    assert.equal(await res.text(), "served by a unit\n");
    const fork = await server.forge.snapshots.fork(sb.id);
    const child = fork.sandboxes[0];
    try {
      assert.equal((await sh("readlink /proc/1/exe; systemctl is-active ticker.service web.service", child)).out, "/usr/lib/systemd/systemd\nactive\nactive");
      assert.equal(server.forge.sandboxes.get(child.id).init, "systemd", "a fork boots systemd too if it ever boots cold");
      const journal = await journalReads(child);
      assert.ok(journal.ok, `a fork's journalctl shows what it just logged: ${journal.why}`);
    } finally {
      await server.forge.sandboxes.destroy(child.id);
    }
    const m = await sb.metrics();
    assert.ok(m.memory.total > 0 && m.processes > 10 && m.disk.total > 0, JSON.stringify(m));
  });

  it("starts the enabled service again when the sandbox boots cold over its disk", async () => {
    await server.forge.sandboxes.pause(sb.id);
    sb = await server.forge.sandboxes.resume(sb.id, undefined, { reboot: true });
    assert.equal((await sh("readlink /proc/1/exe")).out, "/usr/lib/systemd/systemd");
    // A fresh boot: the agent answered early, so systemd may still be starting units.
    const up = await sh("systemctl is-system-running --wait; systemctl is-active ticker.service");
    assert.match(up.out, /\nactive$/, up.out);
    assert.equal((await sh("cat /etc/motd")).out, "a system sandbox", "the disk is the sandbox's");
  });

  it("answers ssh with the image's own sshd, whose host keys are each sandbox's own", async () => {
    const home = await mkdtemp(join(tmpdir(), "fvt-system-home-"));
    removeAtExit(home);
    await mkdir(join(home, ".ssh"), { mode: 0o700 });
    await run("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", join(home, ".ssh", "id_ed25519")]);
    const key = (await readFile(join(home, ".ssh", "id_ed25519.pub"), "utf8")).trim();
    const first = await apiRequest(server.url, "POST", `/sandboxes/${sb.id}/ssh`, { public_keys: [key] });
    assert.equal(first.status, 200, JSON.stringify(first.body));
    assert.equal(first.body.server, "image");
    assert.equal((await sh("systemctl is-active ssh.service")).out, "active");
    const other = await apiRequest(server.url, "POST", "/sandboxes", { image: SYSTEM_IMAGE, memory_mb: 512, name: "sys2" });
    assert.equal(other.status, 201, JSON.stringify(other.body));
    assert.match(server.forge.sandboxes.get(other.body.id).origin ?? "", /^(snapshot|prestarted)$/, "a second spawn restores the image's base, systemd running");
    // The host's own ssh client, through `forgevm ssh`'s ProxyCommand, into the image's sshd.
    const login = await runCli(
      ["--server", server.url, "ssh", "--key", `${join(home, ".ssh", "id_ed25519.pub")}`, "sys2", "--", "echo hi from $(hostname); ps -o comm= -p $PPID"],
      childEnv({ HOME: home }),
    );
    assert.equal(login.status, 0, login.stderr);
    assert.equal(login.stdout, `hi from ${other.body.id}\nsshd\n`);
    const second = await apiRequest(server.url, "POST", `/sandboxes/${other.body.id}/ssh`, { public_keys: [key] });
    assert.equal(second.status, 200, JSON.stringify(second.body));
    assert.ok(first.body.host_keys.length && second.body.host_keys.length);
    assert.notDeepEqual(first.body.host_keys, second.body.host_keys, "no two sandboxes of the image share a host key");
    await server.forge.sandboxes.destroy(other.body.id);
  });

  it("refuses systemd for an image without it, and a system image ForgeVM does not build, before anything starts", async () => {
    const before = server.forge.sandboxes.list().length;
    const r = await apiRequest(server.url, "POST", "/sandboxes", { image: DEFAULT_IMAGE, system: true });
    assert.equal(r.status, 400, JSON.stringify(r.body));
    assert.match(r.body.message, /^system: image forgevm\/debian:bookworm has no systemd/);
    assert.equal(server.forge.sandboxes.list().length, before);
    const scratch = pathsFor(await mkdtemp(join(tmpdir(), "fvt-system-")));
    removeAtExit(scratch.dataDir);
    await assert.rejects(
      ensureSystemImage(scratch, "ubuntu-24.04", () => {}),
      /no system image "ubuntu-24\.04".*debian-12.*Ubuntu's need its archive/,
    );
    // A spawn of a forgevm/ image the server neither has nor builds is a 400 that says how to get one.
    const unknown = await apiRequest(server.url, "POST", "/sandboxes", { image: "forgevm/system:ubuntu-24.04" });
    assert.equal(unknown.status, 400, JSON.stringify(unknown.body));
    assert.match(unknown.body.message, /^image: image "forgevm\/system:ubuntu-24\.04" is not in /);
    // The same through the CLI, as a user types it.
    const cli = await runCli(["--data-dir", scratch.dataDir, "image", "system", "ubuntu-24.04"], childEnv());
    assert.notEqual(cli.status, 0);
    assert.match(cli.stderr, /no system image "ubuntu-24\.04": the ones ForgeVM builds are debian-12/);
    const run = await runCli(["--server", server.url, "run", "--system", DEFAULT_IMAGE, "--", "true"], childEnv());
    assert.notEqual(run.status, 0);
    assert.match(run.stderr, /system: image forgevm\/debian:bookworm has no systemd/);
    // A template says it for its sandboxes, and the refusal names the template.
    const tpl = await apiRequest(server.url, "POST", "/templates", { name: "sys-on-plain", image: DEFAULT_IMAGE, system: true });
    assert.equal(tpl.status, 201, JSON.stringify(tpl.body));
    assert.equal(tpl.body.system, true);
    const fromTpl = await apiRequest(server.url, "POST", "/sandboxes", { template: "sys-on-plain" });
    assert.equal(fromTpl.status, 400, JSON.stringify(fromTpl.body));
    assert.match(fromTpl.body.message, /^template sys-on-plain: system: image forgevm\/debian:bookworm has no systemd/);
    assert.equal(server.forge.sandboxes.list().length, before, "nothing started");
  });

  it("boots without systemd when a spawn says system: false", async () => {
    const r = await apiRequest(server.url, "POST", "/sandboxes", { image: SYSTEM_IMAGE, system: false, memory_mb: 512 });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    const plain = server.forge.sandboxes.running(r.body.id);
    assert.equal((await sh("cat /proc/1/comm", plain)).out, "init");
    assert.equal((await apiRequest(server.url, "GET", `/sandboxes/${r.body.id}`)).body.init, undefined);
    await server.forge.sandboxes.destroy(r.body.id);
  });
});
