// `forgevm mcp`: the MCP server on stdio for coding agents (relayed to a server when one runs),
// its client configuration, and the audit log of what agents did.
import { resolve } from "node:path";
import { MEMORY_MB } from "../../schemas/bounds.js";
import { fileURLToPath } from "node:url";
import { InvalidArgumentError, type Command } from "commander";
import { type Cli, DEFAULT_URL } from "../context.js";
import { durationOption, intOption, listOption } from "../options.js";
import { emit, table } from "../output.js";

interface PolicyFlags {
  network?: "none" | "allowlist" | "full";
  allow?: string[];
  maxSandboxes?: number;
  maxSandboxesPerSession?: number;
  maxMemory?: number;
  maxVcpus?: number;
  maxTtl?: string;
  image?: string[];
  hostDir?: string[];
}

const POLICY_FLAGS: (keyof PolicyFlags)[] = ["network", "allow", "maxSandboxes", "maxSandboxesPerSession", "maxMemory", "maxVcpus", "maxTtl", "image", "hostDir"];

function networkOption(v: string) {
  if (v !== "none" && v !== "allowlist" && v !== "full") throw new InvalidArgumentError(`--network must be none, allowlist or full, got "${v}"`);
  return v;
}

/** Where the printed block sends an agent: the server named (--server, FORGEVM_URL), else this config file or data directory. */
interface Target {
  url: string;
  apiKey?: string;
  named: boolean;
  configFile?: string;
  dataDir: string;
}

/**
 * The JSON block MCP clients take to start or reach this server. A client starts the stdio
 * command from its own directory and environment, so the block says where to go: the server
 * named, else the config file, else the data directory (whose running server it relays to).
 */
function clientConfig(kind: "stdio" | "http", t: Target) {
  if (kind === "http") {
    return { mcpServers: { forgevm: { type: "http", url: new URL("/mcp", t.url).toString(), ...(t.apiKey ? { headers: { Authorization: `Bearer ${t.apiKey}` } } : {}) } } };
  }
  const bin = fileURLToPath(new URL("../../../../bin/forgevm", import.meta.url));
  const where = t.named ? ["--server", t.url] : t.configFile ? ["--config", resolve(t.configFile)] : ["--data-dir", t.dataDir];
  return { mcpServers: { forgevm: { type: "stdio", command: bin, args: [...where, "mcp"], ...(t.apiKey ? { env: { FORGEVM_API_KEY: t.apiKey } } : {}) } } };
}

export function mcpCommands(program: Command, cli: Cli): void {
  const mcp = program
    .command("mcp")
    .description("serve MCP on stdio for coding agents (through the running server when there is one, else on a core of its own)")
    .option("--print-config [kind]", "print the JSON block MCP clients take (stdio, or http for the server's /mcp) and exit")
    .option("--network <mode>", "the widest network agents may ask for: none, allowlist or full", networkOption)
    .option("--allow <entry>", "with --network allowlist: an entry agents' allowlists must stay within (repeatable)", listOption)
    .option("--max-sandboxes <n>", "most sandboxes agents may have in total", intOption("--max-sandboxes", 0, 10000))
    .option("--max-sandboxes-per-session <n>", "most sandboxes one session may have", intOption("--max-sandboxes-per-session", 0, 10000))
    .option("--max-memory <mib>", "most memory per sandbox, MiB", intOption("--max-memory", MEMORY_MB.minimum, MEMORY_MB.maximum))
    .option("--max-vcpus <n>", "most vCPUs per sandbox", intOption("--max-vcpus", 1, 64))
    .option("--max-ttl <duration>", 'longest lifetime per sandbox ("2h")', durationOption("--max-ttl"))
    .option("--image <pattern>", 'an image or template agents may use ("python:*"; repeatable; default any)', listOption)
    .option("--host-dir <dir>", "a host directory upload and download may use (repeatable; default none)", listOption)
    .action(async (o: PolicyFlags & { printConfig?: string | boolean }) => {
      const server = await cli.serverUrl();
      if (o.printConfig !== undefined) {
        const kind = o.printConfig === true ? "stdio" : o.printConfig;
        if (kind !== "stdio" && kind !== "http") throw new InvalidArgumentError(`--print-config takes stdio or http, got "${kind}"`);
        const cfg = server?.apiKey ? null : await cli.config();
        const key = server?.apiKey ?? (cfg?.auth.api_key || undefined);
        const url = server?.url ?? `http://${cfg?.server.host}:${cfg?.server.port}`;
        const named = !!(program.opts().server ?? process.env.FORGEVM_URL);
        console.log(JSON.stringify(clientConfig(kind, { url: url ?? DEFAULT_URL, apiKey: key, named, configFile: program.opts().config, dataDir: await cli.dataDir() }), null, 2));
        return;
      }
      const given = POLICY_FLAGS.filter((k) => o[k] !== undefined);
      if (server) {
        if (given.length) {
          throw new InvalidArgumentError(
            `policy flags apply to a core this command runs itself; the server at ${server.url} applies the mcp section of its own config (set the policy there)`,
          );
        }
        const { relayStdio } = await import("../../interfaces/mcp/stdio.js");
        await relayStdio(server.url, server.apiKey);
        return;
      }
      const m = { ...(await cli.config()).mcp };
      if (o.network) m.network = o.network;
      if (o.allow) m.allow = o.allow;
      if (o.maxSandboxes !== undefined) m.max_sandboxes = o.maxSandboxes;
      if (o.maxSandboxesPerSession !== undefined) m.max_sandboxes_per_session = o.maxSandboxesPerSession;
      if (o.maxMemory !== undefined) m.max_memory_mb = o.maxMemory;
      if (o.maxVcpus !== undefined) m.max_vcpus = o.maxVcpus;
      if (o.maxTtl) m.max_ttl = o.maxTtl;
      if (o.image) m.images = o.image;
      if (o.hostDir) m.host_dirs = o.hostDir;
      const [{ policyFromConfig }, { relayStdio }] = await Promise.all([import("../../interfaces/mcp/policy.js"), import("../../interfaces/mcp/stdio.js")]);
      // No server: one of this process's own serves /mcp under the policy, and the session relays to it.
      const own = await cli.dataDirServer({ reaper: true, mcp: policyFromConfig(m) });
      await relayStdio(own.url, own.apiKey);
      // stdin is gone: the session ended, and the server goes with its sandboxes.
      await cli.exit(0);
    });

  mcp
    .command("audit")
    .description("the tool calls agents made through MCP, oldest first (arguments with secrets redacted)")
    .option("--session <id>", "only this MCP session")
    .option("--tool <name>", "only this tool")
    .option("--limit <n>", "the newest n entries (default 100)", intOption("--limit", 1, 10000))
    .option("--json", "print JSON")
    .action(async (o: { session?: string; tool?: string; limit?: number; json?: boolean }) => {
      const q = { session: o.session, tool: o.tool, limit: o.limit ?? 100 };
      const entries = await (await cli.dataDirClient()).mcpAudit(q);
      emit(o.json, entries, () =>
        table(
          ["TIME", "SESSION", "TOOL", "OUTCOME", "SANDBOX", "MS", "ARGUMENTS / ERROR"],
          entries.map((e) => [e.time, e.session.slice(0, 8), e.tool, e.outcome, e.sandbox_id ?? "-", e.duration_ms, e.error ?? JSON.stringify(e.arguments ?? {})]),
          "no MCP tool calls recorded",
        ),
      );
    });
}
