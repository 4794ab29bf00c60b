// The command of an interactive shell in a guest, the same from `forgevm shell`, `forgevm tui`
// and the web console's terminal.

/** A login shell: bash where the image has it, else sh. */
export const LOGIN_SHELL = { command: "/bin/sh", args: ["-c", "if command -v bash >/dev/null 2>&1; then exec bash -l; else exec sh -l; fi"] };
