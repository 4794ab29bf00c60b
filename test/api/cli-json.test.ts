// Every CLI command that lists or shows something takes --json and prints what the REST API
// answers (docs/cli.md): each is run against a server and its output parsed. The ones that need
// a running sandbox (balloon, ssh-config with sandboxes) are parsed where those are tested.
import assert from "node:assert/strict";
import { after, before, it } from "node:test";
import type { Forge } from "../../src/index.js";
import { apiRequest, childEnv, openForge, runCli, serveForge } from "../helpers.js";

let forge: Forge;
let served: Awaited<ReturnType<typeof serveForge>>;

before(async () => {
  forge = await openForge();
  served = await serveForge(forge);
  assert.equal((await apiRequest(served.url, "POST", "/volumes", { name: "data" })).status, 201);
});

after(async () => {
  await served?.close();
  await forge?.close();
});

it("every list and show command's --json is JSON, the same as the REST API's answer", async () => {
  const json = async (...args: string[]) => {
    const r = await runCli(["--server", served.url, ...args, "--json"], childEnv());
    assert.equal(r.status, 0, `${args.join(" ")}: ${r.stderr}`);
    try {
      return JSON.parse(r.stdout);
    } catch {
      assert.fail(`forgevm ${args.join(" ")} --json printed no JSON: ${r.stdout.slice(0, 200)}`);
    }
  };
  const lists: string[][] = [
    ["ps"],
    ["ps", "-a"],
    ["images"],
    ["snapshots"],
    ["volume", "ls"],
    ["secret", "ls"],
    ["template", "ls"],
    ["env", "ls"],
    ["env", "registry", "ls"],
    ["ssh-config"],
  ];
  for (const args of lists) assert.ok(Array.isArray(await json(...args)), `${args.join(" ")} --json is a list`);
  assert.deepEqual(await json("volume", "inspect", "data"), (await apiRequest(served.url, "GET", "/volumes/data")).body);
  assert.deepEqual(await json("images"), (await apiRequest(served.url, "GET", "/images")).body);
  const stats = await json("stats");
  assert.equal(typeof stats, "object");
});
