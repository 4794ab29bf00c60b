// Desktops for computer-use agents (docs/desktop.md), driven by E2B's desktop SDK (npm
// `@e2b/desktop@2.4.0`), unmodified, against a real server and the desktop image in a real VM: a
// create restores a desktop that is up; screenshots are PNGs of the screen's size whose pixels
// follow what happens; Firefox opens a page served in the sandbox, and a click and typed keys
// reach it (the page's own record, read back by a command); the sandbox's only way out is its
// egress proxy, and Firefox loads an HTTPS page through it, the egress rule's secret added and the
// egress CA trusted; windows are found by class and title; the noVNC live view opens in a
// headless Chromium through the server's port proxy (a WebSocket) and draws the screen, or one
// window alone (the SDK's window-scoped stream); a pause and a resume keep the desktop and its
// windows. Then Daytona's SDK (`@daytonaio/sdk`, unmodified) drives the same desktop through its
// computer-use API: its processes, display, screenshots (whole, a region, compressed), mouse and
// keyboard (the page records them again), screen recordings (an Ogg Theora file downloaded), and
// the 4xx of bad input and of a sandbox without one. Last, ForgeVM's own interfaces on the same
// desktop: the REST API through the TypeScript SDK (input checked by an X client that logs what
// reaches it) and the Python SDK, the live view in Chromium (a click in the interactive one reaches the sandbox, in
// the watch-only one it does not, and the guest's page runs in an origin of its own), MCP's
// `computer` tool in a desktop an agent makes, the CLI's screenshot and live view, and the
// console's Desktop tab.
import assert from "node:assert/strict";
import { mkdir, readFile, writeFile } from "node:fs/promises";
import { createServer } from "node:https";
import { execFile } from "node:child_process";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { after, before, describe, it } from "node:test";
import { Daytona, DaytonaError } from "@daytonaio/sdk";
import { Sandbox } from "@e2b/desktop";
import { ALL_TRAFFIC, Secret } from "e2b";
import { Client as McpClient } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { BadRequestError, Client, ConflictError, type Sandbox as ForgeSandbox } from "forgevm";
import { type Browser, chromium, type Locator, type Page } from "playwright-core";
import { startServer, type RunningServer } from "../../src/compose/serve.js";
import { DEFAULT_IMAGE, DESKTOP_IMAGE } from "../../src/images/store.js";
import { EgressCa } from "../../src/net/egress-ca.js";
import { preparedSystemImage } from "../../src/setup/index.js";
import { e2bEnv } from "../e2b-env.js";
import { assertNoVmLeft, childEnv, removeAtExit, runCli, testConfig, waitFor } from "../helpers.js";

const API_KEY = "e2b_desktop0123456789";
const REPO = fileURLToPath(new URL("../../..", import.meta.url));
const runFile = promisify(execFile);
/** A destination on the web, stood in for by a local HTTPS server, and the secret its egress rule adds. */
const API = "api.desktop.test";
const SECRET = "sk-desktop-7a1c9e3b5d";
let apiPort: number;
const apiSeen: { path: string; auth: string | undefined }[] = [];
let server: RunningServer;
let desktop: Sandbox;
let browser: Browser | undefined;

/** A page with a button over its top half and a text field over its bottom half, which tells the server in the sandbox what happens to them. */
const PAGE = `<!doctype html><title>forgevm desktop test</title>
<style>body{margin:0}#go,#field{position:fixed;left:0;width:100vw;height:50vh;font-size:40px;border:0}#go{top:0;background:#3a6}#field{top:50vh;background:#fe8}</style>
<button id="go">press</button><input id="field" autocomplete="off">
<script>
const tell = (what) => fetch('/record?' + new URLSearchParams({ what, value: field.value }));
go.onclick = () => { document.title = 'clicked ' + field.value; tell('click'); };
field.onkeydown = (e) => { if (e.key === 'Enter') tell('enter'); };
</script>`;

/** Serves PAGE at / and appends each /record query's what and value to /tmp/record.txt. */
const SERVER = `import http.server, urllib.parse
page = open('/home/user/page.html', 'rb').read()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        u = urllib.parse.urlparse(self.path)
        if u.path == '/record':
            q = urllib.parse.parse_qs(u.query)
            with open('/tmp/record.txt', 'a') as f:
                f.write(q.get('what', [''])[0] + ':' + q.get('value', [''])[0] + '\\n')
        self.send_response(200)
        self.send_header('content-type', 'text/html')
        self.end_headers()
        self.wfile.write(page if u.path == '/' else b'ok')
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(('127.0.0.1', 8000), H).serve_forever()
`;

/**
 * Starts an X client that logs the keys and buttons that reach its window (xev, line-buffered),
 * and answers the window's place once the window manager has shown it.
 */
async function xevWindow(exec: (command: string) => Promise<string>): Promise<{ x: number; y: number; width: number; height: number }> {
  await exec("rm -f /tmp/xev.log; DISPLAY=:0 setsid -f stdbuf -oL xev -name forgevm-xev -geometry 320x240+300+200 -event keyboard -event button >/tmp/xev.log 2>&1 </dev/null");
  // Debian 12's xdotool dies of a BadWindow error when another window goes away while it searches: searched again.
  const out = await exec(
    'for i in $(seq 50); do g=$(DISPLAY=:0 xdotool search --sync --onlyvisible --name forgevm-xev getwindowgeometry --shell 2>&1) && break; sleep 0.1; done; echo "$g" | head -n 5',
  );
  const g = Object.fromEntries(out.split("\n").map((l) => l.split("=")));
  const win = { x: Number(g.X), y: Number(g.Y), width: Number(g.WIDTH), height: Number(g.HEIGHT) };
  assert.ok(Object.values(win).every(Number.isInteger), `xev's window geometry: ${out}`);
  return win;
}

/** Where a point of the screen (1024x768) is in a noVNC canvas that scales it. */
async function onCanvas(canvas: Locator, x: number, y: number): Promise<{ x: number; y: number }> {
  const box = await canvas.boundingBox();
  assert.ok(box && box.width > 0, "the canvas is on the page");
  return { x: box.x + (x * box.width) / 1024, y: box.y + (y * box.height) / 768 };
}

/** Waits until a noVNC canvas has the screen's width (1024): it is drawing the desktop. */
async function drawn(canvas: Locator, what: string): Promise<void> {
  await waitFor(async () => ((await canvas.evaluate((c) => (c as unknown as { width: number }).width).catch(() => 0)) ?? 0) === 1024, 120_000, what);
}

/** Clicks a point of the screen on a noVNC canvas and waits for the sandbox's pointer to be there (within 4 px). */
async function clickReaches(page: Page, canvas: Locator, sb: ForgeSandbox, x: number, y: number, what: string): Promise<void> {
  const at = await onCanvas(canvas, x, y);
  await page.mouse.click(at.x, at.y);
  await waitFor(
    async () => {
      const c = await sb.desktop.cursor();
      return Math.abs(c.x - x) <= 4 && Math.abs(c.y - y) <= 4;
    },
    30_000,
    what,
  );
}

/** The PNG's width and height, from its header; fails on anything that is not a PNG. */
function pngSize(png: Uint8Array): { width: number; height: number } {
  const b = Buffer.from(png);
  assert.deepEqual([...b.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a], "a PNG signature");
  assert.equal(b.toString("latin1", 12, 16), "IHDR");
  return { width: b.readUInt32BE(16), height: b.readUInt32BE(20) };
}

before(async () => {
  const cfg = await testConfig(undefined, [DEFAULT_IMAGE]);
  const t0 = performance.now();
  await preparedSystemImage(cfg.data_dir, () => {}, "desktop");
  console.log(`# ${DESKTOP_IMAGE} ready in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  cfg.auth = { enabled: true, api_key: API_KEY };
  removeAtExit(cfg.data_dir);
  // The destination's certificate comes from a CA of the test's, which only the server trusts.
  const caDir = join(cfg.data_dir, "test-destination-ca");
  await mkdir(caDir, { recursive: true });
  const testCa = new EgressCa(caDir);
  await writeFile(join(caDir, "ca.pem"), await testCa.certPem());
  const leaf = await testCa.leaf(API);
  const https = createServer({ cert: leaf.cert, key: leaf.key }, (req, res) => {
    apiSeen.push({ path: req.url ?? "", auth: req.headers.authorization });
    req.resume();
    res.setHeader("content-type", "text/html");
    res.end("<!doctype html><title>egress ok</title>ok");
  });
  await new Promise<void>((r) => https.listen(0, "127.0.0.1", r));
  https.unref();
  apiPort = (https.address() as { port: number }).port;
  cfg.network.hosts = { [API]: "127.0.0.1" };
  cfg.network.upstream_ca_file = join(caDir, "ca.pem");
  server = await startServer(cfg, "test");
  e2bEnv(server.url, API_KEY);
  await Secret.create("desktop-api-key", SECRET);
  const t1 = performance.now();
  // Its only way out is the egress proxy, whose rule for API adds the secret: Firefox goes through it too.
  desktop = await Sandbox.create({
    timeoutMs: 1_800_000,
    requestTimeoutMs: 600_000,
    network: {
      allowOut: [`${API}:${apiPort}`],
      denyOut: [ALL_TRAFFIC],
      rules: { [API]: [{ transform: { headers: { Authorization: `Bearer ${Secret.fill("desktop-api-key")}` } } }] },
    },
  });
  console.log(JSON.stringify({ desktop_create_ms: Math.round(performance.now() - t1) }));
});

after(async () => {
  await browser?.close();
  await desktop?.kill().catch(() => {});
  await server?.close();
  if (server) await assertNoVmLeft(server.forge);
});

describe("E2B's desktop SDK", () => {
  it("creates a desktop that is up: its screen size, and a screenshot that is a PNG of it", async () => {
    assert.deepEqual(await desktop.getScreenSize(), { width: 1024, height: 768 });
    const shot = await desktop.screenshot();
    assert.deepEqual(pngSize(shot), { width: 1024, height: 768 });
    // The panel and the desktop are drawn: a screen of one colour compresses to a few kilobytes.
    assert.ok(shot.length > 8_000, `a screenshot of ${shot.length} bytes`);
    // The panel's windows come and go while it settles after a restore, and xdotool fails on one
    // that goes while it looks: asked again until it answers.
    await waitFor(async () => (await desktop.getApplicationWindows("xfce4-panel").catch(() => [])).length > 0, 60_000, "XFCE's panel on the screen");
  });

  it("moves the mouse and reports where it is", async () => {
    await desktop.moveMouse(100, 200);
    assert.deepEqual(await desktop.getCursorPosition(), { x: 100, y: 200 });
  });

  it("opens a page served in the sandbox in Firefox; a click and typed keys reach the page", async () => {
    await desktop.files.write("/home/user/page.html", PAGE);
    await desktop.files.write("/home/user/server.py", SERVER);
    await desktop.commands.run("python3 /home/user/server.py", { background: true, timeoutMs: 0 });
    await waitFor(async () => (await desktop.commands.run("curl -sf http://127.0.0.1:8000/ >/dev/null && echo up || true")).stdout.includes("up"), 60_000, "the page's server");
    const before = await desktop.screenshot();
    await desktop.open("http://127.0.0.1:8000/");
    let win = "";
    await waitFor(
      async () => {
        for (const id of await desktop.getApplicationWindows("firefox").catch(() => [])) {
          if (id && (await desktop.getWindowTitle(id)).includes("forgevm desktop test")) win = id;
        }
        return win !== "";
      },
      // About a minute on an idle machine under TCG, four under the test suite's load.
      600_000,
      "Firefox to show the page",
    );
    const geometry = (await desktop.commands.run(`xdotool getwindowgeometry --shell ${win}`)).stdout;
    const g = Object.fromEntries(
      geometry
        .trim()
        .split("\n")
        .map((l: string) => l.split("=")),
    ) as Record<string, string>;
    const [x, y, w, h] = ["X", "Y", "WIDTH", "HEIGHT"].map((k) => Number(g[k]));
    // Firefox's toolbars take the window's top; the page is the rest, button above and field below.
    const top = y + Math.min(120, h / 4);
    const pageHeight = y + h - top;
    await desktop.leftClick(x + Math.round(w / 2), top + Math.round(pageHeight * 0.75));
    await desktop.write("hello desktop", { chunkSize: 5, delayInMs: 20 });
    await desktop.press("enter");
    await desktop.leftClick(x + Math.round(w / 2), top + Math.round(pageHeight * 0.25));
    await waitFor(async () => (await desktop.commands.run("cat /tmp/record.txt 2>/dev/null || true")).stdout.includes("click:"), 120_000, "the page to record the click");
    // Each event is its own request to a threaded server: they may be recorded in either order.
    const recorded = (await desktop.commands.run("cat /tmp/record.txt")).stdout.trim().split("\n").sort();
    assert.deepEqual(recorded, ["click:hello desktop", "enter:hello desktop"]);
    await waitFor(async () => (await desktop.getWindowTitle(win)).includes("clicked hello desktop"), 120_000, "the page's new title");
    assert.equal(await desktop.getCurrentWindowId(), win, "the browser has the focus");
    const afterShot = await desktop.screenshot();
    assert.notDeepEqual(Buffer.from(afterShot), Buffer.from(before), "the screen shows what happened");
    // Keys by name and combinations: select the field's text and replace it.
    await desktop.leftClick(x + Math.round(w / 2), top + Math.round(pageHeight * 0.75));
    await desktop.press(["ctrl", "a"]);
    await desktop.write("again");
    await desktop.press("enter");
    await waitFor(async () => (await desktop.commands.run("cat /tmp/record.txt")).stdout.includes("enter:again"), 120_000, "the second entry");
  });

  it("takes Firefox through the sandbox's egress: an HTTPS page whose rule adds a secret loads with it, the egress CA trusted", async () => {
    await desktop.open(`https://${API}:${apiPort}/egress`);
    await waitFor(() => apiSeen.some((r) => r.path === "/egress"), 300_000, "Firefox's request to reach the destination");
    assert.equal(apiSeen.find((r) => r.path === "/egress")?.auth, `Bearer ${SECRET}`, "the egress proxy added the secret");
    const titles = async () => Promise.all((await desktop.getApplicationWindows("firefox")).map((id) => desktop.getWindowTitle(id)));
    await waitFor(async () => (await titles()).some((t) => t.includes("egress ok")), 120_000, "Firefox to show the page");
    // Back to the test page's tab for what follows.
    await desktop.press(["ctrl", "w"]);
    await waitFor(async () => (await titles()).some((t) => t.includes("clicked")), 120_000, "the test page's tab again");
  });

  it("streams the screen with noVNC: the URL opens in a browser and draws the desktop, or one window of it", async () => {
    // The SDK's stop sends x11vnc a SIGTERM and does not wait; its start refuses while one runs.
    const x11vncEnds = () =>
      waitFor(async () => (await desktop.commands.run("pgrep -x x11vnc || true")).stdout.trim() === "", 30_000, "x11vnc to end").catch(async (e: Error) => {
        // What the x11vnc that did not end was doing: in its TERM handler (SigBlk has 0x4000), where in the kernel.
        const where = await desktop.commands.run(
          "for p in $(pgrep -x x11vnc); do grep -E '^(State|Threads|Sig(Pnd|Blk|Cgt)|ShdPnd)' /proc/$p/status; echo wchan=$(cat /proc/$p/wchan); done",
        );
        throw new Error(`${e.message}\n${where.stdout}`);
      });
    await desktop.stream.start();
    // The SDK names https: the server here speaks plain HTTP (behind a TLS front, https works as given).
    const url = desktop.stream.getUrl({ viewOnly: true }).replace(/^https:/, "http:");
    assert.match(url, new RegExp(`^http://6080-${desktop.sandboxId}\\.`));
    browser = await chromium.launch({ executablePath: "/usr/bin/chromium", args: ["--headless", "--no-sandbox", "--disable-gpu"] });
    const page = await browser.newPage();
    await page.goto(url);
    const canvas = page.locator("canvas");
    await canvas.waitFor({ timeout: 120_000 });
    await waitFor(async () => ((await canvas.evaluate((c) => (c as unknown as { width: number }).width)) ?? 0) >= 1024, 120_000, "noVNC to size its canvas to the screen");
    const first = await canvas.screenshot();
    await desktop.moveMouse(500, 400);
    await desktop.commands.run("xdotool key super", { background: true }).catch(() => {});
    await waitFor(async () => !(await canvas.screenshot()).equals(first), 120_000, "the live view to change");
    // x11vnc's TERM handler makes X calls, and waits for ever on the display's lock when the TERM
    // lands inside one (docs/desktop.md). An X server that does not answer for a second while a
    // viewer watches holds x11vnc inside one: the SDK's stop then hangs it every time, and the
    // image's watcher has to end it.
    await desktop.commands.run("pkill -STOP -x Xvfb.real && sleep 1");
    try {
      await desktop.stream.stop();
    } finally {
      await desktop.commands.run("pkill -CONT -x Xvfb.real");
    }
    await x11vncEnds();
    const journal = await desktop.commands.run("journalctl -q -t forgevm-vnc-term-watch --no-pager", { user: "root" });
    assert.match(
      journal.stdout,
      /killed x11vnc \d+, inside its signal handler/,
      "the watcher ended the x11vnc that hung (else the X server's pause did not catch it inside an X call)",
    );
    // A stream of one window (x11vnc -id): the canvas is that window's size, not the screen's.
    const [win] = await desktop.getApplicationWindows("firefox");
    const shell = (await desktop.commands.run(`xdotool getwindowgeometry --shell ${win}`)).stdout;
    const size = { width: Number(/WIDTH=(\d+)/.exec(shell)?.[1]), height: Number(/HEIGHT=(\d+)/.exec(shell)?.[1]) };
    assert.ok(size.width > 0 && size.height > 0 && size.height < 768, shell);
    await desktop.stream.start({ windowId: win });
    await page.goto(desktop.stream.getUrl({ viewOnly: true }).replace(/^https:/, "http:"));
    const sized = async () => canvas.evaluate((c) => ({ width: (c as unknown as { width: number }).width, height: (c as unknown as { height: number }).height }));
    await waitFor(async () => JSON.stringify(await sized()) === JSON.stringify(size), 120_000, `noVNC to draw the window alone (${JSON.stringify(size)})`);
    await desktop.stream.stop();
    await x11vncEnds();
  });

  it("pauses and resumes with the desktop and its windows as they were", async () => {
    const windows = await desktop.getApplicationWindows("firefox");
    await desktop.betaPause();
    const back = await Sandbox.connect(desktop.sandboxId);
    assert.deepEqual(await back.getApplicationWindows("firefox"), windows);
    assert.deepEqual(pngSize(await back.screenshot()), { width: 1024, height: 768 });
  });
});

/** Fails unless `p` rejects with the Daytona SDK's error for an HTTP `status` whose message matches `message`. */
async function refused(p: Promise<unknown>, status: number, message: RegExp): Promise<void> {
  await assert.rejects(p, (e: unknown) => {
    assert.ok(e instanceof DaytonaError, String(e));
    assert.equal((e as DaytonaError).statusCode, status, (e as Error).message);
    assert.match((e as Error).message, message);
    return true;
  });
}

describe("Daytona's computer-use API on the same desktop", () => {
  let cu: Awaited<ReturnType<Daytona["get"]>>["computerUse"];
  before(async () => {
    const daytona = new Daytona({ apiKey: API_KEY, apiUrl: `${server.url}/daytona`, target: "us" });
    cu = (await daytona.get(desktop.sandboxId)).computerUse;
  });

  it("starts the live view beside the running desktop: every process runs", async () => {
    const started = await cu.start();
    assert.deepEqual(Object.keys(started.status ?? {}).sort(), ["novnc", "x11vnc", "xfce4", "xvfb"]);
    assert.equal((await cu.getStatus()).status, "active", JSON.stringify(started.status));
    assert.equal((await cu.getProcessStatus("novnc")).running, true);
    await refused(cu.getProcessStatus("nosuch"), 404, /no process "nosuch"/);
  });

  it("reports the display and its windows, and takes screenshots: whole, a region, compressed", async () => {
    const info = await cu.display.getInfo();
    assert.equal(info.displays?.[0]?.width, 1024);
    assert.equal(info.displays?.[0]?.height, 768);
    const wins = (await cu.display.getWindows()).windows ?? [];
    // The page's title is the click's by now.
    assert.ok(
      wins.some((w) => w.title?.includes("clicked hello desktop")),
      JSON.stringify(wins.map((w) => w.title)),
    );
    const full = await cu.screenshot.takeFullScreen(true);
    assert.deepEqual(pngSize(Buffer.from(full.screenshot ?? "", "base64")), { width: 1024, height: 768 });
    assert.equal(full.sizeBytes, Buffer.from(full.screenshot ?? "", "base64").length);
    const part = await cu.screenshot.takeCompressedRegion({ x: 10, y: 20, width: 200, height: 100 }, { format: "png" });
    assert.deepEqual(pngSize(Buffer.from(part.screenshot ?? "", "base64")), { width: 200, height: 100 });
    // The SDK's takeRegion hands its HTTP client (height, width, y, x) where the client takes
    // (x, y, width, height): the server is asked for 20x10 at (100, 200), as Daytona's own is.
    const swapped = await cu.screenshot.takeRegion({ x: 10, y: 20, width: 200, height: 100 });
    assert.deepEqual(pngSize(Buffer.from(swapped.screenshot ?? "", "base64")), { width: 20, height: 10 });
    const small = Buffer.from((await cu.screenshot.takeCompressed({ format: "jpeg", quality: 40, scale: 0.5 })).screenshot ?? "", "base64");
    assert.deepEqual([...small.subarray(0, 3)], [0xff, 0xd8, 0xff], "a JPEG");
    assert.ok(small.length < (full.sizeBytes ?? 0), `${small.length} bytes against ${full.sizeBytes}`);
    await refused(cu.screenshot.takeCompressedRegion({ x: 1000, y: 700, width: 100, height: 100 }), 400, /\(1099, 799\) is off the screen, which is 1024x768/);
    await refused(cu.screenshot.takeCompressed({ format: "gif" }), 400, /format must be png or jpeg/);
  });

  it("moves and clicks the mouse, types and presses keys: the page records them", async () => {
    await cu.mouse.move(321, 123);
    assert.deepEqual(await cu.mouse.getPosition(), { x: 321, y: 123 });
    const win = ((await cu.display.getWindows()).windows ?? []).find((w) => w.title?.includes("clicked hello desktop"));
    assert.ok(win?.x !== undefined && win.y !== undefined && win.width && win.height);
    const top = win.y + Math.min(120, win.height / 4);
    await cu.mouse.click(win.x + Math.round(win.width / 2), Math.round(top + (win.y + win.height - top) * 0.75));
    await cu.keyboard.hotkey("ctrl+a");
    await cu.keyboard.type("daytona");
    await cu.keyboard.press("Enter");
    await waitFor(async () => (await desktop.commands.run("cat /tmp/record.txt")).stdout.includes("enter:daytona"), 120_000, "the page to record Daytona's keys");
    await refused(cu.mouse.move(5000, 10), 400, /x, y: \(5000, 10\) is off the screen/);
    await refused(cu.keyboard.press("nosuchkey"), 400, /unknown key "nosuchkey"/);
    await refused(cu.mouse.click(10, 10, "sideways"), 400, /button must be left, middle or right/);
  });

  it("records the screen: start, list, stop, get, download (an Ogg video of what happened), delete", async () => {
    const started = await cu.recording.start("forgevm-test");
    assert.equal(started.status, "recording");
    assert.match(started.fileName, /^forgevm-test-.*\.ogv$/);
    assert.ok((await cu.recording.list()).recordings?.some((r) => r.id === started.id && r.status === "recording"));
    for (const x of [100, 300, 500]) await cu.mouse.move(x, 200);
    await new Promise((r) => setTimeout(r, 2000));
    const stopped = await cu.recording.stop(started.id);
    assert.equal(stopped.status, "completed");
    assert.ok((stopped.durationSeconds ?? 0) >= 2, JSON.stringify(stopped));
    assert.ok((stopped.sizeBytes ?? 0) > 0, JSON.stringify(stopped));
    assert.deepEqual(await cu.recording.get(started.id), stopped);
    const local = join(server.forge.paths.dataDir, "downloaded-recording.ogv");
    await cu.recording.download(started.id, local);
    const video = await readFile(local);
    assert.equal(video.length, stopped.sizeBytes);
    assert.equal(video.subarray(0, 4).toString("latin1"), "OggS");
    assert.ok(video.includes(Buffer.from("theora")), "a Theora stream");
    await cu.recording.delete(started.id);
    assert.ok(!(await cu.recording.list()).recordings?.some((r) => r.id === started.id));
    await refused(cu.recording.get(started.id), 404, /recording [0-9a-f]+ not found/);
    await refused(cu.recording.stop("0123456789abcdef"), 404, /not found/);
    await refused(cu.recording.start("no spaces"), 400, /label must be/);
  });

  it("answers 409 for a sandbox without a desktop, and for a desktop that is stopped", async () => {
    const plain = await server.forge.sandboxes.spawn({ image: DEFAULT_IMAGE });
    try {
      const daytona = new Daytona({ apiKey: API_KEY, apiUrl: `${server.url}/daytona`, target: "us" });
      await refused((await daytona.get(plain.id)).computerUse.screenshot.takeFullScreen(), 409, /has no desktop/);
    } finally {
      await plain.destroy();
    }
    const stopped = await cu.stop();
    assert.equal((await cu.getStatus()).status, "inactive", JSON.stringify(stopped.status));
    await refused(cu.screenshot.takeFullScreen(), 409, /desktop is not running/);
    await cu.start();
    assert.equal((await cu.getStatus()).status, "active");
    assert.deepEqual(pngSize(Buffer.from((await cu.screenshot.takeFullScreen()).screenshot ?? "", "base64")), { width: 1024, height: 768 });
  });
});

describe("ForgeVM's own desktop API on the same desktop: REST and the SDK, the live view, MCP, the CLI, the console", () => {
  let sb: ForgeSandbox;
  let client: Client;
  const exec = async (command: string) => {
    const r = await sb.exec(command, { timeout: "60s" });
    assert.equal(r.exit_code, 0, r.stderr);
    return r.stdout;
  };
  before(async () => {
    client = new Client({ baseUrl: server.url, apiKey: API_KEY, timeout: 120_000 });
    sb = await client.get(desktop.sandboxId);
    browser ??= await chromium.launch({ executablePath: "/usr/bin/chromium", args: ["--headless", "--no-sandbox", "--disable-gpu"] });
  });

  it("drives the desktop over REST with the TypeScript SDK: state, screenshots, the pointer, clicks and keys, windows", async () => {
    const info = await sb.desktop.info();
    assert.equal(info.running, true, JSON.stringify(info));
    assert.deepEqual(info.screen, { width: 1024, height: 768 });
    assert.deepEqual(pngSize(await sb.desktop.screenshot()), { width: 1024, height: 768 });
    const part = await sb.desktop.screenshot({ format: "jpeg", quality: 50, region: { x: 0, y: 0, width: 320, height: 200 } });
    assert.deepEqual([...part.subarray(0, 3)], [0xff, 0xd8, 0xff], "a JPEG");
    await sb.desktop.moveMouse(200, 150);
    assert.deepEqual(await sb.desktop.cursor(), { x: 200, y: 150 });
    const win = await xevWindow(exec);
    await sb.desktop.click(win.x + Math.round(win.width / 2), win.y + Math.round(win.height / 2));
    await sb.desktop.type("rest");
    await sb.desktop.press("Return");
    await sb.desktop.press(["ctrl", "a"]);
    await waitFor(async () => /keysym 0x61, a\)/.test(await exec("cat /tmp/xev.log")), 60_000, "xev to log the keys");
    const log = await exec("cat /tmp/xev.log");
    assert.match(log, /ButtonPress event[\s\S]*button 1,/, "the click reached the window");
    for (const k of ["0x72, r", "0x65, e", "0x73, s", "0x74, t", "0xff0d, Return", "0xffe3, Control_L"]) assert.ok(log.includes(`(keysym ${k})`), `${k} in ${log.slice(-2000)}`);
    const wins = await sb.desktop.windows();
    assert.ok(
      wins.some((w) => w.title === "forgevm-xev" && w.active),
      JSON.stringify(wins),
    );
    assert.ok(
      wins.every((w) => w.title.trim() !== ""),
      `only windows with a name: ${JSON.stringify(wins)}`,
    );
    await assert.rejects(sb.desktop.moveMouse(5000, 10), (e: Error) => e instanceof BadRequestError && /x, y: \(5000, 10\) is off the screen, which is 1024x768/.test(e.message));
    await assert.rejects(sb.desktop.press("nosuchkey"), (e: Error) => e instanceof BadRequestError && /unknown key "nosuchkey"/.test(e.message));
    await assert.rejects(sb.desktop.drag([0, 0], [10, 900]), (e: Error) => e instanceof BadRequestError && /end_x, end_y: \(10, 900\) is off the screen/.test(e.message));
    await assert.rejects(sb.desktop.click(1, 1, { button: "sideways" as "left" }), (e: Error) => e instanceof BadRequestError && /button/.test(e.message));
  });

  it("drives the same desktop with the Python SDK: screen, screenshot, pointer, keys, windows", async () => {
    // sdk/python as its README uses it, in a python3 of its own; the xev window above has the focus.
    const script = `import json, struct
from forgevm import Client
sb = Client(base_url=${JSON.stringify(server.url)}, api_key=${JSON.stringify(API_KEY)}).get(${JSON.stringify(sb.id)})
png = sb.desktop.screenshot()
sb.desktop.move_mouse(123, 45)
cursor = sb.desktop.cursor()
sb.desktop.type("py")
sb.desktop.press("F6")
print(json.dumps({"size": sb.desktop.screen_size(), "png": [png[:8].hex(), *struct.unpack(">II", png[16:24])], "cursor": cursor, "titles": [w["title"] for w in sb.desktop.windows()]}))`;
    const r = await runFile("python3", ["-c", script], { env: { ...childEnv(), PYTHONPATH: join(REPO, "sdk", "python"), PYTHONDONTWRITEBYTECODE: "1" }, timeout: 120_000 });
    const got = JSON.parse(r.stdout);
    assert.deepEqual(got.size, [1024, 768]);
    assert.deepEqual(got.png, ["89504e470d0a1a0a", 1024, 768], "a PNG of the screen");
    assert.deepEqual(got.cursor, [123, 45]);
    assert.ok(got.titles.includes("forgevm-xev"), JSON.stringify(got.titles));
    await waitFor(async () => (await exec("cat /tmp/xev.log")).includes("(keysym 0xffc3, F6)"), 60_000, "xev to log the Python SDK's keys");
    const log = await exec("cat /tmp/xev.log");
    for (const k of ["0x70, p", "0x79, y"]) assert.ok(log.includes(`(keysym ${k})`), `${k} in ${log.slice(-2000)}`);
  });

  it("sets the screen's size and DPI without a restart: through REST, as a spawn option, and as E2B's resolution", async () => {
    const before = (await exec("pgrep -o -x xfce4-session")).trim();
    const bigger = await sb.desktop.setScreen(1280, 800, 120);
    assert.deepEqual(bigger.screen, { width: 1280, height: 800 });
    assert.deepEqual(pngSize(await sb.desktop.screenshot()), { width: 1280, height: 800 });
    assert.match(await exec("cat /etc/forgevm/desktop.env"), /WIDTH=1280\nHEIGHT=800\nDPI=120/, "kept for the next boot");
    assert.equal((await exec("pgrep -o -x xfce4-session")).trim(), before, "the session kept running");
    assert.deepEqual((await sb.desktop.setScreen(1024, 768, 96)).screen, { width: 1024, height: 768 });
    await assert.rejects(sb.desktop.setScreen(5000, 800), (e: Error) => e instanceof BadRequestError && /width/.test(e.message));
    const small = await client.spawn({ image: DESKTOP_IMAGE, screen: { width: 800, height: 600 } });
    try {
      assert.deepEqual([small.memoryMb, small.vcpus], [2048, 2], "the image's own size");
      assert.deepEqual(pngSize(await small.desktop.screenshot()), { width: 800, height: 600 });
    } finally {
      await small.destroy();
    }
    const wide = await Sandbox.create({ resolution: [1280, 720], dpi: 120, timeoutMs: 600_000, requestTimeoutMs: 600_000 });
    try {
      // E2B's create starts Xvfb in the background and does not wait for it: the switch lands a moment after.
      await waitFor(async () => JSON.stringify(await wide.getScreenSize()) === JSON.stringify({ width: 1280, height: 720 }), 30_000, "the screen E2B's create asked for");
    } finally {
      await wide.kill();
    }
  });

  it("serves the live view: a click in the interactive one reaches the sandbox, the watch-only one takes none, and the guest's page runs in an origin of its own", async () => {
    const live = await sb.desktop.stream();
    assert.equal(live.view_only, false);
    assert.match(live.url, new RegExp(`^${server.url}/api/v1/sandboxes/${sb.id}/desktop/stream/interactive/\\d+\\.[^/]+/vnc_lite\\.html\\?`));
    const page = await browser!.newPage();
    await page.goto(live.url);
    const canvas = page.locator("canvas");
    await drawn(canvas, "noVNC to draw the screen");
    assert.equal(await page.evaluate("origin"), "null", "the guest's page runs in an opaque origin");
    await clickReaches(page, canvas, sb, 400, 300, "the page's click to move the sandbox's pointer");
    const watch = await sb.desktop.stream({ viewOnly: true });
    assert.match(watch.url, /\/desktop\/stream\/view\/.*view_only=true/);
    const viewer = await browser!.newPage();
    await viewer.goto(watch.url);
    const screen = viewer.locator("canvas");
    await drawn(screen, "the watch-only view to draw");
    await sb.desktop.moveMouse(10, 10);
    const there = await onCanvas(screen, 600, 500);
    await viewer.mouse.click(there.x, there.y);
    await new Promise((r) => setTimeout(r, 2000));
    assert.deepEqual(await sb.desktop.cursor(), { x: 10, y: 10 }, "a watcher's click does not reach the desktop");
    // Its token names its mode: on the interactive path it is no credential.
    const swapped = watch.url.replace("/desktop/stream/view/", "/desktop/stream/interactive/");
    assert.equal((await fetch(swapped)).status, 401);
    const res = await fetch(watch.url);
    assert.equal(res.status, 200);
    assert.match(res.headers.get("content-security-policy") ?? "", /^sandbox allow-scripts/);
    await viewer.close();
    await page.close();
  });

  it("answers 409 for a screenshot of a sandbox without a desktop, and for the live view of a paused one", async () => {
    const plain = await client.spawn({ image: DEFAULT_IMAGE });
    try {
      await assert.rejects(plain.desktop.screenshot(), (e: Error) => e instanceof ConflictError && /has no desktop/.test(e.message));
      await plain.pause();
      await assert.rejects(plain.desktop.stream(), (e: Error) => e instanceof ConflictError && /is paused: resume it/.test(e.message));
    } finally {
      await plain.destroy();
    }
  });

  it("gives an agent MCP's computer tool: a screenshot as an image, clicks, typed text and keys at coordinates", async () => {
    const mcp = new McpClient({ name: "forgevm-desktop-test", version: "1.0.0" });
    await mcp.connect(new StreamableHTTPClientTransport(new URL("/mcp", server.url), { requestInit: { headers: { Authorization: `Bearer ${API_KEY}` } } }));
    const call = async (name: string, args: Record<string, unknown>) => (await mcp.callTool({ name, arguments: args })) as CallToolResult & { structuredContent?: any };
    // No size asked: the image's own (2 GiB, two vCPUs), as E2B's create got, so it restores the same base.
    const made = await call("create_sandbox", { image: DESKTOP_IMAGE });
    assert.ok(!made.isError, JSON.stringify(made.content));
    assert.deepEqual([made.structuredContent.memory_mb, made.structuredContent.vcpus], [2048, 2]);
    const id = made.structuredContent.sandbox_id as string;
    try {
      const run = async (command: string) => {
        const r = await call("exec", { sandbox_id: id, command });
        assert.equal(r.structuredContent?.exit_code, 0, JSON.stringify(r.content));
        return r.structuredContent.stdout as string;
      };
      const shot = await call("computer", { sandbox_id: id, action: "screenshot" });
      const image = shot.content.find((c) => c.type === "image") as { data: string; mimeType: string } | undefined;
      assert.equal(image?.mimeType, "image/png");
      assert.deepEqual(pngSize(Buffer.from(image.data, "base64")), { width: 1024, height: 768 });
      assert.deepEqual(shot.structuredContent.screen, { width: 1024, height: 768 });
      const win = await xevWindow(run);
      const center = [win.x + Math.round(win.width / 2), win.y + Math.round(win.height / 2)];
      const clicked = await call("computer", { sandbox_id: id, action: "left_click", coordinate: center, screenshot: false });
      assert.ok(!clicked.isError && !clicked.content.some((c) => c.type === "image"), JSON.stringify(clicked.content));
      await call("computer", { sandbox_id: id, action: "type", text: "mcp", screenshot: false });
      const keyed = await call("computer", { sandbox_id: id, action: "key", text: "ctrl+a Return" });
      assert.ok(
        keyed.content.some((c) => c.type === "image"),
        "an action answers with the screen after it",
      );
      assert.deepEqual((await call("computer", { sandbox_id: id, action: "cursor_position" })).structuredContent.cursor, { x: center[0], y: center[1] });
      await waitFor(async () => (await run("cat /tmp/xev.log")).includes("(keysym 0xff0d, Return)"), 60_000, "xev to log the agent's keys");
      const log = await run("cat /tmp/xev.log");
      for (const k of ["0x6d, m", "0x63, c", "0x70, p", "0xffe3, Control_L", "0x61, a"]) assert.ok(log.includes(`(keysym ${k})`), `${k} in ${log.slice(-2000)}`);
      const off = await call("computer", { sandbox_id: id, action: "mouse_move", coordinate: [5000, 10] });
      assert.ok(off.isError);
      assert.match(JSON.stringify(off.content), /coordinate|x, y: \(5000, 10\) is off the screen/);
      const bad = await call("computer", { sandbox_id: id, action: "key", text: "nosuchkey" });
      assert.ok(bad.isError);
      assert.match(JSON.stringify(bad.content), /unknown key \\"nosuchkey\\"/);
      const missing = await call("computer", { sandbox_id: id, action: "left_click_drag", coordinate: [1, 1] });
      assert.match(JSON.stringify(missing.content), /left_click_drag needs start_coordinate/);
      // Windows that come and go (menus, tooltips) while the list is taken: xev's is in every list.
      await run("DISPLAY=:0 setsid -f sh -c 'while :; do timeout 0.3 xev -name churn -geometry 10x10+0+0; done' >/dev/null 2>&1 </dev/null");
      const same = await client.get(id);
      for (let i = 0; i < 5; i++) {
        const titles = (await same.desktop.windows()).map((w) => w.title);
        assert.ok(titles.includes("forgevm-xev"), `list ${i} while windows come and go: ${JSON.stringify(titles)}`);
      }
    } finally {
      await call("destroy_sandbox", { sandbox_id: id });
      await mcp.close();
    }
  });

  it("saves a screenshot and prints the live view's URL with the CLI", async () => {
    const dir = server.forge.paths.dataDir;
    const file = join(dir, "cli-shot.png");
    const env = childEnv();
    const shot = await runCli(["--server", server.url, "--api-key", API_KEY, "screenshot", sb.id, "-o", file], env);
    assert.equal(shot.status, 0, shot.stderr);
    assert.deepEqual(pngSize(await readFile(file)), { width: 1024, height: 768 });
    const view = await runCli(["--server", server.url, "--api-key", API_KEY, "desktop", sb.id, "--view-only", "--no-open", "--json"], env);
    assert.equal(view.status, 0, view.stderr);
    const printed = JSON.parse(view.stdout);
    assert.equal(printed.view_only, true);
    assert.equal((await fetch(printed.url)).status, 200);
    const bad = await runCli(["--server", server.url, "--api-key", API_KEY, "screenshot", sb.id, "-o", file, "--region", "1,2"], env);
    assert.notEqual(bad.status, 0);
    assert.match(bad.stderr, /--region must be X,Y,WIDTH,HEIGHT/);
  });

  it("shows the screen in the console's Desktop tab, where a click reaches the sandbox and a screenshot is taken", async () => {
    const page: Page = await browser!.newPage({ viewport: { width: 1400, height: 1000 } });
    await page.goto(server.url);
    await page.getByLabel("API key").fill(API_KEY);
    await page.getByRole("button", { name: "Log in" }).click();
    await page.getByRole("heading", { name: "Dashboard" }).waitFor();
    await page.goto(`${server.url}/#/sandboxes/${sb.id}/Desktop`);
    const canvas = page.frameLocator("[data-testid=desktop-view]").locator("canvas");
    await drawn(canvas, "the console's view to draw");
    await sb.desktop.moveMouse(5, 5);
    await clickReaches(page, canvas, sb, 700, 500, "the console's click to reach the sandbox");
    await page.getByRole("button", { name: "Screenshot" }).click();
    const img = page.getByTestId("desktop-shot");
    await img.waitFor();
    assert.equal(await img.evaluate((i) => (i as unknown as { naturalWidth: number }).naturalWidth), 1024);
    await page.getByRole("button", { name: "Watch only" }).click();
    await page.getByRole("heading", { name: "Desktop (watching)" }).waitFor();
    assert.match((await page.getByTestId("desktop-view").getAttribute("src")) ?? "", /\/desktop\/stream\/view\//);
    await page.close();
    await sb.desktop.stopStream();
    const info = await sb.desktop.info();
    assert.deepEqual([info.processes.x11vnc.running, info.processes.novnc.running], [false, false]);
  });
});
