// Desktops for computer-use agents (docs/desktop.md), driven by E2B's desktop SDK (npm
// `@e2b/desktop@2.4.0`), unmodified, against a real server and the desktop image in a real VM: a
// create restores a desktop that is up; screenshots are PNGs of the screen's size whose pixels
// follow what happens; Firefox opens a page served in the sandbox, and
// a click and typed keys reach it (the page's own record, read back by a command); windows are
// found by class and title; the noVNC live view opens in a headless Chromium through the server's
// port proxy (a WebSocket) and draws the screen; a pause and a resume keep the desktop and its
// windows.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { Sandbox } from "@e2b/desktop";
import { type Browser, chromium } from "playwright-core";
import { startServer, type RunningServer } from "../../src/compose/serve.js";
import { DEFAULT_IMAGE, DESKTOP_IMAGE } from "../../src/images/store.js";
import { preparedSystemImage } from "../../src/setup/index.js";
import { e2bEnv } from "../e2b-env.js";
import { assertNoVmLeft, removeAtExit, testConfig, waitFor } from "../helpers.js";

const API_KEY = "e2b_desktop0123456789";
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
  server = await startServer(cfg, "test");
  removeAtExit(cfg.data_dir);
  e2bEnv(server.url, API_KEY);
  const t1 = performance.now();
  desktop = await Sandbox.create({ timeoutMs: 1_800_000, requestTimeoutMs: 600_000 });
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
    assert.ok((await desktop.getApplicationWindows("xfce4-panel")).length > 0, "XFCE's panel is on the screen");
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

  it("streams the screen with noVNC: the URL opens in a browser and draws the desktop", async () => {
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
    await desktop.stream.stop();
  });

  it("pauses and resumes with the desktop and its windows as they were", async () => {
    const windows = await desktop.getApplicationWindows("firefox");
    await desktop.betaPause();
    const back = await Sandbox.connect(desktop.sandboxId);
    assert.deepEqual(await back.getApplicationWindows("firefox"), windows);
    assert.deepEqual(pngSize(await back.screenshot()), { width: 1024, height: 768 });
  });
});
