// One direction of dependency: interfaces (api, cli) → core → providers → agent-client. Every
// interface goes through core's operations; core never knows an interface; nothing below core
// knows core. This test reads every import in src/ and fails on one that points the wrong way.
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { it } from "node:test";

const src = join(fileURLToPath(new URL("../..", import.meta.url)), "src");

/** Top-level folders of src/ a folder may not import from. */
const FORBIDDEN: Record<string, string[]> = {
  api: ["store", "providers", "agent-client", "net", "images", "setup"],
  e2b: ["store", "providers", "agent-client", "net", "images", "setup", "cli"],
  mcp: ["store", "providers", "agent-client", "net", "images", "setup", "cli", "api"],
  cli: ["store", "providers", "agent-client", "net", "images"],
  core: ["api", "cli"],
  providers: ["api", "cli", "core", "store", "net"],
  "agent-client": ["api", "cli", "core", "providers", "store", "net", "images"],
  store: ["api", "cli", "core", "providers"],
  net: ["api", "cli", "core", "providers", "store"],
  images: ["api", "cli", "core", "providers", "store"],
};

function files(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? files(join(dir, e.name)) : e.name.endsWith(".ts") ? [join(dir, e.name)] : []));
}

it("no import points against the direction api → core → providers → agent-client", () => {
  const wrong: string[] = [];
  for (const file of files(src)) {
    const layer = relative(src, file).split("/")[0];
    const forbidden = FORBIDDEN[layer] ?? [];
    for (const m of readFileSync(file, "utf8").matchAll(/^(?:import|export)[^;]*?from "(\.[^"]+)"/gm)) {
      const target = relative(src, resolve(dirname(file), m[1])).split("/")[0];
      if (forbidden.includes(target)) wrong.push(`${relative(src, file)} imports ${m[1]}`);
    }
  }
  assert.deepEqual(wrong, []);
});
