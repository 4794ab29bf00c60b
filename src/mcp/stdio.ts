// `forgevm mcp` on stdio. With a server (--server, FORGEVM_URL, or the one that owns the data
// directory) it relays every message to that server's /mcp, so the server's policy and audit log
// apply; without one it runs the same MCP server over a core of its own in this process.
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import type { Transport } from "@modelcontextprotocol/sdk/shared/transport.js";
import type { Forge } from "../core/forge.js";
import { MCP_PATH } from "./http.js";
import type { McpPolicy } from "./policy.js";
import { mcpServer } from "./server.js";
import { Agents } from "./sessions.js";
import { ignore } from "../util/ignore.js";

/** The largest message read from stdin (a larger one is an error, not a crash). */
const MAX_MESSAGE = 64 * 1024 * 1024;

/** Resolves when the client closes stdin (or the transport closes). */
function closed(transport: Transport): Promise<void> {
  return new Promise((resolve) => {
    const prev = transport.onclose;
    transport.onclose = () => {
      prev?.();
      resolve();
    };
    process.stdin.once("end", () => void transport.close());
    process.stdin.once("close", () => void transport.close());
  });
}

/** Serves one MCP session on stdio over this process's core until the client goes away. */
export async function serveStdio(forge: Forge, policy: McpPolicy, version: string): Promise<void> {
  const agents = new Agents(forge, policy);
  const session = agents.open();
  const transport = new StdioServerTransport(process.stdin, process.stdout, { maxBufferSize: MAX_MESSAGE });
  const done = closed(transport);
  await mcpServer(session, version).connect(transport);
  await done;
  await session.end();
}

/** Relays stdio to a server's /mcp until either side closes. */
export async function relayStdio(serverUrl: string, apiKey: string | undefined): Promise<void> {
  const local = new StdioServerTransport(process.stdin, process.stdout, { maxBufferSize: MAX_MESSAGE });
  const remote = new StreamableHTTPClientTransport(new URL(MCP_PATH, serverUrl), {
    requestInit: apiKey ? { headers: { "X-API-Key": apiKey } } : undefined,
  });
  const done = closed(local);
  // Errors the server answers with go back to the client as JSON-RPC errors of its request.
  local.onmessage = (m) =>
    void remote.send(m).catch((e: Error) => {
      if ("id" in m && "method" in m) void local.send({ jsonrpc: "2.0", id: m.id, error: { code: -32603, message: `forgevm server at ${serverUrl}: ${e.message}` } });
    });
  remote.onmessage = (m) => void local.send(m);
  remote.onclose = () => void local.close();
  await remote.start();
  await local.start();
  await done;
  // Ends the server's session (DELETE), which destroys what it made unless kept.
  await remote.terminateSession().catch(ignore("the remote server may have ended the session already"));
  await remote.close().catch(ignore("the remote server may be gone"));
}
