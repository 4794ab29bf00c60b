// One direction of dependency: the composition root (compose) → the server and its interfaces (interfaces/: rest, e2b,
// daytona, custom-http, mcp, console; the cli and the cluster front beside them) → core → providers → agent-client,
// with the shared schemas, the error table and HTTP error bodies (schemas, http), config and
// util on the ground floor. Every interface goes through core's operations; core never knows an
// interface; nothing below core knows core. This test reads every import in src/ (static,
// `export … from`, dynamic and type imports) and fails on one that a folder's row does not allow,
// on a folder of src/ that has no row, and on an import circle between files (beyond the ones
// still being broken, listed below).
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { it } from "node:test";
import { ARCHITECTURE_FILE, architectureDoc } from "../../scripts/architecture-doc.js";
import { MODULES_FILE, modulesDoc } from "../../scripts/modules-doc.js";
import { TESTING_FILE, testingDoc } from "../../scripts/testing-doc.js";
import { APART, FILE_SECONDS, HOST_STATE, TIERS } from "../../scripts/test-tiers.js";
import { circles, importsOf, sourceFiles, type Graph } from "../dependency-graph.js";
import { openDb } from "../../src/store/db.js";

const src = join(fileURLToPath(new URL("../../..", import.meta.url)), "src");

const GROUND = ["util", "http", "schemas", "config", "fuse"];

/** Each top-level folder of src/ and the folders it may import from (besides itself). */
const ALLOWED: Record<string, string[]> = {
  util: [],
  http: [],
  fuse: ["util"],
  schemas: ["http"],
  config: ["schemas", "http", "util"],
  store: GROUND,
  "agent-client": ["util", "http"],
  images: GROUND,
  net: [...GROUND, "agent-client"],
  providers: [...GROUND, "agent-client", "images"],
  core: [...GROUND, "providers", "agent-client", "store", "net", "images"],
  server: [...GROUND, "core"],
  interfaces: [...GROUND, "core", "server"],
  front: [...GROUND, "core", "interfaces"],
  compose: [...GROUND, "core", "server", "interfaces", "front", "setup"],
  cli: [...GROUND, "core", "compose", "interfaces", "setup"],
  setup: [...GROUND, "images"],
};
/** Files directly in src/: the library's entry point. */
const ROOT_FILES: Record<string, string[]> = {
  "index.ts": [...GROUND, "core", "providers", "agent-client", "images", "store"],
};

const files = sourceFiles;
const imports = (file: string) => importsOf(src, file);

it("no import points against the direction of the layers, and every folder of src/ has a row", () => {
  const top = readdirSync(src, { withFileTypes: true });
  const unknown = top.filter((e) => (e.isDirectory() ? !(e.name in ALLOWED) : !(e.name in ROOT_FILES))).map((e) => e.name);
  assert.deepEqual(unknown, [], "a new folder (or file) in src/ needs a row in this test saying what it may import");
  const wrong: string[] = [];
  let seen = 0;
  for (const file of files(src)) {
    const rel = relative(src, file);
    const layer = rel.includes("/") ? rel.split("/")[0] : rel;
    const allowed = (rel.includes("/") ? ALLOWED[layer] : ROOT_FILES[layer]) ?? [];
    for (const target of imports(file)) {
      seen++;
      const to = target.split("/")[0];
      if (to !== layer && !allowed.includes(to)) wrong.push(`${rel} imports ${target}`);
    }
  }
  assert.ok(seen > 500, `the imports were read (${seen})`);
  assert.deepEqual(wrong, []);
});

it("interfaces are peers: no folder of interfaces/ imports another, and server/ names none of them", () => {
  const crossing: string[] = [];
  for (const file of files(join(src, "interfaces"))) {
    const own = relative(src, file).split("/")[1];
    for (const target of imports(file)) {
      const [top, peer] = target.split("/");
      if (top === "interfaces" && peer !== own) crossing.push(`${relative(src, file)} imports ${target}`);
    }
  }
  assert.deepEqual(crossing, []);
  const peers = readdirSync(join(src, "interfaces"), { withFileTypes: true })
    .filter((e) => e.isDirectory())
    .map((e) => e.name);
  assert.ok(peers.length >= 6, `the interfaces were found (${peers.join(", ")})`);
  const naming: string[] = [];
  for (const file of files(join(src, "server"))) {
    // Comments may say what an interface is; code may not name one.
    const code = readFileSync(file, "utf8").replace(/\/\/.*$|\/\*[\s\S]*?\*\/|^import .*$/gm, "");
    for (const p of peers) if (new RegExp(`\\b${p}\\b`, "i").test(code)) naming.push(`${relative(src, file)} names ${p}`);
  }
  assert.deepEqual(naming, []);
});

it("the bounds of a sandbox's memory are written once (schemas/bounds.ts MEMORY_MB), and every interface, the CLI and the providers' spec check use them", () => {
  const written: string[] = [];
  for (const file of files(src)) {
    const rel = relative(src, file);
    if (rel === "schemas/bounds.ts") continue;
    readFileSync(file, "utf8")
      .split("\n")
      .forEach((line, i) => {
        if (/\b65536\b|\b65_536\b/.test(line) && /mem/i.test(line)) written.push(`${rel}:${i + 1}`);
        if (/intOption\("--(max-)?memory", \d/.test(line)) written.push(`${rel}:${i + 1}`);
      });
  }
  assert.deepEqual(written, []);
  const spec = readFileSync(join(src, "providers", "spec.ts"), "utf8");
  assert.match(spec, /MEMORY_MB\.minimum/, "the providers' spec check takes the same bounds");
});

it("the CLI starts without a schema library: nothing it imports at start loads TypeBox (~190 ms of every call)", () => {
  const seen = new Set<string>();
  const loading: string[] = [];
  const walk = (rel: string) => {
    if (seen.has(rel)) return;
    seen.add(rel);
    const text = readFileSync(join(src, rel), "utf8");
    if (/^import (?!type\b)[^;]*from "typebox/m.test(text)) loading.push(rel);
    // Only static imports load at start: a command may import what it needs when it runs.
    const statics = [...text.matchAll(/^(?:import|export) (?!type\b)[^;]*?from "(\.[^"]+)"/gm)].map((m) => m[1]);
    for (const s of statics) walk(relative(src, resolve(dirname(join(src, rel)), s)).replace(/\.js$/, ".ts"));
  };
  walk("cli/main.ts");
  assert.ok(seen.size > 30, `the CLI's imports were read (${seen.size})`);
  assert.deepEqual(loading, []);
});

it("the store's cached statements are safe to share: no store iterates one or changes its mode, and one SQL is compiled once", () => {
  const changing: string[] = [];
  for (const file of files(join(src, "store"))) {
    readFileSync(file, "utf8")
      .split("\n")
      .forEach((line, i) => {
        if (/\.(iterate|pluck|raw|expand|safeIntegers)\(/.test(line)) changing.push(`${relative(src, file)}:${i + 1}`);
      });
  }
  assert.deepEqual(changing, []);
  const db = openDb(":memory:");
  const q = "SELECT count(*) AS n FROM sandboxes";
  assert.equal(db.prepare(q), db.prepare(q));
  db.exec("ALTER TABLE sandboxes ADD COLUMN later TEXT");
  assert.equal((db.prepare(q).get() as { n: number }).n, 0, "a cached statement runs after the schema changed");
  db.close();
});

it("no two sub-folders of core/ depend on each other both ways (its root files are the composition and the shared types)", () => {
  const edges = new Set<string>();
  for (const file of files(join(src, "core"))) {
    const from = relative(src, file).split("/");
    if (from.length < 3) continue;
    for (const target of imports(file)) {
      const to = target.split("/");
      if (to[0] === "core" && to.length >= 3 && to[1] !== from[1]) edges.add(`${from[1]} → ${to[1]}`);
    }
  }
  assert.ok(edges.size > 20, `the edges were read (${edges.size})`);
  const both = [...edges].filter((e) => {
    const [a, b] = e.split(" → ");
    return a < b && edges.has(`${b} → ${a}`);
  });
  assert.deepEqual(both, []);
});

/**
 * The composition root: the only files that see the whole context (core.ts's Core). open.ts builds
 * the services, operations.ts the operations over them; every other file is given the few things
 * it uses, named in its own deps type.
 */
const COMPOSITION_ROOT = ["core/open.ts", "core/operations.ts"];

it("the whole context (core.ts's Core) is imported by the composition root and by no other file", () => {
  const importers = files(src)
    .map((f) => relative(src, f))
    .filter(
      (rel) =>
        rel !== "core/core.ts" &&
        imports(join(src, rel)).includes("core/core.ts") &&
        /\bCore\b/.test(
          readFileSync(join(src, rel), "utf8")
            .split("\n")
            .filter((l) => l.startsWith("import"))
            .join("\n"),
        ),
    );
  assert.deepEqual(importers.sort(), [...COMPOSITION_ROOT].sort(), "only the composition root takes the whole context");
  // Its run-time state has one owner, sandboxes/table.ts: the context holds no map of its own, and no flag.
  const context = readFileSync(join(src, "core", "core.ts"), "utf8");
  assert.doesNotMatch(context, /:\s*Map</);
  assert.doesNotMatch(context, /^\s*closed\b/m);
});

it("no function or constructor outside the composition root takes the whole context as a parameter", () => {
  const takes = (line: string) => /\(\s*(private readonly |readonly )?\w+: Core\b(?![\w"])/.test(line) || /^\s*(private readonly |readonly )?\w+: Core,?$/.test(line);
  // The pattern itself: a parameter, a constructor property on its own line; not a narrower type.
  assert.ok(takes("export function spawn(core: Core, opts: SpawnOptions) {"));
  assert.ok(takes("    private readonly core: Core,"));
  assert.ok(!takes("export function spawn(core: CoreDeps, opts: SpawnOptions) {"));
  const taking: string[] = [];
  for (const file of files(src)) {
    const rel = relative(src, file);
    if (COMPOSITION_ROOT.includes(rel) || rel === "core/core.ts") continue;
    readFileSync(file, "utf8")
      .split("\n")
      .forEach((line, i) => {
        if (takes(line)) taking.push(`${rel}:${i + 1}`);
      });
  }
  assert.deepEqual(taking, []);
});

it("no import circle between files of src/, type imports included", () => {
  // The finder itself, on a graph with one circle of three and a file outside it.
  const toy: Graph = new Map([
    ["a.ts", new Set(["b.ts"])],
    ["b.ts", new Set(["c.ts"])],
    ["c.ts", new Set(["a.ts", "d.ts"])],
    ["d.ts", new Set<string>()],
  ]);
  assert.deepEqual(
    circles(toy).map((c) => [...c].sort()),
    [["a.ts", "b.ts", "c.ts"]],
  );
  const g: Graph = new Map();
  for (const file of files(src)) g.set(relative(src, file), new Set(imports(file)));
  assert.ok(g.size > 250, `the files were read (${g.size})`);
  assert.deepEqual(circles(g), []);
});

/** The longest a file of core/ may be: past it, a file holds more than one job. */
const CORE_FILE_MAX_LINES = 400;

it(`no file in core/ is longer than ${CORE_FILE_MAX_LINES} lines`, () => {
  const long = files(join(src, "core"))
    .map((f) => ({ file: relative(src, f), lines: readFileSync(f, "utf8").split("\n").length - 1 }))
    .filter((f) => f.lines > CORE_FILE_MAX_LINES);
  assert.deepEqual(long, []);
});

it("docs/architecture.md's import table, states table and database tables are what the code says (npm run docs writes them)", () => {
  const text = readFileSync(ARCHITECTURE_FILE, "utf8");
  assert.equal(text, architectureDoc(text), "a generated part of docs/architecture.md has drifted: run npm run docs");
  for (const part of ["imports", "states", "tables"]) assert.match(text, new RegExp(`<!-- ${part}:start -->\\n\\|`), `the ${part} section is filled in`);
});

it("every test file lives in the folder of its tier, no name is in two, and each file that runs apart from the others says why", () => {
  const loose = readdirSync(join(src, "..", "test")).filter((f) => f.endsWith(".test.ts"));
  assert.deepEqual(loose, [], "a test file outside test/unit, test/api, test/vm or test/cluster");
  const listed = Object.values(TIERS).flat() as string[];
  assert.ok(listed.length > 70, `the tiers were read (${listed.length} files)`);
  assert.equal(new Set(listed).size, listed.length, "one name in two tiers: the runner and APART name files by name");
  assert.ok(Object.entries({ ...APART, ...HOST_STATE }).every(([f, why]) => listed.includes(f) && why.length > 10));
  assert.deepEqual(
    Object.keys(APART).filter((f) => f in HOST_STATE),
    [],
    "a file both is kept apart and shares the host-state phase",
  );
  assert.deepEqual(
    Object.keys(FILE_SECONDS).filter((f) => !listed.includes(f) || f in APART || TIERS.unit.includes(f)),
    [],
    "FILE_SECONDS names a file that is gone, is kept apart or is in the unit tier",
  );
});

it("docs/testing.md's tier table is what scripts/test-tiers.ts says (npm run docs writes it)", () => {
  const text = readFileSync(TESTING_FILE, "utf8");
  assert.equal(text, testingDoc(text), "docs/testing.md's tier table has drifted: run npm run docs");
  assert.match(text, /<!-- tiers:start -->\n\| tier \|/);
});

it("every error dropped in src/ says why (ignore(reason)), none silently", () => {
  const silent: string[] = [];
  for (const file of files(src)) {
    const text = readFileSync(file, "utf8");
    for (const m of text.matchAll(/\.catch\(\s*\(\s*\w*\s*\)\s*=>\s*\{\s*\}\s*\)|\bignore\(\s*""\s*\)/g)) {
      silent.push(`${relative(src, file)}:${text.slice(0, m.index).split("\n").length}`);
    }
  }
  assert.deepEqual(silent, []);
});

it("ownership (the X-User-ID header) is read in one place, interfaces/rest/owner.ts", () => {
  const readers = files(src)
    .filter((f) => /headers\[\s*["']x-user-id["']\s*\]/i.test(readFileSync(f, "utf8")))
    .map((f) => relative(src, f));
  assert.deepEqual(readers, ["interfaces/rest/owner.ts"]);
});

it("docs/modules.md lists every file of src/ with the first sentence of its opening comment (npm run docs writes it)", () => {
  const text = readFileSync(MODULES_FILE, "utf8");
  assert.equal(text, modulesDoc(), "docs/modules.md has drifted: run npm run docs");
  assert.doesNotMatch(text, /\| — \|/, "every file of src/ opens with a comment that says what it is");
});

it("docs/architecture.md's diagram draws every folder of src/ and every interface", () => {
  const doc = readFileSync(join(src, "..", "docs", "architecture.md"), "utf8");
  const diagram = /## Layers\n\n```\n([\s\S]*?)\n```/.exec(doc)?.[1] ?? "";
  const folders = (dir: string) =>
    readdirSync(dir, { withFileTypes: true })
      .filter((e) => e.isDirectory())
      .map((e) => e.name);
  const drawn = (name: string) => new RegExp(`(^|[\\s(])${name}/`, "m").test(diagram);
  const missing = [...folders(src), ...folders(join(src, "interfaces"))].filter((f) => !drawn(f));
  assert.ok(diagram.length > 1000, "the diagram was found");
  assert.deepEqual(missing, [], "a folder the diagram does not draw");
});

it("every file docs/architecture.md names exists", () => {
  const repo = join(src, "..");
  const tracked: string[] = [];
  const walk = (dir: string) => {
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      if (e.name.startsWith(".") || e.name === "node_modules" || e.name === "dist") continue;
      if (e.isDirectory()) walk(join(dir, e.name));
      else tracked.push(relative(repo, join(dir, e.name)));
    }
  };
  walk(repo);
  const doc = readFileSync(join(repo, "docs", "architecture.md"), "utf8");
  // A name may be given from any folder down (`launch.ts` in a row about providers/qemu/).
  const named = [...new Set([...doc.matchAll(/`([\w.\-/]+\.(?:ts|tsx|c|h|py|md|sh|js|mjs))`/g)].map((m) => m[1]))];
  assert.ok(named.length > 100, `names were read (${named.length})`);
  const missing = named.filter((n) => !tracked.some((f) => f === n || f.endsWith(`/${n}`)));
  assert.deepEqual(missing, []);
});
