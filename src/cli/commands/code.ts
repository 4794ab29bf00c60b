// `forgevm code`: runs code in a sandbox's stateful code context (Python by default), from a file
// or standard input, printing its output as it comes, then its result; exits 1 when the code
// raised. `forgevm code contexts ID` lists the sandbox's contexts.
import { readFile } from "node:fs/promises";
import type { Command } from "commander";
import type { CodeResult } from "forgevm";
import type { Cli } from "../context.js";
import { durationOption, nonEmpty, pairOption } from "../options.js";

/** Largest program read from a file or standard input. */
const MAX_CODE = 16 * 1024 * 1024;

async function readCode(source: string): Promise<string> {
  if (source !== "-") return readFile(source, "utf8");
  let text = "";
  for await (const c of process.stdin as AsyncIterable<Buffer>) {
    text += c.toString("utf8");
    if (text.length > MAX_CODE) throw new Error(`the code on standard input is larger than ${MAX_CODE >> 20} MiB`);
  }
  return text;
}

/** How a result is shown in a terminal: its text, or what kind of thing it is. */
function resultLine(r: CodeResult): string {
  if (r.text !== undefined && !r.png) return r.text;
  const kinds = Object.keys(r).filter((k) => k !== "is_main_result" && k !== "text");
  return `${r.text ?? "result"} [${kinds.join(", ")}: use --json to get it]`;
}

export function codeCommands(program: Command, cli: Cli): void {
  const code = program
    .command("code")
    .description("run code in a sandbox's stateful code context (state persists between runs); prints output as it comes, then the result; exits 1 when the code raised")
    .argument("<id>", "sandbox id")
    .argument("[file]", 'the code: a file, or "-" for standard input', "-")
    .option("-l, --lang <language>", "python (default), javascript or bash")
    .option("-c, --context <id>", "a context made with `forgevm code new` (default: the language's own)")
    .option("-t, --timeout <duration>", "interrupt the code after this long (the context keeps its state), e.g. 30s", durationOption("--timeout"))
    .option("-e, --env <NAME=VALUE>", "environment variable of this run (repeatable)", pairOption("--env"))
    .option("--json", "print the whole execution (results in every format) as JSON")
    .action(async (id: string, file: string, o: { lang?: string; context?: string; timeout?: string; env?: Record<string, string>; json?: boolean }) => {
      const sb = await (await cli.client()).get(id);
      const source = await readCode(file);
      const common = { language: o.lang, context: o.context, timeout: o.timeout, env: nonEmpty(o.env) };
      if (o.json) {
        const ex = await sb.runCode(source, common);
        console.log(JSON.stringify(ex, null, 2));
        process.exitCode = ex.error ? 1 : 0;
        return;
      }
      const ex = await sb.runCode(source, {
        ...common,
        onStdout: (t) => void process.stdout.write(t),
        onStderr: (t) => void process.stderr.write(t),
      });
      for (const r of ex.results) console.log(resultLine(r));
      if (ex.error) {
        process.stderr.write(ex.error.traceback || `${ex.error.name}: ${ex.error.value}\n`);
        process.exitCode = 1;
      }
    });

  code
    .command("new")
    .description("start a new code context and print its id")
    .argument("<id>", "sandbox id")
    .option("-l, --lang <language>", "python (default), javascript or bash")
    .option("-w, --workdir <dir>", "its working directory")
    .option("-u, --user <user>", "who its code runs as")
    .action(async (id: string, o: { lang?: string; workdir?: string; user?: string }) => {
      const ctx = await (await (await cli.client()).get(id)).createCodeContext({ language: o.lang, cwd: o.workdir, user: o.user });
      console.log(ctx.id);
    });

  code
    .command("contexts")
    .description("list a sandbox's code contexts")
    .argument("<id>", "sandbox id")
    .option("--json", "as JSON")
    .action(async (id: string, o: { json?: boolean }) => {
      const list = await (await (await cli.client()).get(id)).listCodeContexts();
      if (o.json) return console.log(JSON.stringify(list, null, 2));
      for (const c of list) console.log(`${c.id}  ${c.language.padEnd(10)}  ${c.cwd}${c.user ? `  (${c.user})` : ""}`);
    });
}
