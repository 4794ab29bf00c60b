// The e2b provider against this project's own E2B routes on a second server (an E2B-compatible
// API on this machine): the provider contract, then the sandbox contract through a server whose
// "e2b" provider is that one. Every far sandbox goes with its near one.
import assert from "node:assert/strict";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import type { RunningServer } from "../../src/compose/serve.js";
import { E2bProvider } from "../../src/providers/e2b/e2b-provider.js";
import { apiRequest, startTestServer } from "../helpers.js";
import { providerContract } from "../provider-contract.js";
import { sandboxContract } from "../sandbox-contract.js";

const KEY = "e2b_0123456789abcdef";
// Started before any hook: the contracts' own hooks need them.
const far: RunningServer = await startTestServer((c) => {
  c.auth.api_key = KEY;
});
const near: RunningServer = await startTestServer((c) => {
  c.providers.e2b = { api_url: far.url, api_key: KEY, sandbox_url: far.url, domain: "", template: "base" };
});
const endpoints = { apiUrl: far.url, apiKey: KEY, sandboxUrl: far.url };

providerContract("e2b", {
  make: (paths) => new E2bProvider({ paths, ...endpoints }),
  vmsDir: (paths) => join(paths.dataDir, "e2b"),
  noVmm: "the far service's VMM is its own",
});

describe("e2b provider", () => {
  it("is listed with the service's address; a wrong key is a problem it names", async () => {
    const p = await apiRequest(near.url, "GET", "/providers/e2b");
    assert.equal(p.status, 200);
    assert.equal(p.body.healthy, true, JSON.stringify(p.body));
    assert.equal(p.body.config.api_url, far.url);
    const bad = new E2bProvider({ paths: { dataDir: "/nonexistent" } as never, ...endpoints, apiKey: "e2b_ffff" });
    const h = await bad.health();
    assert.equal(h.healthy, false);
    assert.match(h.problems.join(" "), /401/);
  });

  it("a sandbox on it is an E2B sandbox of the service, named in its metadata, and goes with it", async () => {
    const sb = await apiRequest(near.url, "POST", "/sandboxes", { provider: "e2b" });
    assert.equal(sb.status, 201, JSON.stringify(sb.body));
    const list = (await fetch(`${far.url}/sandboxes`, { headers: { "X-API-Key": KEY } }).then((r) => r.json())) as { sandboxID: string; metadata?: Record<string, string> }[];
    const mine = list.filter((s: { metadata?: Record<string, string> }) => s.metadata?.["forgevm.remote_of"] === sb.body.id);
    assert.equal(mine.length, 1, JSON.stringify(list));
    const r = await apiRequest(near.url, "POST", `/sandboxes/${sb.body.id}/exec`, { command: "hostname; id -un" });
    assert.equal(r.body.stdout, `${sb.body.id}\nroot\n`);
    await apiRequest(near.url, "DELETE", `/sandboxes/${sb.body.id}`);
    const gone = await fetch(`${far.url}/sandboxes/${mine[0].sandboxID}`, { headers: { "X-API-Key": KEY } });
    assert.equal(gone.status, 404);
  });
});

sandboxContract({ server: () => near, provider: "e2b", refuses: ["fork", "snapshot", "stop", "volumes", "commit"] });

// Last, so that the contracts' own hooks have destroyed what they made.
after(async () => {
  await near?.close();
  const left = await fetch(`${far.url}/sandboxes`, { headers: { "X-API-Key": KEY } }).then((r) => r.json());
  await far?.close();
  assert.deepEqual(left, [], "no far sandbox is left");
});
