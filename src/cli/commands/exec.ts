// Running commands: `exec` in a sandbox on a server, and `run`, which makes a throwaway sandbox
// for one command (through the server that owns the data directory, or one of its own: context.ts).
import { fstatSync, type Stats } from "node:fs";
import { InvalidArgumentError, Option, type Command } from "commander";
import type { Client } from "forgevm";
import { parseImageReference } from "../../core/images/image-reference.js";
import type { Cli } from "../context.js";
import { durationOption, nonEmpty, pairOption, ttlOption } from "../options.js";
import { sandboxOptions, spawnRequest } from "./sandboxes.js";
import { withSpawnProgress } from "../spawn-progress.js";
import { interactive } from "../terminal.js";
import { LOGIN_SHELL } from "../../util/login-shell.js";
import { ignore } from "../../util/ignore.js";

/** Largest standard input forwarded to a command (it travels in the exec request). */
const MAX_STDIN = 64 * 1024 * 1024;

/** Standard input when it is a pipe or a file (never a terminal, which would wait for typing). */
async function pipedStdin(): Promise<Buffer | undefined> {
  let st: Stats;
  try {
    st = fstatSync(0);
  } catch {
    return undefined;
  }
  if (!st.isFIFO() && !st.isFile() && !st.isSocket()) return undefined;
  const parts: Buffer[] = [];
  let size = 0;
  for await (const c of process.stdin as AsyncIterable<Buffer>) {
    size += c.length;
    if (size > MAX_STDIN) throw new Error(`standard input is larger than ${MAX_STDIN >> 20} MiB; copy the data in with a file upload instead`);
    parts.push(c);
  }
  return Buffer.concat(parts);
}

interface ExecFlags {
  timeout?: string;
  workdir?: string;
  user?: string;
  env?: Record<string, string>;
  json?: boolean;
}

/** Runs `command` in the sandbox, streaming its output (or printing the result as JSON); resolves with its exit code. */
async function runIn(client: Client, id: string, command: string[], o: ExecFlags): Promise<number> {
  const sb = await client.get(id);
  const stdin = await pipedStdin();
  const opts = {
    args: command.length > 1 ? command.slice(1) : undefined,
    timeout: o.timeout,
    workdir: o.workdir,
    user: o.user,
    env: nonEmpty(o.env),
    stdin: stdin?.length ? new Uint8Array(stdin) : undefined,
  };
  if (o.json) {
    const r = await sb.exec(command[0], opts);
    console.log(JSON.stringify(r, null, 2));
    return r.exit_code;
  }
  const stream = sb.execStream(command[0], opts);
  for await (const chunk of stream) (chunk.stream === "stdout" ? process.stdout : process.stderr).write(chunk.data);
  if (stream.timedOut) console.error(`forgevm: ${command[0]} was killed after its timeout of ${o.timeout} (exit code 124)`);
  return stream.exitCode ?? 1;
}

// (run takes -e/--env with the sandbox options: there the sandbox is the command's.)
function execFlags(c: Command, withEnv = true): Command {
  c.option("-t, --timeout <duration>", "kill the command after this long (exit code 124), e.g. 30s", durationOption("--timeout"))
    .option("-w, --workdir <dir>", "working directory in the guest")
    .option("-u, --user <user>", "user to run as");
  if (withEnv) c.option("-e, --env <NAME=VALUE>", "environment variable (repeatable)", pairOption("--env"));
  return c.option("--json", "wait for the command and print its result as JSON");
}

export function execCommands(program: Command, cli: Cli): void {
  createCommand(program, cli);
  execFlags(
    program
      .command("exec")
      .description("run a command in a sandbox, streaming its output (piped standard input is passed on); exits with its exit code")
      .argument("<id>", "sandbox id")
      .argument("<command...>", "command and arguments (put -- before it)"),
  ).action(async (id: string, command: string[], o: ExecFlags) => {
    process.exitCode = await runIn(await cli.client(), id, command, o);
  });

  execFlags(
    sandboxOptions(
      program
        .command("run")
        .description(
          "boot a sandbox and run in the foreground, exiting with the exit code: `run IMAGE [CMD…]` or `run [-i IMAGE]` runs the image's own command (ENTRYPOINT, with CMD or yours) and removes the sandbox afterwards (--keep keeps it); `run [options] -- CMD…` runs one command in a throwaway sandbox; -it gives an interactive terminal; -d leaves the image's command (or yours) running as the sandbox's main process and prints its id",
        )
        .argument("[args...]", "[IMAGE] and the command with its arguments (put -- before it)")
        .option("-d, --detach", "leave the sandbox running with the command (or the image's ENTRYPOINT/CMD) as its main process; print its id")
        .option("--restart <policy>", "with -d: no, on-failure[:MAX], always or unless-stopped")
        .option("--ttl <duration>", "with -d: lifetime, e.g. 30m or 1h (0: until removed; a --restart policy has none unless given)", ttlOption("--ttl"))
        .option("--tty", "an interactive terminal (-it): the command, else a login shell, on a PTY")
        .option("--keep", "keep the sandbox when the image's command ends (the default removes it, as docker run --rm)")
        .option("--rm", "remove the sandbox when the command ends: what run does anyway unless --keep or -d (accepted as docker run takes it)")
        .addOption(new Option(COMMAND_ONLY).hideHelp()),
    ),
    false,
  ).action(async (args: string[], o) => {
    if (o.rm && o.keep) throw new InvalidArgumentError("--rm and --keep ask for opposite things: give one");
    if (o.rm && o.detach) throw new InvalidArgumentError("--rm with -d: a detached sandbox stays until removed (forgevm rm ID, or --ttl); drop --rm");
    let command = args;
    let ownCommand = !args.length;
    if (!o.image && !o.commandOnly && args.length && (await namesImage(() => cli.dataDirClient(), args[0]))) {
      o.image = args[0];
      command = args.slice(1);
      ownCommand = true; // as docker run: ENTRYPOINT runs, with these arguments as its CMD
    }
    if (o.detach) {
      const client = await cli.client();
      const sb = await withSpawnProgress(client, () => client.spawn({ ...spawnRequest(o), main: { ...(command.length ? { command } : {}), restart: o.restart } }));
      console.log(sb.id);
      return;
    }
    if (o.restart) throw new InvalidArgumentError("--restart needs -d (a policy keeps a main process running)");
    if (o.tty) {
      const client = await cli.client();
      const sb = await withSpawnProgress(client, () => client.spawn({ ...spawnRequest(o), ttl: o.ttl ?? "1h" }));
      const { url, apiKey } = await cli.endpoint();
      try {
        const what = command.length ? { command: command[0], args: command.slice(1) } : LOGIN_SHELL;
        process.exitCode = await interactive(url, apiKey, sb.id, { ...what, user: o.user, workdir: o.workdir, env: nonEmpty(o.env) });
      } finally {
        if (!o.keep) await sb.destroy().catch(ignore("the sandbox may be gone already"));
      }
      return;
    }
    // The data directory's server, or one of this command's own: the sandbox ends with the command either way.
    const server = await cli.dataDirClient();
    process.exitCode = ownCommand ? await runImageCommand(server, command, o) : await runOnServer(cli, server, command, o);
  });
}

/** `create`: a sandbox defined (its image pulled, its name taken) and not started; `start` boots it. */
function createCommand(program: Command, cli: Cli): void {
  sandboxOptions(
    program
      .command("create")
      .description("define a sandbox without starting it (as docker create): `create IMAGE [CMD…]` gives it the image's command (or yours) as its main process; print its id")
      .argument("[args...]", "[IMAGE] and the command with its arguments (put -- before it)")
      .option("--restart <policy>", "no, on-failure[:MAX], always or unless-stopped")
      .option("--ttl <duration>", "lifetime once started, e.g. 30m or 1h (0: until removed)", ttlOption("--ttl"))
      .option("-u, --user <user>", "who its commands run as by default (image: the image's USER)")
      .option("--json", "print the sandbox as JSON")
      .addOption(new Option(COMMAND_ONLY).hideHelp()),
  ).action(async (args: string[], o) => {
    let command = args;
    let positional = false;
    if (!o.image && !o.commandOnly && args.length) {
      // As docker create: the first word is the image. A command for the default image comes after --.
      if (!(await namesImage(() => cli.client(), args[0]))) {
        throw new InvalidArgumentError(
          `"${args[0]}" is no image this server has: name one (forgevm images, forgevm pull), or put -- before a command for the default image (forgevm create -- ${args.join(" ")})`,
        );
      }
      o.image = args[0];
      command = args.slice(1);
      positional = true;
    }
    const withMain = command.length > 0 || positional || o.restart !== undefined;
    const client = await cli.client();
    const info = await client.create({ ...spawnRequest(o), ...(withMain ? { main: { ...(command.length ? { command } : {}), restart: o.restart } } : {}) });
    console.log(o.json ? JSON.stringify(info, null, 2) : info.id);
  });
}

/** The hidden flag main.ts adds to `run -- CMD…` and `create -- CMD…`: the words are a command. */
export const COMMAND_ONLY = "--command-only";

/**
 * Whether a word names an image rather than a command: a reference with a tag, digest or
 * registry path (`127.0.0.1:5000/app:1` too), or an image the server has. A word that looks like
 * a reference (a `:`, `/` or `@` in it) but is none is refused with what is wrong with it.
 */
export async function namesImage(server: () => Promise<Client>, word: string): Promise<boolean> {
  if (word.startsWith("/") || word.startsWith(".") || word.startsWith("-")) return false;
  if (/[:/@]/.test(word)) {
    try {
      parseImageReference(word);
      return true;
    } catch (e) {
      throw new InvalidArgumentError(`"${word}" is not an image reference (${(e as Error).message.replace(/^image: /, "")}); to run it as a command, put -- before it`);
    }
  }
  const names = await server()
    .then((c) => c.images.list())
    .then((list) => list.map((i) => i.name))
    .catch(() => [] as string[]);
  return names.some((n) => n === word || n === `${word}:latest` || n.endsWith(`/${word}:latest`));
}

/** The image's own command as a throwaway sandbox's main process, its output followed; resolves with its exit code. */
async function runImageCommand(client: Client, command: string[], o: Record<string, any>): Promise<number> {
  const sb = await withSpawnProgress(client, () => client.spawn({ ...spawnRequest(o), ttl: o.ttl ?? "1h", main: { ...(command.length ? { command } : {}), restart: "no" } }));
  let interrupted = false;
  const onSigint = () => {
    interrupted = true;
    void client.kill(sb.id, "SIGTERM").catch(ignore("the process may have exited"));
  };
  process.on("SIGINT", onSigint);
  try {
    for await (const l of client.followMainLogs(sb.id)) (l.stream === "stderr" ? process.stderr : process.stdout).write(`${l.line}\n`);
    const info = await client.info(sb.id);
    if (o.keep) console.error(`forgevm: kept sandbox ${sb.id}`);
    return info.main?.exit_code ?? (interrupted ? 130 : 1);
  } finally {
    process.off("SIGINT", onSigint);
    if (!o.keep) await sb.destroy().catch(ignore("the sandbox may be gone already"));
  }
}

async function runOnServer(cli: Cli, client: Client, command: string[], o: Record<string, any>): Promise<number> {
  const sb = await withSpawnProgress(client, () => client.spawn({ ...spawnRequest(o), ttl: "1h" }));
  const stop = () => void sb.destroy().finally(() => cli.exit(130));
  process.once("SIGINT", stop);
  try {
    return await runIn(client, sb.id, command, o);
  } finally {
    process.off("SIGINT", stop);
    await sb.destroy().catch(ignore("the sandbox may be gone already"));
  }
}
