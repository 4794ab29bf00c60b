// Mastra's E2B or Daytona workspace sandbox (`node mastra.mjs e2b|daytona`), as its README uses
// it: init (for E2B, a template built with the e2b SDK's Template builder), commands, a spawned
// process, a second sandbox object that finds the first by its id, destroy.
import assert from "node:assert/strict";
import { Workspace } from "@mastra/core/workspace";
import { DaytonaSandbox } from "@mastra/daytona";
import { E2BSandbox } from "@mastra/e2b";
import { Template } from "e2b";
import { step } from "./lib.mjs";

const which = process.argv[2];
// The default E2B template apt-installs s3fs from Debian's archive; this one needs no network.
const make = (id) =>
  which === "e2b"
    ? new E2BSandbox({ ...(id ? { id } : {}), timeout: 120_000, template: Template().fromTemplate("base").runCmd("echo from-the-template > /home/user/built.txt") })
    : new DaytonaSandbox({ ...(id ? { id } : {}), language: "typescript", timeout: 120_000 });
const sandbox = make();
const workspace = new Workspace({ sandbox });
await step("init", () => workspace.init());
await step("exec", async () => {
  const r = await workspace.sandbox.executeCommand("sh", ["-c", "echo Hello; id -un"]);
  assert.equal(r.exitCode, 0);
  assert.equal(r.stdout, `Hello\n${which === "e2b" ? "user" : "daytona"}\n`);
  if (which === "e2b") assert.equal((await workspace.sandbox.executeCommand("cat", ["/home/user/built.txt"])).stdout, "from-the-template\n");
  const bad = await workspace.sandbox.executeCommand("sh", ["-c", "echo oops >&2; exit 3"]);
  assert.equal(bad.exitCode, 3);
  assert.match(bad.stderr, /oops/);
  return r.stdout;
});
await step("spawn", async () => {
  const h = await workspace.sandbox.processes.spawn('sh -c "echo spawned; sleep 1; echo done"');
  const r = await h.wait();
  assert.equal(r.exitCode, 0);
  assert.equal(r.stdout, "spawned\ndone\n");
  return r.stdout;
});
await step("reconnect", async () => {
  const again = make(sandbox.id);
  await new Workspace({ sandbox: again }).init();
  assert.equal((await again.getInfo()).status, "running");
  return (await again.executeCommand("echo", ["back"])).stdout;
});
await step("destroy", () => workspace.destroy());
console.log("done");
