// Credential forwarding (guest/forwards.ts): a sandbox spawned with `forward: ["ssh-agent"]` has
// an SSH_AUTH_SOCK that reaches an ssh agent the test starts on the host. The guest lists the
// agent's key and gets a signature the host verifies, speaking the agent protocol itself (python3,
// in the default image), after a pause too; the agent's private key is nowhere in a snapshot of
// the sandbox, memory or disk. Kinds that cannot be forwarded, and a server with no agent, are
// refused with a 400 that says why. (git credentials: git-forward.test.ts.)
import assert from "node:assert/strict";
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { createPublicKey, verify } from "node:crypto";
import { mkdtemp, readdir, readFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { after, before, describe, it } from "node:test";
import type { RunningServer } from "../../src/compose/serve.js";
import { apiRequest, assertNoVmLeft, removeAtExit, startTestServer, waitFor } from "../helpers.js";
import { existsSync } from "node:fs";

const run = promisify(execFile);
let server: RunningServer;
let agent: ChildProcess;
let dir: string;
let publicBlob: Buffer;
let seed: Buffer;

/** Lists the agent's keys and has it sign `data` with the first; the keys' blobs and the signature, base64, a line each. */
const CLIENT = `
import base64, os, socket, struct, sys
def msg(s, t, body=b""):
    s.sendall(struct.pack(">IB", len(body) + 1, t) + body)
    n = struct.unpack(">I", s.recv(4, socket.MSG_WAITALL))[0]
    r = s.recv(n, socket.MSG_WAITALL)
    return r[0], r[1:]
def string(b, at):
    n = struct.unpack(">I", b[at:at + 4])[0]
    return b[at + 4:at + 4 + n], at + 4 + n
s = socket.socket(socket.AF_UNIX); s.connect(os.environ["SSH_AUTH_SOCK"])
t, body = msg(s, 11)
assert t == 12, t
count = struct.unpack(">I", body[:4])[0]; at = 4; blobs = []
for _ in range(count):
    blob, at = string(body, at); _comment, at = string(body, at); blobs.append(blob)
data = sys.argv[1].encode()
t, body = msg(s, 13, struct.pack(">I", len(blobs[0])) + blobs[0] + struct.pack(">I", len(data)) + data + struct.pack(">I", 0))
assert t == 14, t
sig, _ = string(body, 0)
print(" ".join(base64.b64encode(b).decode() for b in blobs)); print(base64.b64encode(sig).decode())
`;

/** The key blob and the 32-byte seed of an unencrypted OpenSSH ed25519 private key file. */
function parsePrivate(text: string): { blob: Buffer; seed: Buffer } {
  const raw = Buffer.from(text.replace(/-----[^-]+-----/g, "").replace(/\s+/g, ""), "base64");
  let at = "openssh-key-v1\0".length;
  const str = () => {
    const n = raw.readUInt32BE(at);
    const v = raw.subarray(at + 4, at + 4 + n);
    at += 4 + n;
    return v;
  };
  str(); // cipher
  str(); // kdf
  str(); // kdf options
  at += 4; // number of keys
  const blob = str();
  const priv = str();
  // checkints, key type, public key, then the 64-byte private key: seed and public key.
  let p = 8;
  const pstr = () => {
    const n = priv.readUInt32BE(p);
    const v = priv.subarray(p + 4, p + 4 + n);
    p += 4 + n;
    return v;
  };
  pstr();
  pstr();
  return { blob, seed: Buffer.from(pstr().subarray(0, 32)) };
}

before(async () => {
  dir = await mkdtemp(join(tmpdir(), "fvt-forward-"));
  removeAtExit(dir);
  const key = join(dir, "id_ed25519");
  await run("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-C", "forward-test", "-f", key]);
  ({ blob: publicBlob, seed } = parsePrivate(await readFile(key, "utf8")));
  const sock = join(dir, "agent.sock");
  agent = spawn("ssh-agent", ["-D", "-a", sock], { stdio: "ignore" });
  await waitFor(() => existsSync(sock), 10_000, "the host's ssh agent");
  await run("ssh-add", ["-q", key], { env: { ...process.env, SSH_AUTH_SOCK: sock } });
  server = await startTestServer((c) => {
    c.forward.ssh_agent = sock;
  });
});

after(async () => {
  await server?.close();
  agent?.kill();
  if (server) await assertNoVmLeft(server.forge);
});

/** The guest's view of its forwarded agent: the keys' blobs, and a signature of `data` the host checks. */
async function askAgent(id: string, data: string): Promise<{ blobs: Buffer[]; verified: boolean }> {
  const r = await apiRequest(server.url, "POST", `/sandboxes/${id}/exec`, { command: "python3", args: ["-c", CLIENT, data] });
  assert.equal(r.body.exit_code, 0, JSON.stringify(r.body));
  const [keys, sig] = r.body.stdout.trim().split("\n");
  const blobs = keys.split(" ").map((b: string) => Buffer.from(b, "base64"));
  // The signature blob: string "ssh-ed25519", string the 64 bytes.
  const s = Buffer.from(sig, "base64");
  const raw = s.subarray(4 + s.readUInt32BE(0) + 4);
  const pub = createPublicKey({ key: { kty: "OKP", crv: "Ed25519", x: publicBlob.subarray(publicBlob.length - 32).toString("base64url") }, format: "jwk" });
  return { blobs, verified: verify(null, Buffer.from(data), pub, raw) };
}

describe("ssh-agent forwarding", () => {
  it("the guest lists the host agent's key and gets signatures the host verifies, after a pause too; no private key is in a snapshot", async () => {
    const r = await apiRequest(server.url, "POST", "/sandboxes", { memory_mb: 256, forward: ["ssh-agent"] });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    const id = r.body.id;
    const env = await apiRequest(server.url, "POST", `/sandboxes/${id}/exec`, { command: "echo $SSH_AUTH_SOCK; ls -l $SSH_AUTH_SOCK" });
    assert.match(env.body.stdout, /^\/run\/forgevm\/ssh-agent\.sock\ns/);

    const first = await askAgent(id, "signed in the guest");
    assert.deepEqual(first.blobs, [publicBlob]);
    assert.ok(first.verified, "the host's key made the signature");

    assert.equal((await apiRequest(server.url, "POST", `/sandboxes/${id}/pause`)).status, 200);
    const again = await askAgent(id, "after a pause");
    assert.ok(again.verified, "forwarded again once resumed");

    const snap = await server.forge.snapshots.take(id);
    const files = await readdir(join(server.forge.paths.snapshotsDir, snap.id));
    assert.ok(files.length > 0);
    for (const f of files) {
      const bytes = await readFile(join(server.forge.paths.snapshotsDir, snap.id, f));
      assert.equal(bytes.indexOf(seed), -1, `the private key is not in the snapshot's ${f}`);
    }
    await server.forge.snapshots.remove(snap.id);
    await apiRequest(server.url, "DELETE", `/sandboxes/${id}`);
  });

  it("a template that forwards gives its sandboxes the agent", async () => {
    const t = await apiRequest(server.url, "POST", "/templates", { name: "with-agent", memory_mb: 256, forward: ["ssh-agent"] });
    assert.equal(t.status, 201, JSON.stringify(t.body));
    assert.deepEqual(t.body.forward, ["ssh-agent"]);
    const r = await apiRequest(server.url, "POST", "/templates/with-agent/spawn", {});
    assert.equal(r.status, 201, JSON.stringify(r.body));
    assert.ok((await askAgent(r.body.id, "from a template")).verified);
    await apiRequest(server.url, "DELETE", `/sandboxes/${r.body.id}`);
    const bad = await apiRequest(server.url, "POST", "/templates", { name: "odd", forward: ["gpg-agent"] });
    assert.equal(bad.status, 400);
    assert.match(bad.body.message, /forward: cannot forward "gpg-agent"/);
    await apiRequest(server.url, "DELETE", "/templates/with-agent");
  });

  it("a sandbox that does not ask forwards nothing", async () => {
    const r = await apiRequest(server.url, "POST", "/sandboxes", { memory_mb: 256 });
    const probe = await apiRequest(server.url, "POST", `/sandboxes/${r.body.id}/exec`, {
      command: '[ -n "$SSH_AUTH_SOCK" ] && echo "$SSH_AUTH_SOCK" || echo none; test -e /run/forgevm/ssh-agent.sock && echo there || echo absent',
    });
    assert.equal(probe.body.stdout, "none\nabsent\n");
    await apiRequest(server.url, "DELETE", `/sandboxes/${r.body.id}`);
  });

  it("refuses what cannot be forwarded, and ssh-agent where the server has no agent", async () => {
    const odd = await apiRequest(server.url, "POST", "/sandboxes", { forward: ["gpg-agent"] });
    assert.equal(odd.status, 400);
    assert.match(odd.body.message, /forward: cannot forward "gpg-agent": what can be forwarded is ssh-agent, git/);
    const bare = await startTestServer((c) => {
      c.forward.ssh_agent = "";
    });
    try {
      const none = await apiRequest(bare.url, "POST", "/sandboxes", { forward: ["ssh-agent"] });
      assert.equal(none.status, 400);
      assert.match(none.body.message, /ssh-agent needs an ssh agent where the server runs/);
      assert.deepEqual((await apiRequest(bare.url, "GET", "/sandboxes")).body, [], "nothing started");
    } finally {
      await bare.close();
    }
  });
});
