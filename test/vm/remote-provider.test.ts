// The remote provider against a second server on this machine: the provider contract (VM level)
// and the sandbox contract through a server whose "remote" provider is that second one. Every far
// sandbox goes with its near one.
import assert from "node:assert/strict";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import type { RunningServer } from "../../src/compose/serve.js";
import { RemoteProvider } from "../../src/providers/remote/remote-provider.js";
import { apiRequest, startTestServer } from "../helpers.js";
import { providerContract } from "../provider-contract.js";
import { sandboxContract } from "../sandbox-contract.js";

// Started before any hook: the contracts' own hooks need them.
const far: RunningServer = await startTestServer((c) => {
  c.auth.api_key = "far-key";
});
const near: RunningServer = await startTestServer((c) => {
  c.providers.remote = { url: far.url, api_key: "far-key" };
});
providerContract("remote", {
  make: (paths) => new RemoteProvider({ paths, url: far.url, apiKey: "far-key" }),
  vmsDir: (paths) => join(paths.dataDir, "remote"),
  noVmm: "the far server's VMM is its own (its contract is the qemu one)",
});

describe("remote provider", () => {
  it("is listed with the far server's address and provider; a wrong key is a problem it names", async () => {
    const p = await apiRequest(near.url, "GET", "/providers/remote");
    assert.equal(p.status, 200);
    assert.equal(p.body.healthy, true, JSON.stringify(p.body));
    assert.equal(p.body.config.url, far.url);
    assert.equal(p.body.config.remote_provider, "qemu (vm)");
    const bad = new RemoteProvider({ paths: { dataDir: "/nonexistent" } as never, url: far.url, apiKey: "wrong" });
    const h = await bad.health();
    assert.equal(h.healthy, false);
    assert.match(h.problems.join(" "), /401/);
  });

  it("a sandbox on it is a sandbox of the far server, named in its metadata, and goes with it", async () => {
    const sb = await apiRequest(near.url, "POST", "/sandboxes", { provider: "remote" });
    assert.equal(sb.status, 201, JSON.stringify(sb.body));
    const farList = await apiRequest(far.url, "GET", "/sandboxes", undefined, { "X-API-Key": "far-key" });
    const mine = farList.body.filter((s: { metadata?: Record<string, string> }) => s.metadata?.["forgevm.remote_of"] === sb.body.id);
    assert.equal(mine.length, 1);
    const r = await apiRequest(near.url, "POST", `/sandboxes/${sb.body.id}/exec`, { command: "hostname" });
    assert.equal(r.body.stdout, `${sb.body.id}\n`);
    await apiRequest(near.url, "DELETE", `/sandboxes/${sb.body.id}`);
    assert.equal((await apiRequest(far.url, "GET", `/sandboxes/${mine[0].id}`, undefined, { "X-API-Key": "far-key" })).status, 404);
  });
});

sandboxContract({ server: () => near, provider: "remote", refuses: ["fork", "snapshot", "stop", "volumes", "commit"] });

// Last, so that the contracts' own hooks have destroyed what they made.
after(async () => {
  await near?.close();
  const left = await apiRequest(far.url, "GET", "/sandboxes", undefined, { "X-API-Key": "far-key" });
  await far?.close();
  assert.deepEqual(left.body, [], "no far sandbox is left");
});
