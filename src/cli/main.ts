// The `forgevm` command line. Commands that talk to a server use the TypeScript SDK (see
// context.ts for which server); each group of commands is a file in commands/.
import { Command } from "commander";
import { ForgevmError } from "forgevm";
import { ForgevmError as CoreError } from "../http/errors.js";
import { Cli } from "./context.js";
import { ignore } from "../util/ignore.js";
import { copyCommands } from "./commands/copies.js";
import { cpCommand } from "./commands/cp.js";
import { interactiveCommands } from "./commands/interactive.js";
import { COMMAND_ONLY, execCommands } from "./commands/exec.js";
import { codeCommands } from "./commands/code.js";
import { imageCommands } from "./commands/images.js";
import { imageOutCommands } from "./commands/image-out.js";
import { statsCommands } from "./commands/stats.js";
import { tuiCommands } from "./commands/tui.js";
import { volumeCommands } from "./commands/volumes.js";
import { secretCommands } from "./commands/secrets.js";
import { clusterCommands } from "./commands/cluster.js";
import { environmentCommands } from "./commands/environments.js";
import { buildCommands } from "./commands/build.js";
import { mcpCommands } from "./commands/mcp.js";
import { sshCommands } from "./commands/ssh.js";
import { balloonCommands } from "./commands/balloon.js";
import { desktopCommands } from "./commands/desktop.js";
import { projectCommands } from "./commands/project.js";
import { statusCommands } from "./commands/status.js";
import { upgradeCommands } from "./commands/upgrade.js";
import { PACKAGE } from "../setup/install.js";
import { networkCommands } from "./commands/network.js";
import { sandboxCommands } from "./commands/sandboxes.js";
import { serverCommands } from "./commands/server.js";
import { serviceCommands } from "./commands/service.js";
import { templateCommands } from "./commands/templates.js";

const pkg = PACKAGE;

const program = new Command("forgevm")
  .description("Disposable, isolated microVMs for AI agents and people")
  .version(pkg.version, "-V, --version")
  .option("--server <url>", "ForgeVM server URL (env FORGEVM_URL; default: the server of the data directory, else http://127.0.0.1:7423)")
  .option("--api-key <key>", "API key (env FORGEVM_API_KEY)", process.env.FORGEVM_API_KEY)
  .option("--data-dir <dir>", "data directory (default: $FORGEVM_DATA_DIR or ~/.local/share/forgevm)")
  .option("--config <file>", "config file (default: ./forgevm.yaml, then ~/.forgevm/config.yaml)");

const cli = new Cli(program, pkg.version);
sandboxCommands(program, cli);
execCommands(program, cli);
codeCommands(program, cli);
copyCommands(program, cli);
cpCommand(program, cli);
interactiveCommands(program, cli);
networkCommands(program, cli);
templateCommands(program, cli);
imageCommands(program, cli);
imageOutCommands(program, cli);
volumeCommands(program, cli);
secretCommands(program, cli);
statsCommands(program, cli);
tuiCommands(program, cli);
buildCommands(program, cli);
environmentCommands(program, cli);
serverCommands(program, cli, pkg.version);
clusterCommands(program, cli);
serviceCommands(program, cli);
mcpCommands(program, cli);
sshCommands(program, cli);
balloonCommands(program, cli);
desktopCommands(program, cli);
projectCommands(program, cli);
statusCommands(program, cli, pkg.version);
upgradeCommands(program);

// Docker's `-it` (interactive, terminal) is one flag of `run` here, where -i names the image.
function dockerTty(argv: string[]): string[] {
  const end = argv.indexOf("--") < 0 ? argv.length : argv.indexOf("--");
  if (!argv.slice(2, end).includes("run")) return argv;
  return argv.map((a, i) => (i < end && (a === "-it" || a === "-ti") ? "--tty" : a));
}

// As Docker's: in `run IMAGE CMD…` and `create IMAGE CMD…` everything after the first word that
// is not an option belongs to the command (`run alpine sh -c …`: -c is sh's, not ours); so does
// everything after a `--` the user typed there (`run IMAGE -- CMD…`). A `--` before any word
// (`run -- CMD…`) says the words are a command, whatever they look like: --command-only tells
// the action so, since the parser keeps no trace of where the `--` was.
function commandAfterImage(argv: string[]): string[] {
  let verb = 2;
  while (verb < argv.length && argv[verb].startsWith("-")) {
    const opt = program.options.find((o) => o.short === argv[verb] || o.long === argv[verb]);
    verb += opt && (opt.required || opt.optional) ? 2 : 1;
  }
  const cmd = program.commands.find((c) => c.name() === argv[verb]);
  if (!cmd || !["run", "create"].includes(cmd.name())) return argv;
  for (let i = verb + 1; i < argv.length; i++) {
    const a = argv[i];
    if (a === "--") return [...argv.slice(0, i), COMMAND_ONLY, ...argv.slice(i)];
    if (a.startsWith("-")) {
      const opt = cmd.options.find((o) => o.short === a || o.long === a);
      if (opt && (opt.required || opt.optional)) i++;
      continue;
    }
    if (argv[i + 1] === "--" || i + 1 >= argv.length) return argv;
    return [...argv.slice(0, i + 1), "--", ...argv.slice(i + 1)];
  }
  return argv;
}

/** What a failed local file operation says to the user, by its errno code. */
const LOCAL_FILE_ERRORS: Record<string, string> = {
  ENOENT: "no such file or directory",
  EACCES: "permission denied",
  EPERM: "permission denied",
  EISDIR: "is a directory",
  ENOTDIR: "a part of the path is not a directory",
  ENOSPC: "no space left on the device",
  EROFS: "read-only file system",
};

program
  .parseAsync(commandAfterImage(dockerTty(process.argv)))
  // A server the command started for itself stops with it (its sandboxes end).
  .then(() => cli.close())
  .catch(async (e: Error) => {
    await cli.close().catch(ignore("the command's error is the one to report"));
    // Loaded only when it is needed: it knows every layer's errors.
    const { toForgevmError } = await import("../core/error-map.js");
    // One way to say what went wrong, whichever side found it: the message, and the code.
    // A local file the command could not use is the user's to fix (no code), as is a plain Error
    // the CLI throws about its own arguments; anything else is mapped to its code.
    const sys = e as NodeJS.ErrnoException;
    if (sys.syscall && typeof sys.path === "string" && LOCAL_FILE_ERRORS[sys.code ?? ""]) {
      console.error(`forgevm: ${sys.path}: ${LOCAL_FILE_ERRORS[sys.code!]}`);
      process.exit(1);
    }
    const own = e.constructor === Error && !sys.code;
    const err =
      e instanceof ForgevmError || e instanceof CoreError
        ? e
        : e.name === "ConfigError" || e.name === "InvalidArgumentError" || e.name === "ProjectFileError" || own
          ? e
          : toForgevmError(e);
    const code = err instanceof ForgevmError || err instanceof CoreError ? err.code : "";
    console.error(`forgevm: ${err.message}${code && code !== "CONNECTION_ERROR" && !err.message.includes(code) ? ` (${code})` : ""}`);
    process.exit(1);
  });
