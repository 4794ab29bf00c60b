// The web console in a real browser: Debian's chromium driven by playwright-core against a real
// server with real VMs. Log in with the API key; launch from the form; the balloon set from the
// overview; a command typed in the terminal; a file uploaded, edited and downloaded; charts that
// fill; fork and destroy from the page; an image pulled from a local registry with progress; no console errors on any page.
// Screenshots of the main pages go to .forgevm-test/screenshots (docs/console.md's are chosen from them).
import assert from "node:assert/strict";
import { mkdir, mkdtemp, readFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, describe, it } from "node:test";
import { type Browser, chromium, type Page } from "playwright-core";
import type { RunningServer } from "../../src/compose/serve.js";
import { pushImage, startRegistry, type LocalRegistry } from "../local-registry.js";
import { apiRequest, removeAtExit, startTestServer, waitFor } from "../helpers.js";
import { tmpdir } from "node:os";

const KEY = "console-test-key";
const SHOTS = fileURLToPath(new URL("../../../.forgevm-test/screenshots/", import.meta.url));
let server: RunningServer;
let browser: Browser;
let page: Page;
let registry: LocalRegistry;
let work: string;
/** Console errors after login (a 401 while logging in is the browser reporting the refusal). */
const errors: string[] = [];
let loggedIn = false;

const api = (method: string, path: string, body?: unknown) => apiRequest(server.url, method, path, body, { "X-API-Key": KEY });

before(async () => {
  server = await startTestServer((c) => {
    c.auth.api_key = KEY;
    c.metrics.interval = "1s";
    // The guest is sampled every third tick, as by default: its lines must not break between samples.
    c.metrics.guest_every = 3;
  });
  work = await mkdtemp(join(tmpdir(), "fvm-console-"));
  removeAtExit(work);
  registry = await startRegistry(work);
  await mkdir(SHOTS, { recursive: true });
  browser = await chromium.launch({ executablePath: "/usr/bin/chromium", args: ["--headless", "--no-sandbox", "--disable-gpu"] });
  const context = await browser.newContext({ viewport: { width: 1360, height: 860 }, acceptDownloads: true });
  page = await context.newPage();
  page.on("console", (m) => {
    if (m.type() !== "error") return;
    if (!loggedIn && /status of 401/.test(m.text())) return;
    // The browser's own message for a failed request does not name it: the location does.
    errors.push(m.location().url ? `${m.text()} (${m.location().url})` : m.text());
  });
  page.on("pageerror", (e) => errors.push(`page error: ${e.message}`));
  page.on("dialog", (d) => void d.accept(d.type() === "prompt" ? d.defaultValue() || "" : undefined));
});

after(async () => {
  await browser?.close();
  registry?.stop();
  await server?.close();
});

const shot = (name: string) => page.screenshot({ path: join(SHOTS, `${name}.png`) });

describe("the web console", () => {
  let id: string;

  it("asks for the API key, refuses a wrong one with the server's message, and keeps the right one in the browser", async () => {
    await page.goto(server.url);
    await page.getByLabel("API key").fill("wrong-key");
    await page.getByRole("button", { name: "Log in" }).click();
    await page
      .getByRole("alert")
      .getByText(/invalid API key/)
      .waitFor();
    assert.equal(await page.evaluate('localStorage.getItem("forgevm_api_key")'), null, "a refused key is not kept");
    await shot("login");
    await page.getByLabel("API key").fill(KEY);
    await page.getByRole("button", { name: "Log in" }).click();
    await page.getByRole("heading", { name: "Dashboard" }).waitFor();
    loggedIn = true;
    assert.ok(!page.url().includes(KEY), "the key is never in the URL");
    await page.reload();
    await page.getByRole("heading", { name: "Dashboard" }).waitFor();
  });

  it("launches a sandbox from the form", async () => {
    await page.goto(`${server.url}/#/sandboxes/new`);
    await page.getByLabel("Name").fill("from-the-page");
    await page.getByLabel("Memory (MiB)").fill("256");
    await page.getByLabel("Environment (KEY=value per line)").fill("GREETING=hello");
    // Forkable: the pause, resume and fork below then hand over and copy its RAM file.
    await page.getByLabel("Forkable (fast forks)").check();
    await page.getByRole("button", { name: "Launch", exact: true }).click();
    await page.getByTestId("sandbox-id").waitFor({ timeout: 120_000 });
    id = (await page.getByTestId("sandbox-id").textContent())!;
    const row = (await api("GET", `/sandboxes/${id}`)).body;
    assert.equal(row.state, "running");
    assert.equal(row.name, "from-the-page");
    assert.equal(row.memory_mb, 256);
    assert.equal(row.forkable, true);
    await page.getByTestId("forkable").waitFor();
  });

  it("Extend 30m adds half an hour to what is left, never shortens it", async () => {
    const before = Date.parse((await api("GET", `/sandboxes/${id}`)).body.expires_at);
    await page.getByRole("button", { name: "Extend 30m" }).click();
    await waitFor(async () => Date.parse((await api("GET", `/sandboxes/${id}`)).body.expires_at) > before + 25 * 60_000, 10_000, "the later expiry");
    const after = Date.parse((await api("GET", `/sandboxes/${id}`)).body.expires_at);
    assert.ok(Math.abs(after - (before + 30 * 60_000)) < 60_000, `expiry moved by ${(after - before) / 60_000} min`);
  });

  it("the balloon: the overview sets how much of its memory the running sandbox may use, and shows what the guest sees", async () => {
    const balloon = page.getByTestId("balloon");
    await balloon.getByText(/256 of 256 MiB usable/).waitFor({ timeout: 15_000 });
    await page.getByLabel("Memory to leave it (MiB)").fill("192");
    await balloon.getByRole("button", { name: "Set" }).click();
    await balloon.getByText(/192 of 256 MiB usable/).waitFor({ timeout: 30_000 });
    const now = (await api("GET", `/sandboxes/${id}/balloon`)).body;
    assert.equal(now.actual_mb, 192);
    assert.ok(now.guest_total_mb < 220, `the guest sees ${now.guest_total_mb} MiB`);
    assert.equal((await api("PUT", `/sandboxes/${id}/balloon`, { memory_mb: 256 })).status, 200);
  });

  it("Launch… on an image opens the form with that image chosen", async () => {
    await page.goto(`${server.url}/#/images`);
    const name = "forgevm/debian:bookworm";
    await page.locator(`tr[data-image="${name}"]`).getByRole("button", { name: "Launch…" }).click();
    await page.getByLabel("Name").waitFor();
    await waitFor(async () => (await page.locator('select[name="image"]').inputValue()) === name, 10_000, "the image chosen");
    await page.goto(`${server.url}/#/sandboxes/${id}`);
    await page.getByTestId("sandbox-id").waitFor();
  });

  it("runs a command typed in the terminal and shows its output", async () => {
    await page.getByRole("tab", { name: "Terminal" }).click();
    await page.getByTestId("terminal-status").getByText("connected").waitFor({ timeout: 30_000 });
    await page.locator(".xterm").click();
    await page.keyboard.type("echo $GREETING-$((6*7))\n");
    await page.locator(".xterm-rows").getByText("hello-42").waitFor({ timeout: 30_000 });
    await shot("terminal");
  });

  it("uploads a file, shows it in the browser, edits it in place and downloads it", async () => {
    await page.getByRole("tab", { name: "Files" }).click();
    await page.getByTestId("upload").setInputFiles({ name: "notes.txt", mimeType: "text/plain", buffer: Buffer.from("first draft\n") });
    await page.getByTestId("upload-progress").getByText("notes.txt: uploaded").waitFor({ timeout: 30_000 });
    await page.locator('tr[data-file="notes.txt"]').waitFor();
    await shot("files");
    await page.locator('tr[data-file="notes.txt"]').getByRole("button", { name: "notes.txt" }).click();
    const editor = page.getByLabel("file contents");
    assert.equal(await editor.inputValue(), "first draft\n");
    await editor.fill("second draft\n");
    await page.getByRole("button", { name: "Save" }).click();
    await page.locator('tr[data-file="notes.txt"]').waitFor();
    const read = await fetch(`${server.url}/api/v1/sandboxes/${id}/files?path=/root/notes.txt`, { headers: { "X-API-Key": KEY } });
    assert.equal(await read.text(), "second draft\n", "the edit reached the guest");
    const [download] = await Promise.all([page.waitForEvent("download"), page.locator('tr[data-file="notes.txt"]').getByRole("button", { name: "Download" }).click()]);
    assert.equal(download.suggestedFilename(), "notes.txt");
    assert.equal(await readFile((await download.path())!, "utf8"), "second draft\n");
  });

  it("launches a service from the form: its command, restart policy, port (a link) and its own output are shown", async () => {
    await page.goto(`${server.url}/#/sandboxes/new`);
    await page.getByLabel("command").fill("sh -c 'echo service-started; exec python3 -u -m http.server 8000'");
    await page.getByLabel("restart policy").selectOption("unless-stopped");
    await page.getByLabel("Published ports (HOST:GUEST, or GUEST for any free host port)").fill("8000");
    await page.getByLabel("Disk (MiB)").fill("1024");
    await page.getByRole("button", { name: "Launch", exact: true }).click();
    await page.getByTestId("sandbox-id").waitFor({ timeout: 120_000 });
    const svc = (await page.getByTestId("sandbox-id").textContent())!;
    try {
      const row = (await api("GET", `/sandboxes/${svc}`)).body;
      assert.deepEqual(row.main.command, ["sh", "-c", "echo service-started; exec python3 -u -m http.server 8000"]);
      assert.equal(row.expires_at, null, "a service has no TTL");
      await page.getByTestId("main-command").getByText("python3 -u -m http.server 8000", { exact: false }).waitFor();
      await page
        .getByTestId("main-restart")
        .getByText(/unless-stopped, restarted 0 times, running/)
        .waitFor({ timeout: 30_000 });
      const link = page.getByTestId("ports").locator("a");
      const href = (await link.getAttribute("href"))!;
      assert.match(href, /^http:\/\/127\.0\.0\.1:\d+\/$/);
      await waitFor(async () => (await fetch(href).catch(() => null))?.status === 200, 60_000, "the service to answer on its port");
      await page.getByRole("tab", { name: "Logs" }).click();
      await page.getByTestId("main-log").getByText("service-started").waitFor({ timeout: 30_000 });
      await page.getByTestId("console-log").waitFor();
      await shot("service-logs");
    } finally {
      // Off its page first: a page polling a sandbox that goes away logs the 404.
      await page.goto(`${server.url}/#/sandboxes`);
      await api("DELETE", `/sandboxes/${svc}`);
    }
  });

  it("makes a template with a warm pool size, an allowlist and the secrets its sandboxes need", async () => {
    await page.goto(`${server.url}/#/templates`);
    await page.getByRole("button", { name: "New template" }).click();
    await page.getByLabel("Name", { exact: true }).fill("from-the-form");
    await page.getByLabel("Warm pool (sandboxes kept ready)").fill("0");
    await page.getByLabel(/Allowlist/).fill("@pypi api.example.com");
    await page.getByLabel(/Secrets its sandboxes need/).fill("API_TOKEN");
    await page.getByRole("button", { name: "Save" }).click();
    await waitFor(async () => (await api("GET", "/templates/from-the-form")).status === 200, 10_000, "the template");
    const t = (await api("GET", "/templates/from-the-form")).body;
    assert.deepEqual([t.pool_size, t.allowed_hosts, t.secrets.map((x: { name: string }) => x.name)], [0, ["@pypi", "api.example.com"], ["API_TOKEN"]]);
    assert.equal((await api("DELETE", "/templates/from-the-form")).status, 200);
  });

  it("adds a secret, gives it a new value and removes it; no value is ever on the page or in an answer", async () => {
    const seen: string[] = [];
    const watch = (r: import("playwright-core").Response) =>
      void r.text().then(
        (t) => seen.push(t),
        () => {},
      );
    page.on("response", watch);
    try {
      await page.goto(`${server.url}/#/secrets`);
      await page.getByLabel("secret name").fill("CONSOLE_TOKEN");
      await page.getByLabel("secret value").fill("console-secret-value-1");
      await page.getByLabel("description").fill("added in the console");
      await page.getByRole("button", { name: "Add" }).click();
      await page.getByRole("cell", { name: "console_token" }).waitFor();
      assert.equal((await api("GET", "/secrets/console_token")).body.description, "added in the console");
      await page.getByRole("button", { name: "New value" }).click();
      await page.getByLabel("new value of console_token").fill("console-secret-value-2");
      await page.getByRole("button", { name: "Save" }).click();
      await waitFor(async () => (await api("GET", "/secrets/console_token")).body.version === 2, 10_000, "the new version");
      await shot("secrets");
      assert.doesNotMatch(await page.content(), /console-secret-value/);
      // The stored secret is used from the console: an egress header rule at launch, changed on the Network tab.
      await page.goto(`${server.url}/#/sandboxes/new`);
      await page.getByRole("radio", { name: "allowlist" }).check();
      await page.getByLabel("Also allow (hosts, *.domains, CIDRs, :ports)").fill("api.example.test");
      await page.getByLabel("egress headers").fill("api.example.test: Authorization=Bearer {{console_token}}");
      await page.getByRole("button", { name: "Launch", exact: true }).click();
      await page.getByTestId("sandbox-id").waitFor({ timeout: 120_000 });
      const ruled = (await page.getByTestId("sandbox-id").textContent())!;
      try {
        assert.deepEqual((await api("GET", `/sandboxes/${ruled}/network`)).body.egress_rules, { "api.example.test": { headers: { Authorization: "Bearer {{console_token}}" } } });
        await page.getByRole("tab", { name: "Network" }).click();
        const rules = page.getByLabel("egress headers");
        await rules.waitFor();
        assert.equal(await rules.inputValue(), "api.example.test: Authorization=Bearer {{console_token}}");
        await page.getByText("{{console_token}}", { exact: false }).first().waitFor();
        await rules.fill("api.example.test: X-Token={{console_token}}");
        await page.getByRole("button", { name: "Save egress headers" }).click();
        await waitFor(
          async () =>
            JSON.stringify((await api("GET", `/sandboxes/${ruled}/network`)).body.egress_rules) ===
            JSON.stringify({ "api.example.test": { headers: { "X-Token": "{{console_token}}" } } }),
          10_000,
          "the rule changed from the Network tab",
        );
      } finally {
        // Off its page first: a page polling a sandbox that goes away logs the 404.
        await page.goto(`${server.url}/#/secrets`);
        await api("DELETE", `/sandboxes/${ruled}`);
      }
      await page.getByRole("button", { name: "Remove" }).click();
      await waitFor(async () => (await api("GET", "/secrets/console_token")).status === 404, 10_000, "the secret removed");
      assert.ok(seen.length > 0);
      assert.doesNotMatch(seen.join("\n"), /console-secret-value/, "no answer the page got holds a value");
    } finally {
      page.off("response", watch);
    }
  });

  it("pulls an image from a registry with visible progress", async () => {
    const busybox = await readFile("/bin/busybox");
    await pushImage(registry, work, "tools/tiny:1", {
      layers: [
        {
          entries: [
            { path: "bin/busybox", data: busybox, mode: 0o755 },
            { path: "bin/sh", type: "symlink", linkname: "busybox" },
          ],
        },
      ],
    });
    await page.goto(`${server.url}/#/images`);
    await page.getByLabel("image reference").fill(`${registry.host}/tools/tiny:1`);
    await page.getByRole("button", { name: "Pull" }).click();
    const progress = page.getByTestId("pull-progress");
    await progress.waitFor();
    await waitFor(async () => (await progress.getAttribute("data-state")) === "done", 120_000, "the pull to finish");
    assert.ok(await progress.locator("progress").count(), "a progress bar");
    assert.match((await progress.locator("pre").textContent()) ?? "", /\S/, "progress lines");
    await page.locator(`tr[data-image="${registry.host}/tools/tiny:1"]`).waitFor();
    await shot("images");
  });

  it("fills the charts with samples", async () => {
    // Last of the tests that leave the sandbox running undisturbed: its samples piled up meanwhile.
    await page.goto(`${server.url}/#/sandboxes/${id}`);
    await page.getByRole("tab", { name: "Overview" }).click();
    const cpu = page.getByTestId("charts").locator("figure").first();
    await waitFor(async () => Number(await cpu.getAttribute("data-samples")) >= 3, 60_000, "three samples in the CPU chart");
    await page.waitForTimeout(1500);
    await shot("sandbox");
    // Its labels are laid over the plot, not drawn in the stretched SVG (where they were squeezed).
    assert.equal(await cpu.locator("svg text").count(), 0);
    assert.ok((await cpu.locator(".tick-max").textContent())?.trim(), "the scale's top is labelled");
    assert.match((await cpu.locator(".tick-end").textContent()) ?? "", /\d{1,2}:\d{2}/);
    // The guest's line (sampled every third tick, with empty buckets between) is one stroke, as is the network chart's.
    await waitFor(async () => Number(await cpu.getAttribute("data-samples")) >= 12, 60_000, "twelve samples in the CPU chart");
    for (const chart of [cpu, page.getByTestId("charts").locator("figure").nth(3)]) {
      const d = (await chart.locator("path").first().getAttribute("d")) ?? "";
      assert.ok(d.split("L").length > 3, `the guest line has points: ${d.slice(0, 80)}`);
      assert.equal(d.split("M").length - 1, 1, `one stroke, not broken at every empty bucket: ${d.slice(0, 200)}`);
    }
  });

  it("pauses and resumes from the page; the file browser of a paused sandbox wakes it", async () => {
    await page.goto(`${server.url}/#/sandboxes/${id}`);
    await page.getByRole("button", { name: "Pause" }).click();
    await page.locator(".badge.state-paused").waitFor({ timeout: 60_000 });
    await page.getByTestId("paused-reason").getByText("on request").waitFor();
    assert.equal((await api("GET", `/sandboxes/${id}`)).body.state, "paused");
    // The file browser's listing is a call for the sandbox: it resumes it and is then served.
    await page.getByRole("tab", { name: "Files" }).click();
    await page.locator('tr[data-file="notes.txt"]').waitFor({ timeout: 60_000 });
    await waitFor(async () => (await api("GET", `/sandboxes/${id}`)).body.state === "running", 30_000, "the sandbox to be running again");
    await page.getByRole("tab", { name: "Overview" }).click();
    await page.getByRole("button", { name: "Pause" }).click();
    await page.locator(".badge.state-paused").waitFor({ timeout: 60_000 });
    // A paused sandbox's network is shown as it keeps it (reading it wakes nothing).
    await page.getByRole("tab", { name: "Network" }).click();
    await page.getByText("Mode: none").waitFor({ timeout: 10_000 });
    assert.equal((await api("GET", `/sandboxes/${id}`)).body.state, "paused");
    await page.getByRole("tab", { name: "Overview" }).click();
    await page.getByRole("button", { name: "Resume" }).click();
    await page.locator(".badge.state-running").waitFor({ timeout: 60_000 });
    assert.equal((await api("GET", `/sandboxes/${id}`)).body.state, "running");
  });

  it("forks and destroys from the page", async () => {
    await page.goto(`${server.url}/#/sandboxes/${id}`);
    await page.getByRole("button", { name: "Fork" }).click();
    await waitFor(async () => ((await page.getByTestId("sandbox-id").textContent()) ?? id) !== id, 120_000, "the fork's page");
    const fork = (await page.getByTestId("sandbox-id").textContent())!;
    assert.equal((await api("GET", `/sandboxes/${fork}`)).body.state, "running");
    await page.getByRole("button", { name: "Destroy" }).click();
    await page.waitForURL(/#\/sandboxes$/).catch(async (e) => {
      await shot("failed-destroy");
      throw e;
    });
    await page.getByRole("heading", { name: "Sandboxes", exact: true }).waitFor();
    await waitFor(async () => (await api("GET", `/sandboxes/${fork}`)).status === 404, 30_000, "the fork destroyed (gone: 404)");
    assert.equal((await api("GET", `/sandboxes/${id}`)).body.state, "running", "its parent runs on");
    await page.locator(`tr[data-sandbox="${id}"]`).waitFor();
    await shot("sandboxes");
  });

  it("shows the dashboard, templates and snapshots, in both themes, with no console errors anywhere", async () => {
    await page.goto(`${server.url}/#/`);
    await page.getByTestId("events").locator("li code").getByText("image.pulled").first().waitFor();
    await page.waitForTimeout(1500);
    await shot("dashboard");
    for (const [path, heading] of [
      ["templates", "Templates"],
      ["snapshots", "Snapshots"],
      ["volumes", "Volumes"],
      ["pools", "Pools"],
      ["sandboxes", "Sandboxes"],
    ]) {
      await page.goto(`${server.url}/#/${path}`);
      await page.getByRole("heading", { name: heading, exact: true }).waitFor();
      if (path === "snapshots") {
        // A snapshot is ready, not running (the fork above made one).
        const snap = await api("POST", `/sandboxes/${id}/snapshot`, { name: "console-badge" });
        assert.equal(snap.status, 201, JSON.stringify(snap.body));
        await page.reload();
        await page.locator(".badge").getByText("ready", { exact: true }).first().waitFor();
        assert.equal(await page.locator(".badge").getByText("running", { exact: true }).count(), 0);
      }
    }
    await page.getByRole("button", { name: /Dark theme|Light theme/ }).click();
    await page.goto(`${server.url}/#/sandboxes/${id}`);
    await page.getByTestId("charts").waitFor();
    await page.waitForTimeout(1500);
    await shot("sandbox-dark");
    assert.deepEqual(errors, []);
    await api("DELETE", `/sandboxes/${id}`);
  });
});
