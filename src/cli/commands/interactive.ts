// People's verbs at a terminal: `shell` (a PTY shell, or any command on a PTY), `attach` (the
// main process's output as it is written, until it ends or the detach keys), `top`.
import type { Command } from "commander";
import type { Cli } from "../context.js";
import { pairOption } from "../options.js";
import { emit, table } from "../output.js";
import { interactive } from "../terminal.js";

/** A login shell: bash where the image has it, else sh. */
export const LOGIN_SHELL = { command: "/bin/sh", args: ["-c", "if command -v bash >/dev/null 2>&1; then exec bash -l; else exec sh -l; fi"] };

const DETACH = "\x10\x11"; // Ctrl-P Ctrl-Q, as Docker's

export function interactiveCommands(program: Command, cli: Cli): void {
  program
    .command("shell")
    .description("open an interactive shell in a sandbox (a PTY: prompt, Ctrl-C, window size); exits with the shell's code")
    .argument("<id>", "sandbox id or name")
    .argument("[command...]", "run this on the PTY instead of a login shell (put -- before it)")
    .option("-u, --user <user>", "user to run as")
    .option("-w, --workdir <dir>", "working directory in the guest")
    .option("-e, --env <NAME=VALUE>", "environment variable (repeatable)", pairOption("--env"))
    .action(async (id: string, command: string[], o: { user?: string; workdir?: string; env?: Record<string, string> }) => {
      const { url, apiKey } = await cli.endpoint();
      const what = command.length ? { command: command[0], args: command.slice(1) } : LOGIN_SHELL;
      process.exitCode = await interactive(url, apiKey, id, { ...what, user: o.user, workdir: o.workdir, env: o.env });
    });

  program
    .command("attach")
    .description("follow a sandbox's main process as it writes (stdout and stderr kept apart) until it ends; Ctrl-P Ctrl-Q or Ctrl-C detaches and leaves it running")
    .argument("<id>", "sandbox id or name")
    .action(async (id: string) => {
      const client = await cli.client();
      const abort = new AbortController();
      const stdin = process.stdin;
      let keys = "";
      const onKey = (c: Buffer) => {
        keys = (keys + c.toString("latin1")).slice(-2);
        if (keys === DETACH || c.includes(3)) abort.abort();
      };
      if (stdin.isTTY) {
        stdin.setRawMode(true);
        stdin.on("data", onKey);
      }
      const onSigint = () => abort.abort();
      process.once("SIGINT", onSigint);
      try {
        for await (const l of client.followMainLogs(id, { tail: 0, signal: abort.signal })) (l.stream === "stderr" ? process.stderr : process.stdout).write(`${l.line}\n`);
      } catch (e) {
        if (!abort.signal.aborted) throw e;
      } finally {
        process.off("SIGINT", onSigint);
        if (stdin.isTTY) {
          stdin.off("data", onKey);
          stdin.setRawMode(false);
          stdin.pause();
        }
      }
      if (abort.signal.aborted) console.error(`detached from ${id}; it runs on`);
    });

  program
    .command("top")
    .description("list the processes running in a sandbox")
    .argument("<id>", "sandbox id or name")
    .option("--json", "print JSON")
    .action(async (id: string, o: { json?: boolean }) => {
      const procs = await (await cli.client()).processes(id);
      const row = (p: (typeof procs)[number]) => [String(p.pid), String(p.ppid), p.user, p.state, `${Math.round(p.rss_bytes / 1024)}K`, `${p.cpu_seconds.toFixed(2)}s`, p.command];
      emit(o.json, procs, () => table(["PID", "PPID", "USER", "S", "RSS", "CPU", "COMMAND"], procs.map(row), "no processes"));
    });
}
