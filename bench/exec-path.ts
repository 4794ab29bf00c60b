// Benchmark of the exec path; prints one JSON document. Where an exec of `true` spends its time
// between a client's request and the agent's answer, on every interface, in one run:
//   - the agent's own round trip: the exec request on the guest channel, argv ["true"] and the
//     shell form (`sh -c true`, what a command line becomes);
//   - the core's `exec` (environment, working directory and user resolved, events emitted);
//   - REST `POST /sandboxes/{id}/exec`, E2B `commands.run`, Daytona `process.executeCommand`,
//     MCP `exec` over streamable HTTP;
//   - and, since E2B and Daytona ask the guest for more than `true` (a login bash; sh starting
//     bash), the agent running exactly what each asks, so that what the layer itself costs is
//     the difference.
// Each path runs once per round and the rounds interleave the paths, so drift of a noisy machine
// falls on all of them alike. Twice: on a quiet server (no pool, no prestarted VMM), then on a
// busy one (a warm pool of 2 held full, a prestarted VMM, and 3 sandboxes each running a loop
// that wakes every 100 ms).
// Usage: setsid node dist/bench/exec-path.js [--rounds 60]
import { parseArgs } from "node:util";
import { Daytona } from "@daytonaio/sdk";
import { Client as McpClient } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { Sandbox as E2bSandbox } from "e2b";
import { writeFile } from "node:fs/promises";
import { SERVER_AUTOGROUP_NICE, startServer } from "../src/compose/serve.js";
import type { Config } from "../src/config/config.js";
import { benchConfig } from "./data-dir.js";
import { restApi } from "./rest.js";
import { pct, machine } from "./stats.js";

const { values } = parseArgs({ options: { rounds: { type: "string", default: "60" } } });
const ROUNDS = Number(values.rounds);
const round2 = (x: number) => Math.round(x * 100) / 100;

/** What the E2B SDK asks the guest to run for commands.run("true"), and what the Daytona toolbox runs for executeCommand("true") (docs/e2b.md, docs/daytona.md). */
const E2B_GUEST = ["/bin/bash", "-l", "-c", "true"];
const DAYTONA_GUEST = "exec 2>&1; exec /bin/bash -c true";

async function measure(change: (c: Config) => void, busy: boolean) {
  const cfg = await benchConfig(change);
  const server = await startServer(cfg, "bench");
  const api = restApi(server.url);
  for (const k of Object.keys(process.env)) if (k.startsWith("E2B_")) delete process.env[k];
  Object.assign(process.env, { E2B_API_URL: server.url, E2B_SANDBOX_URL: server.url, E2B_API_KEY: "e2b_0000" });

  // Made through MCP: an agent's session reaches only the sandboxes it made; every other interface reaches any.
  const mcp = new McpClient({ name: "bench", version: "1" });
  await mcp.connect(new StreamableHTTPClientTransport(new URL("/mcp", server.url)));
  const made = await mcp.callTool({ name: "create_sandbox", arguments: {} });
  if (made.isError) throw new Error(`create_sandbox: ${JSON.stringify(made.content)}`);
  const id = (made.structuredContent as { sandbox_id: string }).sandbox_id;
  const core = server.forge.sandboxes.running(id);
  const e2b = await E2bSandbox.connect(id);
  const daytona = await new Daytona({ apiUrl: `${server.url}/daytona`, apiKey: "daytona_0000", target: "local" }).get(id);

  const busyIds: string[] = [];
  if (busy) {
    for (let i = 0; i < 3; i++) {
      const b = await api("POST", "/sandboxes", { ttl: "1h" });
      await api("POST", `/sandboxes/${b.id}/exec`, { command: "nohup sh -c 'while :; do sleep 0.1; ls / >/dev/null; done' >/dev/null 2>&1 &" });
      busyIds.push(b.id);
    }
  }

  const ok = (code: number | undefined, what: string) => {
    if (code !== 0) throw new Error(`${what} exited ${code}`);
  };
  const paths: Record<string, () => Promise<unknown>> = {
    agent_argv: async () => ok((await core.vm.guest.execBuffered({ argv: ["true"] })).exit_code, "agent argv"),
    agent_shell: async () => ok((await core.vm.guest.execBuffered({ cmd: "true" })).exit_code, "agent shell"),
    core_exec: async () => ok((await core.exec("true")).exitCode, "core exec"),
    rest_exec: async () => ok((await api("POST", `/sandboxes/${id}/exec`, { command: "true" })).exit_code, "REST exec"),
    mcp_exec: async () => {
      const r = await mcp.callTool({ name: "exec", arguments: { sandbox_id: id, command: "true" } });
      if (r.isError) throw new Error(`MCP exec: ${JSON.stringify(r.content)}`);
      ok((r.structuredContent as { exit_code: number }).exit_code, "MCP exec");
    },
    e2b_commands_run: async () => ok((await e2b.commands.run("true")).exitCode, "E2B commands.run"),
    agent_as_e2b_asks: async () => ok((await core.vm.guest.execBuffered({ argv: E2B_GUEST })).exit_code, "bash -l"),
    daytona_execute_command: async () => ok((await daytona.process.executeCommand("true")).exitCode, "Daytona executeCommand"),
    agent_as_daytona_asks: async () => ok((await core.vm.guest.execBuffered({ cmd: DAYTONA_GUEST })).exit_code, "sh then bash"),
  };
  // Warm every path (connections, the guest's page cache, the shell chosen once).
  for (const run of Object.values(paths)) await run();
  const ms: Record<string, number[]> = Object.fromEntries(Object.keys(paths).map((k) => [k, []]));
  for (let r = 0; r < ROUNDS; r++) {
    // Rotate the order too: no path always follows the same one.
    const names = Object.keys(paths);
    for (let i = 0; i < names.length; i++) {
      const name = names[(i + r) % names.length];
      const t0 = performance.now();
      await paths[name]();
      ms[name].push(performance.now() - t0);
    }
  }
  const p50 = (k: string) => pct(ms[k], 50);
  const out = {
    ms: Object.fromEntries(Object.entries(ms).map(([k, xs]) => [k, { p50: round2(pct(xs, 50)), p90: round2(pct(xs, 90)) }])),
    ratios_p50: {
      rest_vs_agent_shell: round2(p50("rest_exec") / p50("agent_shell")),
      rest_vs_agent_argv: round2(p50("rest_exec") / p50("agent_argv")),
      core_vs_agent_shell: round2(p50("core_exec") / p50("agent_shell")),
      mcp_vs_rest: round2(p50("mcp_exec") / p50("rest_exec")),
      e2b_vs_rest: round2(p50("e2b_commands_run") / p50("rest_exec")),
      e2b_vs_agent_running_what_it_asks: round2(p50("e2b_commands_run") / p50("agent_as_e2b_asks")),
      daytona_vs_rest: round2(p50("daytona_execute_command") / p50("rest_exec")),
      daytona_vs_agent_running_what_it_asks: round2(p50("daytona_execute_command") / p50("agent_as_daytona_asks")),
    },
    rest_overhead_p50_ms: round2(p50("rest_exec") - p50("agent_shell")),
  };
  await mcp.close();
  for (const b of busyIds) await api("DELETE", `/sandboxes/${b}`);
  await api("DELETE", `/sandboxes/${id}`);
  const accel = (await server.forge.providers.health()).accel;
  await server.close();
  return { accel, ...out };
}

async function main() {
  // The server runs in this process as `forgevm serve` would as a service: its session raised
  // (compose/serve.ts), which counts on the busy server, whose VMs compete with it. Run it with setsid.
  await writeFile("/proc/self/autogroup", String(SERVER_AUTOGROUP_NICE)).catch(() => console.error("# the session's scheduling group could not be raised (not root?)"));
  const quiet = await measure((c) => {
    c.snapshots.prestart = 0;
    c.warm_pool = { size: 0, memory_budget_mb: 0 };
  }, false);
  const busy = await measure((c) => {
    c.snapshots.prestart = 1;
    c.warm_pool = { size: 2, memory_budget_mb: 2048 };
  }, true);
  console.log(
    JSON.stringify(
      {
        benchmark: "exec-path",
        date: new Date().toISOString(),
        machine: machine(quiet.accel),
        rounds: ROUNDS,
        quiet_server: quiet,
        busy_server: busy,
      },
      null,
      2,
    ),
  );
  process.exit(0);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
