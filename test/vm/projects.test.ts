// Project files (docs/projects.md): `forgevm up` over a forgevm.toml creates its sandboxes, a
// second `up` changes nothing, an edit recreates only the sandbox it touches and says what
// changed, a `build` table is built once, `ps` in the directory lists only the project's, `down`
// stops and `down --rm` removes them. A file with an unknown key or a bad value is refused with
// its line, and nothing starts.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdir, mkdtemp, readFile, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, describe, it } from "node:test";
import type { RunningServer } from "../../src/compose/serve.js";
import { apiRequest, assertNoVmLeft, childEnv, removeAtExit, startTestServer } from "../helpers.js";

const CLI = fileURLToPath(new URL("../../src/cli/main.js", import.meta.url));
let server: RunningServer;
let dir: string;

/** The CLI run in the project's directory, as a user types it there. */
function forgevm(...args: string[]): Promise<{ status: number | null; stdout: string; stderr: string }> {
  return new Promise((done) => {
    const p = spawn(process.execPath, [CLI, "--server", server.url, ...args], { cwd: dir, env: childEnv() });
    let stdout = "";
    let stderr = "";
    p.stdout.on("data", (d) => (stdout += d));
    p.stderr.on("data", (d) => (stderr += d));
    p.on("close", (status) => done({ status, stdout, stderr }));
  });
}

const FILE = (greeting: string) => `name = "demo"

[sandboxes.shell]
memory_mb = 256
env = { GREETING = "${greeting}" }
mounts = ["./src:/srv/src:ro"]

[sandboxes.app]
build = "./app"
command = ["sleep", "infinity"]
restart = "unless-stopped"
memory_mb = 256
`;

const ids = async () => {
  const r = await forgevm("ps", "--json");
  assert.equal(r.status, 0, r.stderr);
  return Object.fromEntries((JSON.parse(r.stdout) as { name: string; id: string }[]).map((s) => [s.name, s.id]));
};

before(async () => {
  dir = await mkdtemp(join(tmpdir(), "fvt-project-"));
  removeAtExit(dir);
  server = await startTestServer((c) => {
    c.mounts.host_dirs = [dir];
  });
  await mkdir(join(dir, "src"));
  await writeFile(join(dir, "src", "notes.txt"), "live from the host\n");
  await mkdir(join(dir, "app"));
  await writeFile(join(dir, "app", "Dockerfile"), "FROM forgevm/debian:bookworm\nENV BUILT_BY=up\n");
  await writeFile(join(dir, "forgevm.toml"), FILE("hello"));
});

after(async () => {
  await server?.close();
  if (server) await assertNoVmLeft(server.forge);
});

describe("forgevm up and down", () => {
  it("up builds and creates what the file describes; a second up changes nothing", async () => {
    const first = await forgevm("up");
    assert.equal(first.status, 0, first.stderr);
    assert.match(first.stdout, /^app: building app as demo-app:[0-9a-f]{12}$/m);
    assert.match(first.stdout, /^shell: created$/m);
    assert.match(first.stdout, /^app: created$/m);
    const made = await ids();
    assert.deepEqual(Object.keys(made).sort(), ["demo-app", "demo-shell"]);
    const shell = await apiRequest(server.url, "POST", `/sandboxes/${made["demo-shell"]}/exec`, { command: "echo $GREETING; cat /srv/src/notes.txt" });
    assert.equal(shell.body.stdout, "hello\nlive from the host\n");
    const app = await apiRequest(server.url, "POST", `/sandboxes/${made["demo-app"]}/exec`, { command: "echo $BUILT_BY" });
    assert.equal(app.body.stdout, "up\n");

    const second = await forgevm("up");
    assert.equal(second.status, 0, second.stderr);
    assert.equal(second.stdout, "shell: up to date (running)\napp: up to date (running)\n");
    assert.deepEqual(await ids(), made, "the same sandboxes");
  });

  it("an edit recreates only the sandbox it touches, naming what changed", async () => {
    const before = await ids();
    await writeFile(join(dir, "forgevm.toml"), FILE("bonjour"));
    const r = await forgevm("up");
    assert.equal(r.status, 0, r.stderr);
    assert.equal(r.stdout, "shell: recreated (env changed)\napp: up to date (running)\n");
    const now = await ids();
    assert.notEqual(now["demo-shell"], before["demo-shell"]);
    assert.equal(now["demo-app"], before["demo-app"]);
    const shell = await apiRequest(server.url, "POST", `/sandboxes/${now["demo-shell"]}/exec`, { command: "echo $GREETING" });
    assert.equal(shell.body.stdout, "bonjour\n");
  });

  it("ps in the project's directory lists only its sandboxes; --no-project lists every one", async () => {
    const other = await apiRequest(server.url, "POST", "/sandboxes", { name: "outsider", memory_mb: 256 });
    assert.equal(other.status, 201, JSON.stringify(other.body));
    assert.deepEqual(Object.keys(await ids()).sort(), ["demo-app", "demo-shell"]);
    const all = await forgevm("ps", "--no-project", "--json");
    assert.ok((JSON.parse(all.stdout) as { name: string }[]).some((s) => s.name === "outsider"));
    await apiRequest(server.url, "DELETE", `/sandboxes/${other.body.id}`);
  });

  it("down stops them, up starts them again, down --rm removes them", async () => {
    const made = await ids();
    const down = await forgevm("down");
    assert.equal(down.status, 0, down.stderr);
    assert.match(down.stdout, /^shell: stopped$/m);
    assert.equal((await apiRequest(server.url, "GET", `/sandboxes/${made["demo-app"]}`)).body.state, "stopped");
    const up = await forgevm("up");
    assert.equal(up.stdout, "shell: started\napp: started\n");
    const rm = await forgevm("down", "--rm");
    assert.equal(rm.status, 0, rm.stderr);
    assert.match(rm.stdout, /^app: removed$/m);
    assert.deepEqual(await ids(), {});
  });
});

describe("a project file refused before anything starts", () => {
  it("an unknown key, a bad value or a missing directory names the key and its line, and starts nothing", async () => {
    const cases: [string, RegExp][] = [
      ['[sandboxes.a]\nmemory_mb = 256\ncolour = "red"\n', /forgevm\.toml:3: unknown key "colour" in \[sandboxes\.a\]/],
      ["[sandboxes.a]\nmemory_mb = 10\n", /forgevm\.toml:2: memory_mb must be >= 96/],
      ['[sandboxes.a]\nmounts = ["./nowhere:/x"]\n', /forgevm\.toml:2: mount source .*nowhere is not a directory/],
      ['[sandboxes.a]\nbuild = "./src"\n', /forgevm\.toml:2: .*Dockerfile does not exist/],
      ['[sandboxes.a]\nforward = ["gpg-agent"]\n', /forgevm\.toml:2: forward is a list of what to forward from the host: "ssh-agent", "git"/],
      ["[sandboxes.a]\nmemory_mb = \n", /forgevm\.toml:2: Invalid TOML document/],
    ];
    const good = await readFile(join(dir, "forgevm.toml"), "utf8");
    try {
      for (const [text, message] of cases) {
        await writeFile(join(dir, "forgevm.toml"), text);
        const r = await forgevm("up");
        assert.equal(r.status, 1, text);
        assert.match(r.stderr, message);
        assert.doesNotMatch(r.stderr, /INTERNAL_ERROR/);
      }
    } finally {
      await writeFile(join(dir, "forgevm.toml"), good);
    }
    const list = await apiRequest(server.url, "GET", "/sandboxes");
    assert.deepEqual(list.body, [], "nothing started");
  });
});
