// The README's commands and the guides' snippets, run as written: the tour through the CLI and curl
// against a server of the test's own, the in-process snippet on a data directory of its own.
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import type { RunningServer } from "../../src/compose/serve.js";
import { defaultConfig } from "../../src/config/config.js";
import { run } from "../../src/util/process.js";
import { childEnv, startTestServer, testDataDir } from "../helpers.js";

const repo = fileURLToPath(new URL("../../../", import.meta.url));
const readme = () => readFile(join(repo, "README.md"), "utf8");

/** The shell block that follows `<!-- NAME -->` in a markdown text. */
function block(text: string, name: string): string {
  const m = new RegExp(`<!-- ${name} -->\\s*\`\`\`(?:sh|js)\\n([\\s\\S]*?)\`\`\``).exec(text);
  assert.ok(m, `the text has the ${name} block`);
  return m[1];
}

describe("the README's commands, against a server of the test's own", () => {
  let server: RunningServer;
  let host: string;
  let env: NodeJS.ProcessEnv;
  let cwd: string;

  before(async () => {
    server = await startTestServer();
    host = new URL(server.url).host;
    cwd = await mkdtemp(join(tmpdir(), "forgevm-tour-"));
    // This checkout's forgevm first on PATH; the server named as a user of another port would name it.
    env = childEnv({
      PATH: `${join(repo, "bin")}:${process.env.PATH}`,
      FORGEVM_URL: server.url,
      FORGEVM_DATA_DIR: server.forge.paths.dataDir,
    });
  });
  after(async () => {
    await server?.close("destroy");
    await rm(cwd, { recursive: true, force: true });
  });

  it("the tour runs as written: a throwaway run, spawn, exec, cp both ways, snapshot, fork, restore, pause, ps, clean-up", async () => {
    const tour = block(await readme(), "tour");
    const since = server.forge.events.replay(0).at(-1)?.seq ?? 0;
    const { stdout, stderr } = await run("bash", ["-euo", "pipefail", "-c", tour], { cwd, env }).catch((e) => {
      throw new Error(`the tour failed: ${(e as Error).message}`);
    });
    const lines = stdout.split("\n");
    assert.equal(lines[0], "42", `forgevm run printed: ${stdout}\n${stderr}`);
    assert.match(stdout, /^Linux \d/m, "uname -sr in the sandbox");
    assert.equal(lines.filter((l) => l === "hello from a file").length, 3, "the file, read in the sandbox, in its restored copy and after the pause");
    assert.equal(await readFile(join(cwd, "out.txt"), "utf8"), "hello from a file\n", "the file copied out of the sandbox");
    assert.match(stdout, /^ID\s+NAME/m, "ps printed its table");
    // It was this server the tour drove (never one at the default address): it saw the fork and the named snapshot.
    const seen = server.forge.events.replay(since).map((e) => e.type);
    assert.ok(seen.includes("sandbox.forked") && seen.includes("snapshot.created"), `the test server's events: ${[...new Set(seen)].join(", ")}`);
    // The clean-up removed everything the tour made.
    assert.deepEqual(
      server.forge.sandboxes.list().map((s) => s.id),
      [],
      "no sandbox is left",
    );
    assert.ok(!server.forge.snapshots.list().some((s) => s.name === "tour-ready"), "the snapshot is gone");
  });

  it("the curl block runs as written, against the test server's address instead of the default one it names", async () => {
    // The README names the server's default address; the test's own takes its place, every time.
    const named = `localhost:${defaultConfig({}).server.port}`;
    const written = block(await readme(), "tour-rest");
    assert.ok(written.includes(named), `the block names ${named}`);
    const script = written.replaceAll(named, host);
    assert.ok(!script.includes(named) && script.includes(host));
    const { stdout } = await run("bash", ["-euo", "pipefail", "-c", script], { cwd, env });
    const [execLine, deleteLine] = stdout.replace("}{", "}\n{").trim().split("\n");
    const exec = JSON.parse(execLine);
    assert.equal(exec.exit_code, 0, `curl printed: ${stdout}`);
    assert.equal(exec.stdout, "hello from ForgeVM\n");
    assert.deepEqual(JSON.parse(deleteLine), { status: "destroyed" });
  });
});

it("the in-process snippet of docs/sdks.md prints 42 (on a data directory of its own, named by FORGEVM_DATA_DIR)", async () => {
  const code = block(await readFile(join(repo, "docs", "sdks.md"), "utf8"), "snippet:hello");
  const file = join(repo, `.readme-hello-${process.pid}.mjs`);
  await writeFile(file, code);
  const dataDir = await testDataDir();
  try {
    const { stdout } = await run(process.execPath, [file], { cwd: repo, env: childEnv({ FORGEVM_DATA_DIR: dataDir }) });
    assert.equal(stdout, "42\n");
  } finally {
    await rm(file, { force: true });
    await rm(dataDir, { recursive: true, force: true });
  }
});

it("the README names the set-up and test commands CI runs, and stays a short guide", async () => {
  const text = await readme();
  const ci = await readFile(join(repo, ".ci", "run"), "utf8");
  assert.match(text, /```sh\n\.\/setup\.sh && forgevm serve\n```/);
  assert.match(text, /```sh\nnpm test\n```/);
  assert.match(ci, /^\.\/setup\.sh$/m);
  assert.match(ci, /^npm test$/m);
  assert.ok(text.length < 10_000, `the README is ${text.length} characters: the reference belongs in docs/`);
});

it("every relative link in the README and docs/ names a file that exists", async () => {
  const files = ["README.md", ...(await readdir(join(repo, "docs"))).filter((f) => f.endsWith(".md")).map((f) => `docs/${f}`)];
  const broken: string[] = [];
  for (const f of files) {
    const text = await readFile(join(repo, f), "utf8");
    for (const [, target] of text.matchAll(/\]\(([^)\s]+)\)/g)) {
      if (/^[a-z]+:|^#/.test(target)) continue;
      if (!existsSync(join(repo, dirname(f), target.split("#")[0]))) broken.push(`${f}: ${target}`);
    }
  }
  assert.deepEqual(broken, []);
});
