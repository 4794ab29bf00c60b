// The MCP gateway through the unmodified E2B SDK (npm `e2b@2.51.0`) and the unmodified MCP client
// library, with real VMs: `Sandbox.create(image, {mcp})` starts the gateway over a stdio server
// the image carries; the MCP client lists and calls its tools through getHost's port traffic
// with the gateway's token (and is refused without it); inside the sandbox the gateway answers on
// localhost:50005; a connect() handle reads the token from the sandbox; catalogue servers and a
// server the image lacks are refused, each naming it.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { Sandbox, SandboxError } from "e2b";
import type { FastifyInstance } from "fastify";
import { buildApp } from "../../src/compose/app.js";
import type { Forge } from "../../src/index.js";
import { e2bEnv } from "../e2b-env.js";
import { assertNoVmLeft, openForge } from "../helpers.js";

const API_KEY = "e2b_mcp_0123456789abcdef";
const IMAGE = "local/mcp-notes:v1";
const SERVER_DIR = "/opt/mcp/github/forgevm/notes";
/** A stdio MCP server in plain Python: `add`, and `where` (its env, working directory and what installCmd left). */
const SERVER = `import json, os, sys
for line in sys.stdin:
    m = json.loads(line)
    if "id" not in m: continue
    p = m.get("params") or {}
    if m["method"] == "initialize":
        r = {"protocolVersion": p["protocolVersion"], "capabilities": {"tools": {}}, "serverInfo": {"name": "notes", "version": "1"}}
    elif m["method"] == "tools/list":
        r = {"tools": [
            {"name": "add", "description": "a + b", "inputSchema": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]}},
            {"name": "where", "description": "env, cwd, install", "inputSchema": {"type": "object"}}]}
    elif m["method"] == "tools/call" and p.get("name") == "add":
        a = p.get("arguments") or {}
        r = {"content": [{"type": "text", "text": str(a["a"] + a["b"])}]}
    elif m["method"] == "tools/call" and p.get("name") == "where":
        r = {"content": [{"type": "text", "text": os.environ.get("NOTE_PREFIX", "-") + " " + os.getcwd() + " " + open("installed.txt").read().strip()}]}
    else:
        print(json.dumps({"jsonrpc": "2.0", "id": m["id"], "error": {"code": -32601, "message": "no such method"}}), flush=True)
        continue
    print(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": r}), flush=True)
`;
let forge: Forge;
let app: FastifyInstance;
let base: string;

before(async () => {
  forge = await openForge({ reapIntervalMs: 200 });
  app = await buildApp({ forge, version: "test", apiKey: API_KEY });
  base = await app.listen({ host: "127.0.0.1", port: 0 });
  e2bEnv(base, API_KEY);
  // An image that carries an MCP server, as a user's would.
  const maker = await forge.sandboxes.spawn();
  try {
    await maker.mkdir(SERVER_DIR);
    await maker.writeFile(`${SERVER_DIR}/server.py`, SERVER);
    await forge.images.commit(maker.id, { image: IMAGE });
  } finally {
    await forge.sandboxes.destroy(maker.id);
  }
});

after(async () => {
  await app?.close();
  await forge?.close();
  if (forge) await assertNoVmLeft(forge);
});

/** An MCP client on the gateway of sandbox `id`, reached by E2B's header form of port traffic. */
async function mcpClient(id: string, token: string): Promise<Client> {
  const client = new Client({ name: "forgevm-test", version: "1" });
  const headers = { authorization: `Bearer ${token}`, "e2b-sandbox-id": id, "e2b-sandbox-port": "50005" };
  await client.connect(new StreamableHTTPClientTransport(new URL(`${base}/mcp`), { requestInit: { headers } }));
  return client;
}

describe("the MCP gateway (create({mcp}), getMcpUrl, getMcpToken)", () => {
  it("serves the image's stdio server: tools listed and called over port traffic with the token, refused without; localhost:50005 inside; connect() reads the token", async () => {
    const sbx = await Sandbox.create(IMAGE, {
      timeoutMs: 300_000,
      mcp: { "github/forgevm/notes": { runCmd: "python3 server.py", installCmd: "echo installed > installed.txt", envs: { NOTE_PREFIX: "from-envs" } } },
    });
    try {
      assert.equal(sbx.getMcpUrl(), `https://50005-${sbx.sandboxId}.localhost:${new URL(base).port}/mcp`);
      const token = await sbx.getMcpToken();
      assert.match(token ?? "", /^[0-9a-f-]{36}$/);
      const client = await mcpClient(sbx.sandboxId, token!);
      try {
        assert.equal(client.getServerVersion()?.name, "forgevm-mcp-gateway");
        const tools = await client.listTools();
        assert.deepEqual(tools.tools.map((t) => t.name).sort(), ["add", "where"]);
        assert.deepEqual((await client.callTool({ name: "add", arguments: { a: 2, b: 40 } })).content, [{ type: "text", text: "42" }]);
        // The server runs in its repository, after installCmd, with its envs.
        assert.deepEqual((await client.callTool({ name: "where", arguments: {} })).content, [{ type: "text", text: `from-envs ${SERVER_DIR} installed` }]);
        await assert.rejects(client.callTool({ name: "nope", arguments: {} }), /no server of this gateway offers name 'nope'/);
      } finally {
        await client.close();
      }
      const post = (headers: Record<string, string>) =>
        fetch(`${base}/mcp`, {
          method: "POST",
          headers: { "e2b-sandbox-id": sbx.sandboxId, "e2b-sandbox-port": "50005", "content-type": "application/json", accept: "application/json, text/event-stream", ...headers },
          body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list" }),
        });
      assert.equal((await post({})).status, 401);
      assert.equal((await post({ authorization: "Bearer not-the-token" })).status, 401);
      assert.equal((await post({ authorization: `Bearer ${token}` })).status, 200);
      // What a client gets wrong is an answer, not a hang: a body that is not JSON, a session the gateway never gave, a GET for a stream it does not offer.
      const raw = (method: string, headers: Record<string, string>, body?: string) =>
        fetch(`${base}/mcp`, { method, headers: { "e2b-sandbox-id": sbx.sandboxId, "e2b-sandbox-port": "50005", authorization: `Bearer ${token}`, ...headers }, body });
      const notJson = await raw("POST", { "content-type": "application/json" }, "{nope");
      assert.equal(notJson.status, 400);
      assert.equal(((await notJson.json()) as { error: { code: number } }).error.code, -32700);
      const stale = await raw("POST", { "content-type": "application/json", "mcp-session-id": "no-such-session" }, JSON.stringify({ jsonrpc: "2.0", id: 2, method: "ping" }));
      assert.equal(stale.status, 404);
      assert.equal((await raw("GET", {})).status, 405);
      const unknown = await raw("POST", { "content-type": "application/json" }, JSON.stringify({ jsonrpc: "2.0", id: 3, method: "no/such" }));
      assert.deepEqual(await unknown.json(), { jsonrpc: "2.0", id: 3, error: { code: -32601, message: "method not found: no/such" } });
      // Inside the sandbox, as E2B's docs have it: http://localhost:50005/mcp, the token in /etc/mcp-gateway/.token (root's alone).
      const inside = await sbx.commands.run(
        `curl -s -X POST http://localhost:50005/mcp -H "Authorization: Bearer $(cat /etc/mcp-gateway/.token)" -H 'content-type: application/json' -d '{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"add","arguments":{"a":1,"b":1}}}'; echo; stat -c %a /etc/mcp-gateway/.token`,
        { user: "root" },
      );
      assert.deepEqual(inside.stdout.split("\n").slice(0, 2), ['{"jsonrpc": "2.0", "id": 7, "result": {"content": [{"type": "text", "text": "2"}]}}', "600"]);
      const handle = await Sandbox.connect(sbx.sandboxId);
      assert.equal(await handle.getMcpToken(), token);
    } finally {
      await sbx.kill();
    }
  });

  it("refuses catalogue servers and malformed entries with a 400 naming them; a server the image lacks fails the create with the gateway's reason", async () => {
    await assert.rejects(Sandbox.create({ mcp: { exa: { apiKey: "k" } } }), /mcp\.exa: catalogue servers run from the Docker MCP catalogue and need the internet/);
    await assert.rejects(Sandbox.create({ mcp: { "github/a/b": {} } as never }), /mcp\.github\/a\/b\.runCmd is required/);
    await assert.rejects(Sandbox.create({ mcp: { "github/a/b": { runCmd: "x", envs: { N: 1 } } } as never }), /mcp\.github\/a\/b\.envs\.N must be a string/);
    const before = forge.sandboxes.list().length;
    await assert.rejects(Sandbox.create({ mcp: { "github/forgevm/absent": { runCmd: "python3 server.py" } } }), (e: unknown) => {
      assert.ok(e instanceof SandboxError, String(e));
      assert.match(
        e.message,
        /Failed to start MCP gateway: .*github\/forgevm\/absent: not in this image \(looked for \/opt\/mcp\/github\/forgevm\/absent\), and the image has no git/,
      );
      return true;
    });
    // The SDK kills a sandbox whose gateway did not start; nothing is left behind.
    assert.equal(forge.sandboxes.list().length, before);
  });
});
