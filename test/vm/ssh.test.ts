// ssh, scp, rsync and sftp into sandboxes through `forgevm ssh-config --install`'s entries
// (docs/ssh.md): the host's own OpenSSH client, a ProxyCommand that carries the connection over
// the server's WebSocket to the guest's port 22, and the sshd the server brings into a default
// image that has none. The tests run ssh with `-F` on a config in a home of their own: ssh reads
// the passwd entry's home, never $HOME, so nothing of this machine's user is read or written.
import assert from "node:assert/strict";
import { execFile, spawn } from "node:child_process";
import { mkdir, mkdtemp, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import type { RunningServer } from "../../src/compose/serve.js";
import { apiRequest, assertNoVmLeft, childEnv, removeAtExit, runCli, startTestServer, waitFor } from "../helpers.js";
import { freePort } from "../ports.js";
import { writeBusyboxImage } from "../oci-writer.js";
import { tmpdir } from "node:os";

let server: RunningServer;
let home: string;
let env: NodeJS.ProcessEnv;
let pub: string;
let sshConfig: string;
let id: string;

const cli = (...args: string[]) => runCli(["--server", server.url, ...args], env);

/** Runs a program of the host (ssh, scp, rsync, sftp) with the test's home; its exit code and output. */
function host(cmd: string, args: string[], input?: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((done) => {
    const p = spawn(cmd, args, { env, cwd: home });
    let stdout = "";
    let stderr = "";
    p.stdout.on("data", (d) => (stdout += d));
    p.stderr.on("data", (d) => (stderr += d));
    p.stdin.end(input);
    p.on("close", (code) => done({ code, stdout, stderr }));
  });
}

const ssh = (...args: string[]) => host("ssh", ["-F", sshConfig, ...args]);

before(async () => {
  server = await startTestServer();
  home = await mkdtemp(join(tmpdir(), "fvt-ssh-home-"));
  removeAtExit(home);
  env = childEnv({ HOME: home });
  await mkdir(join(home, ".ssh"), { mode: 0o700 });
  await new Promise<void>((done, fail) => execFile("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", join(home, ".ssh", "id_ed25519")], (e) => (e ? fail(e) : done())));
  pub = join(home, ".ssh", "id_ed25519.pub");
  sshConfig = join(home, ".ssh", "config");
  // The user's own entries stay where they are, below the block the command owns.
  await writeFile(sshConfig, "Host mine\n  HostName example.invalid\n", { mode: 0o600 });
  const r = await apiRequest(server.url, "POST", "/sandboxes", { name: "box" });
  assert.equal(r.status, 201, JSON.stringify(r.body));
  id = r.body.id;
});

after(async () => {
  await server?.close();
  if (server) await assertNoVmLeft(server.forge);
});

describe("ssh into a sandbox", () => {
  it("ssh-config --install writes an entry that `ssh forgevm-NAME` logs in with, pinning the host key without asking, and a second install replaces its block", async () => {
    const printed = await cli("ssh-config", "--key", pub);
    assert.equal(printed.status, 0, printed.stderr);
    assert.match(printed.stdout, /^Host forgevm-box$/m);
    for (let i = 0; i < 2; i++) {
      const r = await cli("ssh-config", "--install", "--key", pub);
      assert.equal(r.status, 0, r.stderr);
    }
    const config = await readFile(sshConfig, "utf8");
    assert.equal(config.match(/^Host forgevm-box$/gm)?.length, 1, config);
    assert.match(config, /^Host mine$/m, "the user's own entry is kept");
    assert.ok(config.indexOf("Host forgevm-box") < config.indexOf("Host mine"), "the block comes first, so its options win");
    const r = await ssh("-o", "BatchMode=yes", "forgevm-box", "echo hi from $(hostname) as $(id -un)");
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /^hi from .* as root$/m);
    const known = await readFile(join(home, ".ssh", "forgevm_known_hosts"), "utf8");
    assert.match(known, new RegExp(`^forgevm-${id} ssh-ed25519 `, "m"));
  });

  it("scp and rsync carry files both ways, and sftp runs a session", async () => {
    await writeFile(join(home, "up.txt"), "scp payload\n");
    const up = await host("scp", ["-F", sshConfig, "-q", join(home, "up.txt"), "forgevm-box:/tmp/up.txt"]);
    assert.equal(up.code, 0, up.stderr);
    const down = await host("scp", ["-F", sshConfig, "-q", "forgevm-box:/tmp/up.txt", join(home, "down.txt")]);
    assert.equal(down.code, 0, down.stderr);
    assert.equal(await readFile(join(home, "down.txt"), "utf8"), "scp payload\n");

    await mkdir(join(home, "tree", "sub"), { recursive: true });
    await writeFile(join(home, "tree", "sub", "f.txt"), "rsync payload\n");
    const e = `ssh -F ${sshConfig}`;
    const rup = await host("rsync", ["-a", "-e", e, `${join(home, "tree")}/`, "forgevm-box:/tmp/tree/"]);
    assert.equal(rup.code, 0, rup.stderr);
    assert.equal((await ssh("forgevm-box", "cat /tmp/tree/sub/f.txt")).stdout, "rsync payload\n");
    const rdown = await host("rsync", ["-a", "-e", e, "forgevm-box:/tmp/tree/", `${join(home, "back")}/`]);
    assert.equal(rdown.code, 0, rdown.stderr);
    assert.equal(await readFile(join(home, "back", "sub", "f.txt"), "utf8"), "rsync payload\n");

    const s = await host("sftp", ["-F", sshConfig, "-b", "-", "forgevm-box"], "mkdir /tmp/by-sftp\nput up.txt /tmp/by-sftp/x.txt\nls /tmp/by-sftp\n");
    assert.equal(s.code, 0, s.stderr);
    assert.match(s.stdout, /\/tmp\/by-sftp\/x\.txt/);
  });

  it("`forgevm ssh` logs in as another account of the guest, one useradd left locked", async () => {
    const made = await cli("exec", "box", "--", "useradd", "-m", "-s", "/bin/sh", "dev");
    assert.equal(made.status, 0, made.stderr);
    const r = await cli("ssh", "-u", "dev", "--key", pub, "box", "--", "id -un; pwd");
    assert.equal(r.status, 0, r.stderr);
    assert.equal(r.stdout, "dev\n/home/dev\n");
  });

  it("a paused sandbox is resumed by the connection", async () => {
    assert.equal((await apiRequest(server.url, "POST", `/sandboxes/${id}/pause`)).status, 200);
    const r = await ssh("forgevm-box", "echo awake");
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, "awake\n");
    assert.equal((await apiRequest(server.url, "GET", `/sandboxes/${id}`)).body.state, "running");
  });

  it("forwards a port of the host to one in the guest, as VS Code's Remote-SSH does to reach its server", async () => {
    const served = await cli(
      "exec",
      "box",
      "--",
      "sh",
      "-c",
      "mkdir -p /tmp/served && echo forwarded > /tmp/served/hello.txt && cd /tmp/served && (nohup python3 -m http.server 8765 --bind 127.0.0.1 >/dev/null 2>&1 &)",
    );
    assert.equal(served.status, 0, served.stderr);
    const port = await freePort();
    const tunnel = spawn("ssh", ["-F", sshConfig, "-N", "-o", "BatchMode=yes", "-o", "ExitOnForwardFailure=yes", "-L", `127.0.0.1:${port}:127.0.0.1:8765`, "forgevm-box"], {
      env,
      cwd: home,
      stdio: "ignore",
    });
    try {
      let body: string | null = null;
      await waitFor(
        async () => {
          body = await fetch(`http://127.0.0.1:${port}/hello.txt`).then(
            (r) => (r.ok ? r.text() : null),
            () => null,
          );
          return body !== null;
        },
        30_000,
        "the forwarded port",
      );
      assert.equal(body, "forwarded\n");
    } finally {
      tunnel.kill();
    }
  });

  it("a host key that changed is refused", async () => {
    // The guest's sshd gets a new key (as a sandbox someone rebuilt would): the pinned one no longer matches.
    const swap = await cli("exec", "box", "--", "sh", "-c", "kill $(cat /opt/forgevm/ssh/sshd.pid); rm /opt/forgevm/ssh/host_ed25519_key*");
    assert.equal(swap.status, 0, swap.stderr);
    const r = await ssh("forgevm-box", "echo should-not-run");
    assert.equal(r.code, 255);
    assert.doesNotMatch(r.stdout, /should-not-run/);
    assert.match(r.stderr, /REMOTE HOST IDENTIFICATION HAS CHANGED|Host key verification failed/);
  });
});

describe("ssh refused with a clear error", () => {
  it("bad public keys are a 400 naming the key, and an unknown account a 404", async () => {
    const bad = await apiRequest(server.url, "POST", `/sandboxes/${id}/ssh`, { public_keys: ["not a key"] });
    assert.equal(bad.status, 400);
    assert.match(bad.body.message, /public_keys\[0\]/);
    const none = await apiRequest(server.url, "POST", `/sandboxes/${id}/ssh`, { public_keys: [] });
    assert.equal(none.status, 400);
    const who = await apiRequest(server.url, "POST", `/sandboxes/${id}/ssh`, { public_keys: [await readFile(pub, "utf8")], user: "nobody-here" });
    assert.equal(who.status, 404);
    assert.match(who.body.message, /nobody-here/);
  });

  it("an image with no shell is refused, naming the shell", async () => {
    const dir = await mkdtemp(join(tmpdir(), "fvt-ssh-image-"));
    removeAtExit(dir);
    await server.forge.images.import(await writeBusyboxImage(dir, ["sleep"], [], { Env: ["PATH=/bin"] }), { name: "local/no-shell:1" });
    const sb = await apiRequest(server.url, "POST", "/sandboxes", { image: "local/no-shell:1" });
    assert.equal(sb.status, 201, JSON.stringify(sb.body));
    const r = await apiRequest(server.url, "POST", `/sandboxes/${sb.body.id}/ssh`, { public_keys: [await readFile(pub, "utf8")] });
    assert.equal(r.status, 400);
    assert.match(r.body.message, /no shell/);
    await apiRequest(server.url, "DELETE", `/sandboxes/${sb.body.id}`);
  });

  it("a stopped sandbox is refused, and a destroyed one's entry says so and what to do", async () => {
    assert.equal((await apiRequest(server.url, "POST", `/sandboxes/${id}/stop`)).status, 200);
    const stopped = await ssh("-o", "BatchMode=yes", "forgevm-box", "true");
    assert.equal(stopped.code, 255);
    assert.match(stopped.stderr, /is stopped/);
    assert.equal((await apiRequest(server.url, "DELETE", `/sandboxes/${id}`)).status, 200);
    const gone = await ssh("-o", "BatchMode=yes", "forgevm-box", "true");
    assert.equal(gone.code, 255);
    assert.match(gone.stderr, /is destroyed.*ssh-config --install/);
  });
});
