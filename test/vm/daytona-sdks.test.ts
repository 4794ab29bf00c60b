// The Daytona SDKs agent frameworks pin, unmodified, against a real server with real VMs: 0.143
// (Mastra's and LangChain's providers) and 0.161 (the last before the one-step PTY), beside the
// latest that daytona.test.ts drives. Each goes through what those providers call: create, list,
// exec, files, a terminal, a preview and a signed preview URL, stop and start, delete.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { FastifyInstance } from "fastify";
import { Daytona as Daytona0143 } from "daytona-sdk-0143";
import { Daytona as Daytona0161 } from "daytona-sdk-0161";
import { buildApp } from "../../src/compose/app.js";
import type { Forge } from "../../src/index.js";
import { assertNoVmLeft, openForge } from "../helpers.js";

const API_KEY = "daytona_0123456789abcdef";
let forge: Forge;
let app: FastifyInstance;
let base: string;

before(async () => {
  forge = await openForge({ reapIntervalMs: 200 });
  app = await buildApp({ forge, version: "test", apiKey: API_KEY });
  base = await app.listen({ host: "127.0.0.1", port: 0 });
});

after(async () => {
  await app?.close();
  await forge?.close();
  if (forge) await assertNoVmLeft(forge);
});

/** Waits for `re` in what `text()` returns, up to 15 s. */
async function until(text: () => string, re: RegExp): Promise<void> {
  for (let i = 0; i < 150 && !re.test(text()); i++) await new Promise((r) => setTimeout(r, 100));
  assert.match(text(), re);
}

/** Fetches `url` until the guest's server answers (it starts in the background). */
async function fetchUp(url: string, init?: RequestInit): Promise<Response> {
  let r: Response | null = null;
  for (let i = 0; i < 100; i++) {
    r = await fetch(url, init).catch(() => null);
    if (r && r.status !== 502) return r;
    await new Promise((res) => setTimeout(res, 100));
  }
  assert.fail(`${url} never answered: ${r?.status}`);
}

for (const [version, Daytona] of [
  ["0.143.0", Daytona0143],
  ["0.161.0", Daytona0161],
] as const) {
  describe(`@daytonaio/sdk ${version}`, () => {
    it("create, list, exec, files, a terminal made then joined, previews signed and not, stop and start, delete", async () => {
      const daytona = new Daytona({ apiKey: API_KEY, apiUrl: `${base}/daytona`, target: "us" });
      const label = `sdk-${version}`;
      const sbx = await daytona.create({ labels: { suite: label }, envVars: { FROM_CREATE: "yes" } });
      try {
        assert.equal(sbx.state, "started");
        // Before 0.16x, list is one page from /sandbox/paginated.
        const page = await daytona.list({ suite: label }, 1, 10);
        assert.deepEqual(
          page.items.map((s) => s.id),
          [sbx.id],
        );
        assert.equal(page.total, 1);

        const r = await sbx.process.executeCommand("echo $FROM_CREATE; exit 3");
        assert.equal(r.exitCode, 3);
        assert.equal(r.result.trim(), "yes");

        await sbx.fs.uploadFile(Buffer.from("hi from the preview\n"), "site/hello.txt");
        assert.equal((await sbx.fs.downloadFile("site/hello.txt")).toString(), "hi from the preview\n");

        // These SDKs make the terminal (POST /process/pty, lazyStart) and then join it: its first
        // output, the prompt, is held for the join.
        let out = "";
        const pty = await sbx.process.createPty({ id: "t1", cols: 90, rows: 20, envs: { HELLO: "old-sdk" }, onData: (d) => void (out += new TextDecoder().decode(d)) });
        await pty.waitForConnection();
        await until(() => out, /[$#] ?$/m);
        await pty.sendInput('echo "$HELLO $(stty size)"\n');
        await until(() => out, /old-sdk 20 90/);
        assert.ok((await sbx.process.listPtySessions()).some((s) => s.id === "t1" && s.active));
        await pty.sendInput("exit 5\n");
        assert.equal((await pty.wait()).exitCode, 5);
        await pty.disconnect();

        await sbx.process.createSession("web");
        await sbx.process.executeSessionCommand("web", { command: "cd site && python3 -m http.server 8000 --bind 0.0.0.0 >/dev/null 2>&1", runAsync: true });
        const link = await sbx.getPreviewLink(8000);
        const viaPreview = await fetchUp(`${link.url}/hello.txt`, { headers: { "X-Daytona-Preview-Token": link.token } });
        assert.equal(await viaPreview.text(), "hi from the preview\n");

        // A signed URL works as it is, with no header and no path (the OpenAI Agents SDK keeps
        // only its scheme, host, port and query), and with a path of the client's.
        const signed = await sbx.getSignedPreviewUrl(8000, 60);
        assert.equal(signed.sandboxId, sbx.id);
        assert.equal(signed.port, 8000);
        const u = new URL(signed.url);
        assert.equal(u.pathname, "/");
        const listing = await fetchUp(`${u.origin}/?${u.searchParams}`);
        assert.equal(listing.status, 200);
        assert.match(await listing.text(), /hello\.txt/);
        const file = await fetch(`${u.origin}/hello.txt?${u.searchParams}`);
        assert.equal(await file.text(), "hi from the preview\n");
        assert.equal((await fetch(`${u.origin}/hello.txt`)).status, 401);
        assert.equal((await fetch(`${u.origin}/hello.txt?DAYTONA_SANDBOX_AUTH_KEY=${signed.token.replace(/.$/, (c) => (c === "a" ? "b" : "a"))}`)).status, 401);

        await sbx.stop();
        assert.equal(sbx.state, "stopped");
        await sbx.start();
        assert.equal((await sbx.fs.downloadFile("site/hello.txt")).toString(), "hi from the preview\n");
      } finally {
        await sbx.delete();
      }
      assert.deepEqual((await daytona.list({ suite: label })).items, []);
    });
  });
}
