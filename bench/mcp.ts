// Benchmark of the MCP interface; prints one JSON document. On one sandbox of one server, in one
// run: a command (`true`) through MCP's `exec` tool over streamable HTTP, through `forgevm mcp`
// on stdio relaying to the server, and through the REST API (our SDK's exec) as the baseline.
// The ratios are what MCP costs over REST (JSON-RPC, SSE framing, the policy and audit write).
// Usage: node dist/bench/mcp.js [--calls 60]
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { Client as McpClient } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { Client } from "forgevm";
import { startServer } from "../src/compose/serve.js";
import { benchConfig } from "./data-dir.js";
import { pct, timed, machine } from "./stats.js";

const { values } = parseArgs({ options: { calls: { type: "string", default: "60" } } });
const CALLS = Number(values.calls);
const CLI = fileURLToPath(new URL("../src/cli/main.js", import.meta.url));

const stats = (xs: number[]) => ({ p50: pct(xs, 50), p90: pct(xs, 90), n: xs.length });

async function main() {
  const cfg = await benchConfig();
  const server = await startServer(cfg, "bench");
  const rest = new Client({ baseUrl: server.url });

  const http = new McpClient({ name: "bench", version: "1" });
  const httpTransport = new StreamableHTTPClientTransport(new URL("/mcp", server.url));
  await http.connect(httpTransport);
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !k.startsWith("FORGEVM_")) env[k] = v;
  const stdio = new McpClient({ name: "bench", version: "1" });
  await stdio.connect(new StdioClientTransport({ command: "node", args: [CLI, "--server", server.url, "mcp"], env }));

  const created = await http.callTool({ name: "create_sandbox", arguments: {} });
  const id = (created.structuredContent as { sandbox_id: string }).sandbox_id;
  const sb = await rest.get(id);
  const mcpExec = (c: McpClient) => async () => {
    const r = await c.callTool({ name: "exec", arguments: { sandbox_id: id, command: "true" } });
    if (r.isError || (r.structuredContent as { exit_code: number }).exit_code !== 0) throw new Error(JSON.stringify(r.content));
  };
  // Warm every path once (connections, the guest's page cache).
  await sb.exec("true");
  await mcpExec(http)();
  await mcpExec(stdio)();
  // Interleaved rounds, so drift of this noisy machine falls on every path alike.
  const restMs: number[] = [];
  const httpMs: number[] = [];
  const stdioMs: number[] = [];
  for (let i = 0; i < CALLS; i++) {
    restMs.push(...(await timed(1, () => sb.exec("true"))));
    httpMs.push(...(await timed(1, mcpExec(http))));
    stdioMs.push(...(await timed(1, mcpExec(stdio))));
  }
  await http.callTool({ name: "destroy_sandbox", arguments: { sandbox_id: id } });
  await stdio.close();
  await httpTransport.terminateSession();
  await http.close();
  const accel = (await server.forge.providers.health()).accel;
  await server.close();

  const ratio = (xs: number[]) => Math.round((pct(xs, 50) / pct(restMs, 50)) * 100) / 100;
  console.log(
    JSON.stringify(
      {
        benchmark: "mcp",
        date: new Date().toISOString(),
        machine: machine(),
        accel,
        exec_true_round_trip_ms: {
          rest_sdk: stats(restMs),
          mcp_streamable_http: stats(httpMs),
          mcp_stdio_relay: stats(stdioMs),
          ratio_http_to_rest_p50: ratio(httpMs),
          ratio_stdio_relay_to_rest_p50: ratio(stdioMs),
        },
      },
      null,
      2,
    ),
  );
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
