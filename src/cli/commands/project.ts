// A project's sandboxes, as docker compose runs a compose file's services: `forgevm up` and
// `forgevm down` over forgevm.toml (docs/projects.md); `forgevm ps` in the project's directory
// lists only them (sandboxes.ts).
import type { Command } from "commander";
import type { Cli } from "../context.js";
import type { Project } from "../project/file.js";
import { findProjectFile, PROJECT_FILE } from "../project/find.js";

/** The project of -f FILE, else of the nearest forgevm.toml here or above. */
async function projectOf(file?: string): Promise<Project> {
  const found = file ?? findProjectFile();
  if (!found) throw new Error(`no ${PROJECT_FILE} here or in a directory above: write one (docs/projects.md), or name it with -f FILE`);
  return (await import("../project/file.js")).readProject(found);
}

// Loaded when a project command runs, as the file's reader is.
const apply = () => import("../project/apply.js");

export function projectCommands(program: Command, cli: Cli): void {
  program
    .command("up")
    .description(
      `build what needs building and create or start what is missing, as ${PROJECT_FILE} describes; a second up changes nothing, a changed file recreates only what changed`,
    )
    .option("-f, --file <file>", `the project file (default: ${PROJECT_FILE} here or above)`)
    .action(async (o: { file?: string }) => {
      const p = await projectOf(o.file);
      await (await apply()).up(await cli.client(), p, (l) => console.log(l));
    });

  program
    .command("down")
    .description(`stop the sandboxes of ${PROJECT_FILE}; --rm removes them (their named volumes too with --volumes)`)
    .option("-f, --file <file>", `the project file (default: ${PROJECT_FILE} here or above)`)
    .option("--rm", "remove the sandboxes rather than stop them")
    .option("--volumes", "with --rm: remove the named volumes the file mounts too")
    .action(async (o: { file?: string; rm?: boolean; volumes?: boolean }) => {
      if (o.volumes && !o.rm) throw new Error("--volumes removes volumes along with the sandboxes: give --rm too");
      await (await apply()).down(await cli.client(), await projectOf(o.file), { remove: o.rm, volumes: o.volumes }, (l) => console.log(l));
    });
}
