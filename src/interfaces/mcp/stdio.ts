// `forgevm mcp` on stdio: every message is relayed to a server's /mcp (--server, FORGEVM_URL, the
// one that owns the data directory, or one the command starts for itself under the policy its
// flags give), so that server's policy, session end and audit log apply.
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import type { Transport } from "@modelcontextprotocol/sdk/shared/transport.js";
import { MCP_PATH } from "./http.js";
import { ignore } from "../../util/ignore.js";

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
