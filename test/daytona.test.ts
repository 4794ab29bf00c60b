// The unmodified Daytona SDK (npm `@daytonaio/sdk@0.218.0`) against a real server with real VMs,
// configured as the README says: DAYTONA_API_URL at the server's /daytona, DAYTONA_API_KEY its key.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { Daytona, DaytonaAuthenticationError, DaytonaNotFoundError, DaytonaTimeoutError, type Sandbox } from "@daytonaio/sdk";
import type { FastifyInstance } from "fastify";
import { buildApp } from "../src/api/app.js";
import type { Forge } from "../src/index.js";
import { assertNoVmLeft, openForge } from "./helpers.js";

const API_KEY = "daytona_0123456789abcdef";
let forge: Forge;
let app: FastifyInstance;
let base: string;
let daytona: Daytona;
let sbx: Sandbox;

/** Points the SDK at this server and only at it. */
function daytonaEnv(url: string): void {
  for (const k of Object.keys(process.env)) if (k.startsWith("DAYTONA_")) delete process.env[k];
  process.env.DAYTONA_API_URL = `${url}/daytona`;
  process.env.DAYTONA_API_KEY = API_KEY;
  process.env.DAYTONA_TARGET = "us";
}

before(async () => {
  forge = await openForge({ reapIntervalMs: 200 });
  app = await buildApp({ forge, version: "test", apiKey: API_KEY });
  base = await app.listen({ host: "127.0.0.1", port: 0 });
  daytonaEnv(base);
  daytona = new Daytona();
  sbx = await daytona.create({ labels: { suite: "daytona", run: "1" }, envVars: { FROM_CREATE: "yes" } });
});

after(async () => {
  await app?.close();
  await forge?.close();
  if (forge) await assertNoVmLeft(forge);
});

describe("the control plane", () => {
  it("creates a started sandbox with labels, env and the toolbox URL; lists it by label; gets it by id and by name", async () => {
    assert.equal(sbx.state, "started");
    assert.equal(sbx.target, "us");
    assert.equal(sbx.labels.suite, "daytona");
    assert.equal(sbx.labels["code-toolbox-language"], "python");
    assert.equal(sbx.toolboxProxyUrl, `${base}/daytona/toolbox`);
    const listed: Sandbox[] = [];
    for await (const s of daytona.list({ labels: { suite: "daytona" } })) listed.push(s);
    assert.deepEqual(
      listed.map((s) => s.id),
      [sbx.id],
    );
    const none: Sandbox[] = [];
    for await (const s of daytona.list({ labels: { suite: "nope" } })) none.push(s);
    assert.deepEqual(none, []);
    assert.equal((await daytona.get(sbx.id)).id, sbx.id);
    assert.equal((await daytona.get(sbx.name)).id, sbx.id);
    // The same sandbox, to our own API.
    assert.deepEqual(forge.sandboxes.get(sbx.id).metadata, { suite: "daytona", run: "1", "code-toolbox-language": "python", "daytona.target": "us" });
  });

  it("a wrong key is the SDK's auth error; an unknown sandbox its not-found error", async () => {
    const wrong = new Daytona({ apiKey: "wrong", apiUrl: `${base}/daytona`, target: "us" });
    await assert.rejects(wrong.get(sbx.id), DaytonaAuthenticationError);
    await assert.rejects(daytona.get("no-such-sandbox"), DaytonaNotFoundError);
    // The toolbox refuses a wrong key too.
    const raw = await fetch(`${base}/daytona/toolbox/${sbx.id}/process/execute`, {
      method: "POST",
      headers: { authorization: "Bearer wrong", "content-type": "application/json" },
      body: JSON.stringify({ command: "id" }),
    });
    assert.equal(raw.status, 401);
    assert.equal(((await raw.json()) as { source: string }).source, "DAYTONA_DAEMON");
  });
});

describe("the toolbox", () => {
  it("executeCommand: output, exit code, cwd, env, and a timeout that kills it", async () => {
    const r = await sbx.process.executeCommand('echo "$FROM_CREATE $(whoami) $(pwd) $EXTRA"; echo err >&2; exit 3', "/tmp", { EXTRA: "x" });
    assert.equal(r.exitCode, 3);
    assert.equal(r.result, "yes daytona /tmp x\nerr\n");
    assert.equal((await sbx.getUserHomeDir()) ?? "", "/home/daytona");
    assert.equal(await sbx.getWorkDir(), "/home/daytona");
    const started = Date.now();
    await assert.rejects(sbx.process.executeCommand("sleep 30", undefined, undefined, 1), DaytonaTimeoutError);
    assert.ok(Date.now() - started < 15_000);
  });

  it("codeRun runs Python", async () => {
    const r = await sbx.process.codeRun('import sys\nprint("py", sys.version_info[0])');
    assert.equal(r.exitCode, 0);
    assert.equal(r.result, "py 3\n");
  });
});
