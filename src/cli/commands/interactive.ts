// People's verbs at a terminal: `shell` (a PTY shell, or any command on a PTY), `attach` (the
// main process's output as it is written, until it ends or the detach keys), `console` (the
// serial console, followed), `top`.
import type { Command } from "commander";
import type { Cli } from "../context.js";
import { intOption, pairOption } from "../options.js";
import { emit, table } from "../output.js";
import { interactive } from "../terminal.js";
import { LOGIN_SHELL } from "../../util/login-shell.js";

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
      const detach = detachKeys();
      try {
        for await (const l of client.followMainLogs(id, { tail: 0, signal: detach.signal })) (l.stream === "stderr" ? process.stderr : process.stdout).write(`${l.line}\n`);
      } catch (e) {
        if (!detach.signal.aborted) throw e;
      } finally {
        detach.release();
      }
      if (detach.signal.aborted) console.error(`detached from ${id}; it runs on`);
    });

  program
    .command("console")
    .description("follow a sandbox's serial console (the kernel's and the agent's messages) until it stops; Ctrl-P Ctrl-Q or Ctrl-C detaches")
    .argument("<id>", "sandbox id or name")
    .option("-n, --lines <n>", "how many past lines to show first", intOption("--lines", 0, 10_000), 20)
    .action(async (id: string, o: { lines: number }) => {
      const client = await cli.client();
      const detach = detachKeys();
      try {
        // The console is a file the server keeps (bounded): poll it and print what is new.
        const first = await client.logs(id, 10_000);
        for (const l of first.slice(first.length - Math.min(o.lines, first.length))) console.log(l);
        let printed = first.length;
        while (!detach.signal.aborted) {
          await new Promise((r) => setTimeout(r, 500));
          const info = await client.info(id);
          const lines = await client.logs(id, 10_000);
          if (lines.length < printed) printed = 0; // the kept log was cut at its cap: start over from what is there
          for (const l of lines.slice(printed)) console.log(l);
          printed = lines.length;
          if (info.state !== "running" && info.state !== "creating") return console.error(`${id} is ${info.state}`);
        }
        console.error(`detached from ${id}'s console`);
      } finally {
        detach.release();
      }
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

/** Ctrl-P Ctrl-Q (on a terminal) or Ctrl-C aborts `signal`; `release` gives the terminal back. */
function detachKeys(): { signal: AbortSignal; release: () => void } {
  const abort = new AbortController();
  const stdin = process.stdin;
  let keys = "";
  const onKey = (c: Buffer) => {
    keys = (keys + c.toString("latin1")).slice(-2);
    if (keys === DETACH || c.includes(3)) abort.abort();
  };
  const onSigint = () => abort.abort();
  if (stdin.isTTY) {
    stdin.setRawMode(true);
    stdin.on("data", onKey);
  }
  process.once("SIGINT", onSigint);
  return {
    signal: abort.signal,
    release: () => {
      process.off("SIGINT", onSigint);
      if (stdin.isTTY) {
        stdin.off("data", onKey);
        stdin.setRawMode(false);
        stdin.pause();
      }
    },
  };
}
