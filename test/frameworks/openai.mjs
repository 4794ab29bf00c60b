// The OpenAI Agents SDK's E2B or Daytona sandbox client (`node openai.mjs e2b|daytona`), with its
// defaults but for the exposed port and pause on exit: create, exec, files, a PTY, an exposed
// port, pause and resume, delete.
import assert from "node:assert/strict";
import { DaytonaSandboxClient } from "@openai/agents-extensions/sandbox/daytona";
import { E2BSandboxClient } from "@openai/agents-extensions/sandbox/e2b";
import { getEndpoint, step } from "./lib.mjs";

const which = process.argv[2];
const options = { exposedPorts: [8000], pauseOnExit: true, ...(process.env.DRIVER_IMAGE ? { image: process.env.DRIVER_IMAGE } : {}) };
const client = which === "e2b" ? new E2BSandboxClient(options) : new DaytonaSandboxClient(options);
const s = await client.create();
await step("create", () => s.state.manifest.root);
await step("exec", async () => {
  const out = await s.execCommand({ cmd: "echo hello-from-exec; pwd" });
  assert.match(out, /hello-from-exec\n.*workspace/);
  return out;
});
await step("files", async () => {
  await s.materializeEntry({ path: "notes/a.txt", entry: { type: "file", content: "file body\n" } });
  const text = new TextDecoder().decode(await s.readFile({ path: "notes/a.txt" }));
  assert.equal(text, "file body\n");
  return text;
});
await step("pty", async () => {
  const first = await s.execCommand({ cmd: "bash", tty: true, yieldTimeMs: 1000 });
  const id = Number(/session ID (\d+)/.exec(first)?.[1]);
  assert.ok(id, first);
  let out = "";
  for (let i = 0; i < 20 && !/pty-ok 42/.test(out); i++) out += await s.writeStdin({ sessionId: id, chars: i ? "" : "echo pty-ok $((6*7))\n", yieldTimeMs: 500 });
  assert.match(out, /pty-ok 42/);
  return id;
});
await step("port", async () => {
  await s.execCommand({ cmd: "mkdir -p site && echo served > site/index.html && cd site && nohup python3 -m http.server 8000 --bind 0.0.0.0 >/dev/null 2>&1 &" });
  const ep = await s.resolveExposedPort(8000);
  const r = await getEndpoint(ep, "/index.html");
  assert.equal(r.body, "served\n");
  return ep;
});
const state = await client.serializeSessionState(s.state);
await step("pause", async () => {
  await s.close();
  // What our REST API says of it (DRIVER_API: the server's URL, DRIVER_KEY: its key).
  const id = s.state.sandboxId;
  const row = await (await fetch(`${process.env.DRIVER_API}/api/v1/sandboxes/${id}`, { headers: { "x-api-key": process.env.DRIVER_KEY } })).json();
  assert.equal(row.state, which === "e2b" ? "paused" : "stopped", JSON.stringify(row));
  return row.state;
});
const back = await step("resume", async () => {
  const r = await client.resume(await client.deserializeSessionState(state));
  return r;
});
await step("after-resume", async () => {
  const out = await back.execCommand({ cmd: "cat notes/a.txt" });
  assert.match(out, /file body/);
  return out;
});
await step("delete", () => back.delete());
console.log("done");
