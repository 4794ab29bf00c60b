// One server with two providers: QEMU (the default) and local. Both pass the same sandbox
// contract through the SDK; /providers lists them with their isolation; a spawn names its
// provider (or its template does), and an unknown one is a 400 listing those enabled.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { RunningServer } from "../../src/compose/serve.js";
import { apiRequest, startTestServer } from "../helpers.js";
import { sandboxContract } from "../sandbox-contract.js";

let server: RunningServer;
before(async () => {
  server = await startTestServer((c) => {
    c.providers.local.enabled = true;
  });
});
after(() => server?.close());

describe("providers", () => {
  it("are listed with their health, isolation and the local provider's warning", async () => {
    const r = await apiRequest(server.url, "GET", "/providers");
    assert.equal(r.status, 200);
    const byName = Object.fromEntries(r.body.map((p: { name: string }) => [p.name, p]));
    assert.deepEqual(Object.keys(byName).sort(), ["local", "qemu"]);
    assert.equal(byName.qemu.default, true);
    assert.equal(byName.qemu.isolation, "vm");
    assert.equal(byName.local.isolation, "namespaces");
    assert.match(byName.local.warning, /not a security boundary/);
    const local = await apiRequest(server.url, "GET", "/providers/local");
    assert.equal(local.body.features.snapshots, false);
    assert.equal((await apiRequest(server.url, "GET", "/providers/nope")).status, 404);
    assert.deepEqual(await apiRequest(server.url, "POST", "/providers/test").then((x) => x.body), { qemu: true, local: true });
  });

  it("a spawn names its provider, or its template does; an unknown one is refused naming those enabled", async () => {
    const bad = await apiRequest(server.url, "POST", "/sandboxes", { provider: "no-such-provider" });
    assert.equal(bad.status, 400);
    assert.match(bad.body.message, /provider: provider "no-such-provider" is not available \(available: qemu, local\)/);
    const t = await apiRequest(server.url, "POST", "/templates", { name: "on-local", provider: "local" });
    assert.equal(t.status, 201, JSON.stringify(t.body));
    const sb = await apiRequest(server.url, "POST", "/templates/on-local/spawn", {});
    assert.equal(sb.status, 201, JSON.stringify(sb.body));
    assert.equal(sb.body.provider, "local");
    assert.match(sb.body.warning, /not a security boundary/);
    assert.equal((await apiRequest(server.url, "DELETE", `/sandboxes/${sb.body.id}`)).status, 200);
    await apiRequest(server.url, "DELETE", "/templates/on-local");
  });
});

sandboxContract({ server: () => server, provider: "local", refuses: ["fork", "snapshot", "stop", "volumes", "commit"] });
sandboxContract({ server: () => server, provider: "qemu", refuses: [] });
