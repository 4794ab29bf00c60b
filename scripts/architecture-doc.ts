// The parts of docs/architecture.md that the code can say for itself: which folders of src/ import
// which (read from the imports), which states each operation starts from (core's table), and every
// table of the two databases with its columns (the server's SQLite store from its migrations, the
// cluster's PostgreSQL catalogue from its own). `npm run docs` rewrites them between their
// markers; test/unit/layers.test.ts fails when the committed document is not what this writes.
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { ALLOWED } from "../src/core/sandboxes/states.js";
import { CATALOGUE_MIGRATIONS } from "../src/store/catalogue.js";
import { openDb } from "../src/store/db.js";
import { importsOf, sourceFiles } from "../test/dependency-graph.js";

const repo = fileURLToPath(new URL("../../", import.meta.url));
export const ARCHITECTURE_FILE = join(repo, "docs", "architecture.md");
const src = join(repo, "src");

/** What each table of the server's store holds (a table missing here fails the docs). */
const STORE_TABLES: Record<string, string> = {
  sandboxes: "every sandbox, live and past (history kept `store.history_retention`): its spec, state, VM, network, main process",
  events: "the event log `GET /events` streams and replays (trimmed with the same retention)",
  templates: "named spawn settings with setup commands and warm pools",
  snapshots: "snapshots of every kind (sandbox, fork, base, pause) and where their files are",
  audit: "calls agents made through MCP, their arguments redacted",
  secrets: "secrets the egress proxy adds to requests by egress rule: name, metadata, version and the value sealed under the server's key (never shown)",
  volumes: "named volumes: size, labels",
  metric_samples: "sampled metrics of the host and each sandbox, full resolution then minute averages",
  env_specs: "Environments: a base image plus packages",
  env_builds: "Environments: builds of a spec into an image, with their steps and log",
  env_artifacts: "Environments: where a build's image went (the local store, a registry)",
  registry_connections: "Environments: registry logins builds push with, secrets sealed",
};

/** What each table of the cluster's catalogue holds. */
const CATALOGUE_TABLES: Record<string, string> = {
  nodes: "the nodes: address, capacity and load, last heartbeat",
  placements: "which node each sandbox lives on",
  events: "every node's events in one order",
  templates: "the cluster's templates, mirrored by every node",
  api_keys: "the cluster's API keys, by their SHA-256 only",
  reservations: "room held by creates a front placed and a node does not count yet",
  idempotency_keys: "which node a create's idempotency key went to",
};

const section = (name: string, body: string) => `<!-- ${name}:start -->\n${body}\n<!-- ${name}:end -->`;

/** Which top-level folders of src/ the files of each import, read from the code. */
export function importTable(): string {
  const uses = new Map<string, Set<string>>();
  for (const file of sourceFiles(src)) {
    const rel = relative(src, file);
    const from = rel.includes("/") ? `${rel.split("/")[0]}/` : rel;
    const set = uses.get(from) ?? new Set<string>();
    uses.set(from, set);
    for (const target of importsOf(src, file)) {
      const to = target.includes("/") ? `${target.split("/")[0]}/` : target;
      if (to !== from) set.add(to);
    }
  }
  const rows = [...uses.entries()]
    .sort(([a], [b]) => a.localeCompare(b))
    .map(
      ([from, to]) =>
        `| \`${from}\` | ${
          [...to]
            .sort()
            .map((t) => `\`${t}\``)
            .join(", ") || "—"
        } |`,
    );
  return section("imports", ["| folder of `src/` | imports from |", "|---|---|", ...rows].join("\n"));
}

/** The states each operation may start from, as core's one table holds them. */
export function statesTable(): string {
  const rows = Object.entries(ALLOWED).map(([op, states]) => `| ${op} | ${states.map((s) => `\`${s}\``).join(", ")} |`);
  return section("states", ["| operation | a sandbox may be in |", "|---|---|", ...rows].join("\n"));
}

/** The server store's tables and columns, from a database made by its migrations. */
function storeTables(): { name: string; columns: string[] }[] {
  const db = openDb(":memory:");
  try {
    const names = (db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY rowid").all() as { name: string }[]).map((r) => r.name);
    return names.map((name) => ({ name, columns: (db.prepare(`PRAGMA table_info(${name})`).all() as { name: string }[]).map((c) => c.name) }));
  } finally {
    db.close();
  }
}

/** The catalogue's tables and columns, read from its migrations (PostgreSQL's syntax; no server needed). */
function catalogueTables(): { name: string; columns: string[] }[] {
  const tables = new Map<string, string[]>();
  const sql = CATALOGUE_MIGRATIONS.join("\n");
  for (const m of sql.matchAll(/CREATE TABLE (\w+) \(([\s\S]*?)\n\s*\);/g)) {
    const columns = m[2]
      .split("\n")
      .map((l) => l.trim().split(/\s+/)[0])
      .filter((w) => w && !/^(UNIQUE|PRIMARY|FOREIGN|CHECK|CONSTRAINT)$/i.test(w));
    tables.set(m[1], columns);
  }
  for (const m of sql.matchAll(/ALTER TABLE (\w+) ADD COLUMN (\w+)/g)) tables.get(m[1])?.push(m[2]);
  return [...tables.entries()].map(([name, columns]) => ({ name, columns }));
}

function tableRows(tables: { name: string; columns: string[] }[], what: Record<string, string>, where: string): string[] {
  return tables.map((t) => {
    const d = what[t.name];
    if (!d) throw new Error(`the ${where} table ${t.name} has no description in scripts/architecture-doc.ts`);
    return `| \`${t.name}\` | ${d} | ${t.columns.map((c) => `\`${c}\``).join(", ")} |`;
  });
}

/** Every table of the server's store (`forgevm.db`) and of the cluster's catalogue. */
export function databaseTables(): string {
  return section(
    "tables",
    [
      "| `forgevm.db` (SQLite) | what | columns |",
      "|---|---|---|",
      ...tableRows(storeTables(), STORE_TABLES, "store"),
      "",
      "| cluster catalogue (PostgreSQL) | what | columns |",
      "|---|---|---|",
      ...tableRows(catalogueTables(), CATALOGUE_TABLES, "catalogue"),
    ].join("\n"),
  );
}

/** docs/architecture.md with each generated section replaced by the current one. */
export function architectureDoc(current: string): string {
  let out = current;
  for (const [name, body] of [
    ["imports", importTable()],
    ["states", statesTable()],
    ["tables", databaseTables()],
  ]) {
    const start = `<!-- ${name}:start -->`;
    const end = `<!-- ${name}:end -->`;
    const a = out.indexOf(start);
    const b = out.indexOf(end);
    if (a < 0 || b < 0) throw new Error(`${ARCHITECTURE_FILE} has no ${start} … ${end} section`);
    out = out.slice(0, a) + body + out.slice(b + end.length);
  }
  return out;
}
