// Benchmark of the E2B interface; prints one JSON document. All against one server, in one run:
//   - E2B `Sandbox.create()` → first `commands.run("true")` answered, beside our own SDK's
//     spawn → first exec answered (the ratio is what the compatibility layer costs: the E2B user
//     made at create, and the login shell E2B runs every command in);
//   - a command on a running sandbox, both ways, and ours in the login shell E2B asks for;
//   - a Python code context's start in a sandbox just restored;
//   - `runCode("1+1")` in a warm context through @e2b/code-interpreter and through our SDK.
// Usage: node dist/bench/e2b.js [--runs 8] [--calls 40]
import { parseArgs } from "node:util";
import { Sandbox as CodeSandbox } from "@e2b/code-interpreter";
import { Sandbox as E2bSandbox } from "e2b";
import { Client } from "forgevm";
import { startServer } from "../src/compose/serve.js";
import { CODE_IMAGE, DEFAULT_IMAGE } from "../src/core/forge.js";
import { benchConfig } from "./data-dir.js";
import { pct, timed, machine } from "./stats.js";

const { values } = parseArgs({ options: { runs: { type: "string", default: "8" }, calls: { type: "string", default: "40" } } });
const RUNS = Number(values.runs);
const CALLS = Number(values.calls);

const stats = (xs: number[]) => ({ p50: pct(xs, 50), p90: pct(xs, 90), n: xs.length });

async function main() {
  const cfg = await benchConfig(() => {}, [DEFAULT_IMAGE, CODE_IMAGE]);
  const server = await startServer(cfg, "bench");
  for (const k of Object.keys(process.env)) if (k.startsWith("E2B_")) delete process.env[k];
  Object.assign(process.env, { E2B_API_URL: server.url, E2B_SANDBOX_URL: server.url, E2B_API_KEY: "e2b_0000" });
  const client = new Client({ baseUrl: server.url });

  // The first spawn of each image boots it and makes its base snapshot: not what is measured.
  await (await client.spawn({})).destroy();
  await (await CodeSandbox.create()).kill();

  const ours: number[] = [];
  const theirs: number[] = [];
  for (let i = 0; i < RUNS; i++) {
    let t0 = performance.now();
    const sb = await client.spawn({});
    await sb.exec("true");
    ours.push(performance.now() - t0);
    await sb.destroy();
    t0 = performance.now();
    const e = await E2bSandbox.create();
    await e.commands.run("true");
    theirs.push(performance.now() - t0);
    await e.kill();
  }

  // A Python context in a sandbox just restored: the runtime's start (its files are in the base snapshot's page cache).
  const contextStart: number[] = [];
  for (let i = 0; i < Math.min(RUNS, 5); i++) {
    const fresh = await client.spawn({});
    const t0 = performance.now();
    await fresh.createCodeContext({ language: "python" });
    contextStart.push(performance.now() - t0);
    await fresh.destroy();
  }

  const sb = await client.spawn({ image: CODE_IMAGE });
  const e = await CodeSandbox.connect(sb.id);
  const execOurs = await timed(CALLS, () => sb.exec("true"));
  const execLogin = await timed(CALLS, () => sb.exec("bash -l -c true"));
  const execE2b = await timed(CALLS, () => e.commands.run("true"));
  await sb.runCode("0");
  await e.runCode("0");
  const codeOurs = await timed(CALLS, () => sb.runCode("1+1"));
  const codeE2b = await timed(CALLS, async () => {
    const r = await e.runCode("1+1");
    if (r.text !== "2") throw new Error(`1+1 gave ${r.text}`);
  });
  await sb.destroy();
  const accel = (await server.forge.providers.health()).accel;
  await server.close();

  console.log(
    JSON.stringify(
      {
        benchmark: "e2b",
        date: new Date().toISOString(),
        machine: machine(),
        accel,
        spawn_to_first_command_ms: { forgevm_sdk: stats(ours), e2b_sdk: stats(theirs), ratio_p50: Math.round((pct(theirs, 50) / pct(ours, 50)) * 100) / 100 },
        command_on_running_sandbox_ms: {
          forgevm_exec: stats(execOurs),
          // What E2B's SDK asks for every command: a login shell. The layer's own cost is the difference from this.
          forgevm_exec_bash_login: stats(execLogin),
          e2b_commands_run: stats(execE2b),
          ratio_p50: Math.round((pct(execE2b, 50) / pct(execOurs, 50)) * 100) / 100,
          ratio_to_login_shell_p50: Math.round((pct(execE2b, 50) / pct(execLogin, 50)) * 100) / 100,
        },
        python_context_start_in_fresh_sandbox_ms: stats(contextStart),
        run_code_1_plus_1_warm_ms: { forgevm_sdk: stats(codeOurs), e2b_code_interpreter: stats(codeE2b) },
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
