// `forgevm tui` in a pseudo-terminal (util-linux's script): the dashboard draws, a key spawns a
// sandbox that appears in its table, another destroys it after a confirmation, q quits.
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { fileURLToPath } from "node:url";
import { after, before, it } from "node:test";
import type { RunningServer } from "../../src/compose/serve.js";
import { apiRequest, childEnv, startTestServer, waitFor } from "../helpers.js";

const main = fileURLToPath(new URL("../../src/cli/main.js", import.meta.url));
let server: RunningServer;
let tui: ChildProcess | null = null;
let screen = "";

before(async () => {
  // A sandbox's row shows its guest's memory from the first guest sample (every third tick): a
  // tick of 1 s rather than 5 has it there in seconds.
  server = await startTestServer((c) => {
    c.metrics.interval = "1s";
  });
});

after(async () => {
  if (tui && tui.exitCode === null) tui.kill("SIGKILL");
  await server?.close();
});

/** What the terminal showed so far, without its escape sequences. */
const ESC = String.fromCharCode(27);
const text = () => screen.replace(new RegExp(`${ESC}\\[[0-9;?]*[A-Za-z]`, "g"), "").replace(new RegExp(`${ESC}[()][A-Z0-9]`, "g"), "");

it("draws the dashboard in a terminal, spawns from a key, shows the sandbox, destroys it on a confirmed key, and quits", async () => {
  const quote = (s: string) => `'${s.replace(/'/g, "'\\''")}'`;
  const command = `stty cols 140 rows 40; exec ${quote(process.execPath)} ${quote(main)} --server ${quote(server.url)} tui`;
  tui = spawn("script", ["-qfec", command, "/dev/null"], { env: childEnv({ TERM: "xterm-256color" }), stdio: ["pipe", "pipe", "pipe"] });
  tui.stdout!.on("data", (d: Buffer) => (screen += d.toString()));
  tui.stderr!.on("data", (d: Buffer) => (screen += d.toString()));
  const exited = new Promise<number | null>((r) => tui!.once("exit", (code) => r(code)));
  const key = (k: string) => tui!.stdin!.write(k);
  await waitFor(() => /no sandboxes: press s to spawn one/.test(text()), 30_000, `the empty dashboard, got: ${text().slice(-500)}`);
  assert.match(text(), /SANDBOX\s+NAME\s+STATE\s+IMAGE\s+CPU\s+MEMORY/);

  key("s");
  let id = "";
  await waitFor(
    () => {
      id = /spawned (sb-[0-9a-f]{8})/.exec(text())?.[1] ?? "";
      return !!id;
    },
    120_000,
    `a spawn from the s key, got: ${text().slice(-500)}`,
  );
  assert.equal((await apiRequest(server.url, "GET", `/sandboxes/${id}`)).body.state, "running");
  await waitFor(() => new RegExp(`${id}\\s+-\\s+running\\s+forgevm/debian`).test(text()), 30_000, "its row in the table");
  await waitFor(() => text().includes(`sandbox.running ${id}`), 30_000, "its event");

  // p pauses the selected sandbox (its row says so), and p again resumes it.
  key("p");
  await waitFor(() => text().includes(`paused ${id}`), 60_000, `the pause, got: ${text().slice(-500)}`);
  assert.equal((await apiRequest(server.url, "GET", `/sandboxes/${id}`)).body.state, "paused");
  await waitFor(() => new RegExp(`${id}\\s+-\\s+paused`).test(text()), 30_000, "its row says paused");
  key("p");
  await waitFor(() => text().includes(`resumed ${id}`), 60_000, `the resume, got: ${text().slice(-500)}`);
  assert.equal((await apiRequest(server.url, "GET", `/sandboxes/${id}`)).body.state, "running");

  key("d");
  await waitFor(() => text().includes(`destroy ${id}? y to confirm`), 10_000, "the confirmation");
  key("y");
  await waitFor(() => text().includes(`destroyed ${id}`), 60_000, `the destroy, got: ${text().slice(-500)}`);
  assert.equal((await apiRequest(server.url, "GET", `/sandboxes/${id}`)).status, 404);

  key("q");
  assert.equal(await exited, 0, text().slice(-500));
});

it("refuses to run without a terminal, saying what to use instead", async () => {
  const p = spawn(process.execPath, [main, "--server", server.url, "tui"], { env: childEnv(), stdio: ["pipe", "pipe", "pipe"] });
  let err = "";
  p.stderr!.on("data", (d: Buffer) => (err += d));
  const code = await new Promise<number | null>((r) => p.once("exit", r));
  assert.notEqual(code, 0);
  assert.match(err, /needs a terminal \(use forgevm stats or forgevm ps in scripts\)/);
});

it("keeps the selection after a shell, takes keys typed in a burst, shows recent events at start and help on ?", async () => {
  const ids: string[] = [];
  for (let i = 0; i < 2; i++) ids.push((await apiRequest(server.url, "POST", "/sandboxes", { ttl: "10m" })).body.id);
  const [older, newer] = ids; // listed newest first
  screen = "";
  const quote = (s: string) => `'${s.replace(/'/g, "'\\''")}'`;
  const command = `stty cols 140 rows 40; exec ${quote(process.execPath)} ${quote(main)} --server ${quote(server.url)} tui`;
  tui = spawn("script", ["-qfec", command, "/dev/null"], { env: childEnv({ TERM: "xterm-256color" }), stdio: ["pipe", "pipe", "pipe"] });
  tui.stdout!.on("data", (d: Buffer) => (screen += d.toString()));
  const exited = new Promise<number | null>((r) => tui!.once("exit", (code) => r(code)));
  const key = (k: string) => tui!.stdin!.write(k);
  try {
    // Events from before it started are there at once.
    await waitFor(() => text().includes(`sandbox.running ${newer}`), 30_000, `recent events at start, got: ${text().slice(-800)}`);
    key("?");
    await waitFor(() => text().includes("KEYS (any key closes this)") && text().includes("open a shell in the selected sandbox"), 10_000, "the help");
    key(" ");
    // A shell in the first row (the newer), and back.
    key("\r");
    await waitFor(() => text().includes(`shell in ${newer}`), 30_000, "the shell");
    await new Promise((r) => setTimeout(r, 3000));
    key("exit\r");
    const back = screen.length;
    await waitFor(() => screen.slice(back).includes("SANDBOX"), 30_000, "the dashboard again");
    assert.ok(screen.slice(back - 200).includes(`${ESC}[2J`), "the screen is cleared after the shell");
    // Select the other one; refreshes (every 2 s) must not move the selection back to the shell's.
    key("j");
    await new Promise((r) => setTimeout(r, 5000));
    key("kjd"); // one burst: up, down, destroy → the older one
    await waitFor(() => text().includes(`destroy ${older}? y to confirm`), 10_000, `the confirmation for ${older}, got: ${text().slice(-600)}`);
    key("n");
    await waitFor(() => text().endsWith("kept") || text().includes("kept"), 10_000, "kept");
    key("q");
    assert.equal(await exited, 0, text().slice(-500));
  } finally {
    for (const id of ids) await apiRequest(server.url, "DELETE", `/sandboxes/${id}`);
  }
});

it("fits 80 columns without wrapping a row, and draws on the alternate screen, which quitting leaves", async () => {
  const made = await apiRequest(server.url, "POST", "/sandboxes", { name: "a-rather-long-name-for-the-column", memory_mb: 256 });
  assert.equal(made.status, 201, JSON.stringify(made.body));
  const id = made.body.id as string;
  screen = "";
  const quote = (s: string) => `'${s.replace(/'/g, "'\\''")}'`;
  const command = `stty cols 80 rows 30; exec ${quote(process.execPath)} ${quote(main)} --server ${quote(server.url)} tui`;
  tui = spawn("script", ["-qfec", command, "/dev/null"], { env: childEnv({ TERM: "xterm-256color" }), stdio: ["pipe", "pipe", "pipe"] });
  tui.stdout!.on("data", (d: Buffer) => (screen += d.toString()));
  const exited = new Promise<number | null>((r) => tui!.once("exit", (code) => r(code)));
  // The whole row on one line, its memory figures at its end: a row that wrapped would have them on the next.
  const row = () =>
    text()
      .split(/\r?\n/)
      .filter((l) => l.startsWith(id))
      .at(-1) ?? "";
  await waitFor(() => / [0-9.]+ [KMG]iB \/ [0-9.]+ [KMG]iB\s*$/.test(row()), 60_000, `the sandbox's whole row, with its memory, got: ${JSON.stringify(row())}`);
  assert.ok(row().trimEnd().length <= 80, `the row fits: ${JSON.stringify(row())}`);
  assert.ok(screen.includes(`${ESC}[?1049h`), "drawn on the alternate screen");
  tui.stdin!.write("q");
  assert.equal(await exited, 0);
  assert.ok(screen.lastIndexOf(`${ESC}[?1049l`) > screen.lastIndexOf(`${ESC}[?1049h`), "quitting leaves it");
  await apiRequest(server.url, "DELETE", `/sandboxes/${id}`);
});
