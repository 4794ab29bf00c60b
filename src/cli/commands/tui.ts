// `forgevm tui`: the terminal dashboard (cli/tui/dashboard.ts), on the terminal's alternate screen
// as full-screen programs are, so quitting gives the shell its screen back. Enter opens a shell in
// the selected sandbox; when it ends, the dashboard comes back.
import type { Command } from "commander";
import type { Cli } from "../context.js";
import { interactive } from "../terminal.js";
import type { Next } from "../tui/dashboard.js";
import { LOGIN_SHELL } from "../../util/login-shell.js";

export function tuiCommands(program: Command, cli: Cli): void {
  program
    .command("tui")
    .description("a live dashboard in the terminal: sandboxes with CPU and memory, events; keys to spawn, open a shell, view logs, fork, destroy")
    .action(async () => {
      if (!process.stdin.isTTY || !process.stdout.isTTY) throw new Error("forgevm tui needs a terminal (use forgevm stats or forgevm ps in scripts)");
      const leave = () => process.stdout.write("\x1b[?1049l");
      process.stdout.write("\x1b[?1049h");
      process.once("exit", leave);
      try {
        await dashboard(cli);
      } finally {
        process.off("exit", leave);
        leave();
      }
    });
}

/** The dashboard, and the shells it opens, until it is quit. */
async function dashboard(cli: Cli): Promise<void> {
  // ink draws only its last frame when it believes it runs in CI (a CI or CONTINUOUS_INTEGRATION
  // variable, read when ink is loaded); the command has checked it has a terminal, so it clears
  // them and loads ink afterwards.
  delete process.env.CI;
  delete process.env.CONTINUOUS_INTEGRATION;
  const [{ render }, { Dashboard }, { createElement: h }] = await Promise.all([import("ink"), import("../tui/dashboard.js"), import("react")]);
  const client = await cli.client();
  const { url, apiKey } = await cli.endpoint();
  let last: string | undefined;
  for (;;) {
    let next: Next = null;
    const app = render(h(Dashboard, { client, url, initialSelection: last, done: (n: Next) => (next = n) }), { exitOnCtrlC: false });
    await app.waitUntilExit();
    const chosen = next as Next;
    if (!chosen) return;
    last = chosen.shell;
    console.log(`shell in ${chosen.shell} (exit returns to the dashboard)`);
    await interactive(url, apiKey, chosen.shell, LOGIN_SHELL).catch((e: Error) => console.error(e.message));
    // The shell's screen goes: the dashboard is drawn again on a clear one.
    process.stdout.write("\x1b[2J\x1b[3J\x1b[H");
  }
}
