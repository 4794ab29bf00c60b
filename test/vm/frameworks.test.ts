// The agent frameworks' own sandbox providers, unmodified (test/frameworks/, installed by
// the test runner): the OpenAI Agents SDK's E2B and Daytona clients, Mastra's E2B and Daytona
// workspace sandboxes, and LangChain's Daytona sandbox, each driven by a script of its own in a
// process of its own, configured only by the E2B and Daytona variables a user sets. Each script
// asserts every step (create, exec, files, PTY, exposed port, pause and resume, delete where the
// provider has them); here its exit, its last line, and that it left no sandbox behind.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { after, before, describe, it } from "node:test";
import type { FastifyInstance } from "fastify";
import { buildApp } from "../../src/compose/app.js";
import type { Forge } from "../../src/index.js";
import { assertNoVmLeft, childEnv, openForge } from "../helpers.js";

const API_KEY = "e2b_0123456789abcdef0123456789abcdef";
const dir = fileURLToPath(new URL("../../../test/frameworks/", import.meta.url));
let forge: Forge;
let app: FastifyInstance;
let base: string;

before(async () => {
  assert.ok(
    existsSync(`${dir}node_modules/@openai/agents-extensions`),
    "the providers are not installed: run `npm test`, whose runner installs them, or `node dist/scripts/test-frameworks.js`",
  );
  forge = await openForge({ reapIntervalMs: 200 });
  app = await buildApp({ forge, version: "test", apiKey: API_KEY });
  base = await app.listen({ host: "127.0.0.1", port: 0 });
});

after(async () => {
  await app?.close();
  await forge?.close();
  if (forge) await assertNoVmLeft(forge);
});

/** Runs a driver script to its end; its output, and its exit code. */
function drive(script: string, args: string[], extra: Record<string, string> = {}): Promise<{ code: number | null; out: string }> {
  const env = childEnv({
    E2B_API_KEY: API_KEY,
    E2B_API_URL: base,
    E2B_SANDBOX_URL: base,
    E2B_VOLUME_API_URL: base,
    DAYTONA_API_URL: `${base}/daytona`,
    DAYTONA_API_KEY: API_KEY,
    DAYTONA_TARGET: "us",
    DRIVER_API: base,
    DRIVER_KEY: API_KEY,
    ...extra,
  });
  for (const k of Object.keys(env)) if (k.startsWith("DAYTONA_") && !(k in extra) && !["DAYTONA_API_URL", "DAYTONA_API_KEY", "DAYTONA_TARGET"].includes(k)) delete env[k];
  return new Promise((resolve) => {
    const p = spawn(process.execPath, [script, ...args], { cwd: dir, env });
    let out = "";
    p.stdout.on("data", (c) => (out += c));
    p.stderr.on("data", (c) => (out += c));
    p.on("close", (code) => resolve({ code, out }));
  });
}

/** Runs a driver, expecting every step to pass and nothing of it to be left running. */
async function passes(script: string, args: string[], extra?: Record<string, string>): Promise<void> {
  const { code, out } = await drive(script, args, extra);
  assert.equal(code, 0, out);
  assert.match(out, /\ndone\n$/, out);
  const left = forge.sandboxes.list().filter((s) => s.state !== "destroyed");
  assert.deepEqual(
    left.map((s) => `${s.id} ${s.state}`),
    [],
    `${script} ${args.join(" ")} left sandboxes behind`,
  );
}

describe("the OpenAI Agents SDK (@openai/agents-extensions)", () => {
  it("E2BSandboxClient: create, exec, files, a PTY, an exposed port through getHost, pause on exit and resume, delete", async () => {
    await passes("openai.mjs", ["e2b"]);
  });

  it("DaytonaSandboxClient: the same, the port through a signed preview URL, stop on exit and start", async () => {
    // Its default image is debian:12.9 from Docker Hub, which the test machine cannot reach.
    await passes("openai.mjs", ["daytona"], { DRIVER_IMAGE: forge.defaults.image });
  });
});

describe("Mastra (@mastra/e2b, @mastra/daytona)", () => {
  it("E2BSandbox with a template built through the e2b SDK: init, commands, a spawned process, reconnect by id, destroy", async () => {
    await passes("mastra.mjs", ["e2b"]);
  });

  it("DaytonaSandbox with its defaults (Daytona SDK 0.143): the same", async () => {
    await passes("mastra.mjs", ["daytona"]);
  });
});

describe("LangChain (@langchain/daytona)", () => {
  it("DaytonaSandbox: initial files, execute, uploads and downloads, read/write/edit/ls/grep/glob, stop and start, deleteAll", async () => {
    await passes("langchain.mjs", []);
  });
});
