// `forgevm secret add|update|ls|rm`: secrets kept on the server, which egress rules name
// ({{NAME}}) and the egress proxy adds to requests for their destinations; the value never enters
// a sandbox. A value is read from standard input (typed without echo on a terminal), never taken
// as an argument, where the shell's history and the process list would keep it.
import { createInterface } from "node:readline";
import type { Command } from "commander";
import type { SecretInfo } from "forgevm";
import type { Cli } from "../context.js";
import { emit, table } from "../output.js";

/** The value on standard input: all of it, one trailing line break dropped; typed without echo on a terminal. */
async function readValue(name: string): Promise<string> {
  if (process.stdin.isTTY) {
    const rl = createInterface({ input: process.stdin, output: process.stderr, terminal: true });
    process.stderr.write(`value of ${name} (not shown): `);
    // Nothing typed is echoed.
    (rl as unknown as { _writeToOutput: (s: string) => void })._writeToOutput = () => {};
    const line = await new Promise<string>((resolve) => rl.once("line", resolve));
    rl.close();
    process.stderr.write("\n");
    return line;
  }
  const parts: Buffer[] = [];
  for await (const c of process.stdin) parts.push(c as Buffer);
  const text = Buffer.concat(parts).toString("utf8");
  return text.endsWith("\r\n") ? text.slice(0, -2) : text.endsWith("\n") ? text.slice(0, -1) : text;
}

export function secretCommands(program: Command, cli: Cli): void {
  const secret = program
    .command("secret")
    .description("secrets kept on the server: egress rules name them ({{NAME}}) and the egress proxy adds them to requests; sandboxes never see them");
  const through = async <T>(call: (c: import("forgevm").Client) => Promise<T>) => call(await cli.dataDirClient());

  secret
    .command("add")
    .description('store a secret, its value read from standard input (e.g. printf %s "$KEY" | forgevm secret add OPENAI_KEY)')
    .argument("<name>", "letters, digits, _ and - (matched without regard to case)")
    .option("-d, --description <text>", "what it is for")
    .option("--json", "print JSON")
    .action(async (name: string, o: { description?: string; json?: boolean }) => {
      const value = await readValue(name);
      if (!value) throw new Error("the value is empty: give it on standard input");
      const s = await through<SecretInfo>((c) => c.secrets.create({ name, value, description: o.description }));
      emit(o.json, s, () => console.log(`${s.name} (version ${s.version}): use it in an egress rule as {{${s.name}}}`));
    });

  secret
    .command("update")
    .description("give a secret a new value, read from standard input (its version goes up; rules use it on their next request)")
    .argument("<name>", "the secret's name")
    .option("-d, --description <text>", "a new description")
    .option("--json", "print JSON")
    .action(async (name: string, o: { description?: string; json?: boolean }) => {
      const value = await readValue(name);
      if (!value) throw new Error("the value is empty: give it on standard input");
      const s = await through<SecretInfo>((c) => c.secrets.update(name, { value, ...(o.description !== undefined ? { description: o.description } : {}) }));
      emit(o.json, s, () => console.log(`${s.name} (version ${s.version})`));
    });

  secret
    .command("ls")
    .alias("list")
    .description("list secrets (never their values)")
    .option("--json", "print JSON")
    .action(async (o: { json?: boolean }) => {
      const list = await through<SecretInfo[]>((c) => c.secrets.list());
      emit(o.json, list, () =>
        table(
          ["NAME", "VERSION", "UPDATED", "DESCRIPTION"],
          list.map((s) => [s.name, s.version, s.updated_at, s.description ?? ""]),
          "no secrets",
        ),
      );
    });

  secret
    .command("rm")
    .description("delete secrets; rules that name one then fail their requests, saying so")
    .argument("<names...>", "secret names")
    .action(async (names: string[]) => {
      for (const n of names) {
        await through((c) => c.secrets.remove(n));
        console.log(n);
      }
    });
}
