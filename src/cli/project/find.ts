// Where a project file is, found without loading what reads it (a TOML parser and the schema
// validator cost more than the rest of a command's start).
import { existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";

export const PROJECT_FILE = "forgevm.toml";

/** The project file in `dir` or the nearest directory above it; null when there is none. */
export function findProjectFile(dir = process.cwd()): string | null {
  for (let d = resolve(dir); ; d = dirname(d)) {
    if (existsSync(join(d, PROJECT_FILE))) return join(d, PROJECT_FILE);
    if (dirname(d) === d) return null;
  }
}
