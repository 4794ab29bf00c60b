// git with forwarded credentials (guest/forwards.ts, git-credentials.ts), in the code-interpreter
// image, which has git and ssh's client. Over http and https: a repository the host serves behind Basic
// auth, whose password only the host user's own git credential store holds, is cloned in the
// guest; a host its egress does not allow gets nothing, though the host knows a credential for it;
// nothing the guest does reaches the host's store. Over ssh: `ssh-add -L` lists the key of an ssh
// agent the test starts on the host, and a repository served by an sshd that authorizes only that
// key is cloned with it; without the agent the same clone is refused; no private key is in the
// guest's memory or disk. (The ssh server runs inside the sandbox, on its loopback: a sandbox
// reaches no ssh port of this machine's, by design; network.test.ts shows those walls.)
import assert from "node:assert/strict";
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, readdir, readFile, writeFile } from "node:fs/promises";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { createServer as createHttpsServer, type Server as HttpsServer } from "node:https";
import { tmpdir } from "node:os";
import { join, normalize } from "node:path";
import { promisify } from "node:util";
import { after, before, describe, it } from "node:test";
import { CODE_IMAGE, DEFAULT_IMAGE } from "../../src/core/forge.js";
import type { Forge, Sandbox } from "../../src/index.js";
import { assertNoVmLeft, openForge, removeAtExit, waitFor } from "../helpers.js";

const run = promisify(execFile);
const GIT_HOST = "git.forgevm.test"; // the proxy's test-only override sends both names to 127.0.0.1
const SECRET_HOST = "secret.forgevm.test"; // ... and this one is on no allowlist
let dir: string;
let web: Server;
let port: number;
let tls: HttpsServer;
let tlsPort: number;
let cert: string;
let served = 0;
let agent: ChildProcess;
let publicLine: string;
let privateKey: string;
let forge: Forge;
let sb: Sandbox;
let store: string;

const sh = async (command: string, user?: string) => {
  const r = await sb.exec(command, { timeoutMs: 60_000, ...(user ? { user } : {}) });
  return { code: r.exitCode, out: r.stdout, err: r.stderr };
};

before(async () => {
  dir = await mkdtemp(join(tmpdir(), "fvt-git-forward-"));
  removeAtExit(dir);
  // A repository served with git's dumb http protocol, behind Basic auth.
  const g = (args: string[], cwd = dir) => run("git", ["-c", "user.name=host", "-c", "user.email=host@example.test", "-c", "init.defaultBranch=main", ...args], { cwd });
  await g(["init", "-q", "--bare", "origin.git"]);
  await g(["init", "-q", "work"]);
  await writeFile(join(dir, "work", "README"), "cloned with the host's credential\n");
  await g(["add", "README"], join(dir, "work"));
  await g(["commit", "-q", "-m", "first"], join(dir, "work"));
  await g(["push", "-q", join(dir, "origin.git"), "main"], join(dir, "work"));
  await g(["update-server-info"], join(dir, "origin.git"));
  const expected = `Basic ${Buffer.from("alice:s3cret-only-the-host-has").toString("base64")}`;
  const serve = async (req: IncomingMessage, res: ServerResponse) => {
    if (req.headers.authorization !== expected) {
      res.writeHead(401, { "WWW-Authenticate": 'Basic realm="git"' }).end();
      return;
    }
    served++;
    const path = normalize(decodeURIComponent(new URL(req.url ?? "/", "http://x").pathname));
    const file = await readFile(join(dir, path)).catch(() => null);
    if (!file || !path.startsWith("/origin.git/")) res.writeHead(404).end();
    else res.writeHead(200).end(file);
  };
  web = createServer(serve);
  await new Promise<void>((r) => web.listen(0, "127.0.0.1", r));
  port = (web.address() as { port: number }).port;
  // The same repository over https, with a certificate of its own that the guest is told to trust.
  await run("openssl", [
    "req",
    "-x509",
    "-newkey",
    "rsa:2048",
    "-nodes",
    "-days",
    "1",
    "-subj",
    `/CN=${GIT_HOST}`,
    "-addext",
    `subjectAltName=DNS:${GIT_HOST}`,
    "-keyout",
    join(dir, "tls.key"),
    "-out",
    join(dir, "tls.crt"),
  ]);
  cert = await readFile(join(dir, "tls.crt"), "utf8");
  tls = createHttpsServer({ key: await readFile(join(dir, "tls.key")), cert }, serve);
  await new Promise<void>((r) => tls.listen(0, "127.0.0.1", r));
  tlsPort = (tls.address() as { port: number }).port;
  // The host user's own credentials: git's store, read by `git credential fill` where the server runs.
  store = join(dir, "credentials");
  await writeFile(
    store,
    `http://alice:s3cret-only-the-host-has@${GIT_HOST}%3a${port}\nhttps://alice:s3cret-only-the-host-has@${GIT_HOST}%3a${tlsPort}\nhttp://bob:hunter2-for-another-host@${SECRET_HOST}%3a${port}\n`,
    { mode: 0o600 },
  );
  await writeFile(join(dir, "gitconfig"), `[credential]\n\thelper = store --file=${store}\n`);
  process.env.GIT_CONFIG_GLOBAL = join(dir, "gitconfig");
  process.env.GIT_CONFIG_NOSYSTEM = "1";
  // The host's ssh agent, holding a key no file in the guest has.
  const key = join(dir, "id_ed25519");
  await run("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-C", "host-key", "-f", key]);
  publicLine = (await readFile(`${key}.pub`, "utf8")).trim();
  privateKey = await readFile(key, "utf8");
  const sock = join(dir, "agent.sock");
  agent = spawn("ssh-agent", ["-D", "-a", sock], { stdio: "ignore" });
  await waitFor(() => existsSync(sock), 10_000, "the host's ssh agent");
  await run("ssh-add", ["-q", key], { env: { ...process.env, SSH_AUTH_SOCK: sock } });

  forge = await openForge({ sshAgentSocket: sock, network: { hostsOverride: { [GIT_HOST]: "127.0.0.1", [SECRET_HOST]: "127.0.0.1" } } }, [DEFAULT_IMAGE, CODE_IMAGE]);
  sb = await forge.sandboxes.spawn({ image: CODE_IMAGE, memoryMb: 384, allow: [`${GIT_HOST}:${port}`, `${GIT_HOST}:${tlsPort}`], forward: ["ssh-agent", "git"] });
});

after(async () => {
  await forge?.close();
  web?.close();
  tls?.close();
  agent?.kill();
  if (forge) await assertNoVmLeft(forge);
});

describe("git credentials forwarded", () => {
  it("clones over http with a password only the host has, for a host its egress allows and no other, and stores nothing on the host", async () => {
    const clone = await sh(`cd /tmp && GIT_TERMINAL_PROMPT=0 git clone -q http://${GIT_HOST}:${port}/origin.git viahttp && cat viahttp/README`);
    assert.equal(clone.code, 0, clone.err);
    assert.equal(clone.out, "cloned with the host's credential\n");
    assert.ok(served > 0, "the host's server let the clone in with the credential");

    // The host knows a credential for the other host (the control), but the sandbox may not reach it: none is given.
    const ask = (host: string) => `printf 'protocol=http\\nhost=${host}:${port}\\n\\n' | GIT_TERMINAL_PROMPT=0 git credential fill`;
    const onHost = await run("sh", ["-c", ask(SECRET_HOST)]);
    assert.match(onHost.stdout, /password=hunter2-for-another-host/);
    const refused = await sh(ask(SECRET_HOST));
    assert.notEqual(refused.code, 0);
    assert.doesNotMatch(refused.out + refused.err, /hunter2/);
    const given = await sh(ask(GIT_HOST));
    assert.match(given.out, /^username=alice$/m);

    // Approve and reject from the guest reach no helper of the host's.
    const before = await readFile(store, "utf8");
    await sh(`printf 'protocol=http\\nhost=${GIT_HOST}:${port}\\nusername=eve\\npassword=planted\\n\\n' | git credential approve`);
    await sh(`printf 'protocol=http\\nhost=${GIT_HOST}:${port}\\n\\n' | git credential reject`);
    assert.equal(await readFile(store, "utf8"), before);
    const kept = await sh("grep -rl s3cret-only-the-host-has /root /home /tmp /etc 2>/dev/null || true");
    assert.equal(kept.out, "", "git kept the password in no file");
  });
});

describe("git credentials forwarded over https", () => {
  it("clones over https with the password only the host has, the server's certificate trusted in the guest", async () => {
    await sb.writeFile("/tmp/git-server.crt", Buffer.from(cert));
    const before = served;
    const clone = await sh(
      `cd /tmp && GIT_TERMINAL_PROMPT=0 GIT_SSL_CAINFO=/tmp/git-server.crt git clone -q https://${GIT_HOST}:${tlsPort}/origin.git viahttps && cat viahttps/README`,
    );
    assert.equal(clone.code, 0, clone.err);
    assert.equal(clone.out, "cloned with the host's credential\n");
    assert.ok(served > before, "the https server let the clone in with the credential");
    const kept = await sh("grep -rl s3cret-only-the-host-has /root /home /tmp /etc 2>/dev/null || true");
    assert.equal(kept.out, "", "git kept the password in no file");
  });
});

describe("ssh-agent forwarded", () => {
  it("ssh-add -L lists the host's key, and git clones over ssh from a server that only that key opens", async () => {
    const listed = await sh("ssh-add -L");
    assert.equal(listed.code, 0, listed.err);
    assert.equal(listed.out.trim().split(" ").slice(0, 2).join(" "), publicLine.split(" ").slice(0, 2).join(" "));

    const access = await forge.ssh.prepare(sb.id, { publicKeys: [publicLine] });
    const home = (await sh("cd && pwd", access.user)).out.trim();
    const made = await sh(
      `set -e; cd ${home}; git init -q --bare served.git; git init -q w; cd w; echo 'over ssh' > f; git add f; git -c user.name=g -c user.email=g@example.test commit -q -m one; git push -q ../served.git HEAD:refs/heads/main`,
      access.user,
    );
    assert.equal(made.code, 0, made.err);
    const ssh = "ssh -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes -o LogLevel=ERROR";
    const clone = (env: string) =>
      sh(
        `cd /tmp && ${env} GIT_SSH_COMMAND='${ssh}' git clone -q -b main ssh://${access.user}@127.0.0.1${home}/served.git ${env ? "noagent" : "viassh"} && cat ${env ? "noagent" : "viassh"}/f`,
      );
    const viaAgent = await clone("");
    assert.equal(viaAgent.code, 0, viaAgent.err);
    assert.equal(viaAgent.out, "over ssh\n");
    const withoutAgent = await clone("SSH_AUTH_SOCK=");
    assert.notEqual(withoutAgent.code, 0, "only the host's key opens it");
    assert.match(withoutAgent.err, /Permission denied/);

    const snap = await forge.snapshots.take(sb.id);
    const seedLine = privateKey.split("\n")[2]; // a line of the key's base64: in no file and no page of the guest
    const files = await readdir(join(forge.paths.snapshotsDir, snap.id));
    assert.ok(files.length > 0);
    for (const f of files) {
      const bytes = await readFile(join(forge.paths.snapshotsDir, snap.id, f));
      assert.equal(bytes.indexOf(seedLine), -1, `the private key is not in the snapshot's ${f}`);
    }
    await forge.snapshots.remove(snap.id);
  });
});
