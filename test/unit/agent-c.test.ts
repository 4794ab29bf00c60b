// The agent's own C tests (JSON reader fuzzed under ASan/UBSan), run as part of the suite, and
// the shape of its sources: no two files call each other round a loop, and the event loop
// (main.c) sits on top, called by nothing.
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { it } from "node:test";
import { run } from "../../src/util/process.js";
import { circles, type Graph } from "../dependency-graph.js";

const agentDir = fileURLToPath(new URL("../../../agent/", import.meta.url));

it("agent C tests pass under AddressSanitizer", async () => {
  const { stdout } = await run("make", ["-s", "-C", agentDir, "test"]);
  assert.match(stdout, /200000 fuzzed inputs ok/);
});

/** Which .c file uses which: by the functions and variables each defines without `static`. */
function agentGraph(): Graph {
  const dir = join(agentDir, "src");
  const text = new Map<string, string>();
  for (const f of readdirSync(dir).filter((n) => n.endsWith(".c"))) {
    text.set(
      f,
      readFileSync(join(dir, f), "utf8")
        .replace(/\/\*[\s\S]*?\*\//g, "")
        .replace(/"(?:[^"\\\n]|\\.)*"/g, '""'),
    );
  }
  const definedIn = new Map<string, string>();
  for (const [f, src] of text) {
    for (const m of src.matchAll(/^(?!static\b)[A-Za-z_][\w *]*?\b(\w+)\([^;{]*\)\s*\{/gm)) definedIn.set(m[1], f);
    for (const m of src.matchAll(/^(?!static\b|extern\b|typedef\b|#)[A-Za-z_][\w *]*?\b(\w+)\s*(?:=[^;(]*)?;/gm)) definedIn.set(m[1], f);
  }
  const g: Graph = new Map();
  for (const [f, src] of text) {
    const uses = new Set<string>();
    for (const m of src.matchAll(/\b[A-Za-z_]\w*\b/g)) {
      const owner = definedIn.get(m[0]);
      if (owner && owner !== f) uses.add(owner);
    }
    g.set(f, uses);
  }
  return g;
}

it("the agent's C files call each other in no loop, and nothing calls into the event loop", () => {
  const g = agentGraph();
  assert.ok((g.get("dispatch.c")?.size ?? 0) > 3, "the graph was read (dispatch.c calls the operations)");
  assert.deepEqual(circles(g), []);
  const callers = [...g].filter(([, uses]) => uses.has("main.c")).map(([f]) => f);
  assert.deepEqual(callers, []);
});
