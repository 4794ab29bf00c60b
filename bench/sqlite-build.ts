// Benchmark of the optimization level SQLite is compiled at by ./setup.sh; prints one JSON document.
// better-sqlite3 is built twice from the checkout's own package, in a temporary directory, with its
// own -O3 (the baseline) and with the -O2 set-up gives it (CFLAGS, the last -O counting): the
// compile's wall time on one core, then a store-like workload (indexed inserts in a transaction,
// point queries, a sorted scan) against each build, in rounds that alternate between them.
// Usage: node dist/bench/sqlite-build.js [--rounds 7]
import { execFile } from "node:child_process";
import { cp, mkdtemp, rm } from "node:fs/promises";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs, promisify } from "node:util";
import { pct, machine } from "./stats.js";

const { values } = parseArgs({ options: { rounds: { type: "string", default: "7" } } });
const ROUNDS = Number(values.rounds);
const run = promisify(execFile);
const require = createRequire(import.meta.url);
const Database = require("better-sqlite3") as typeof import("better-sqlite3");
const PACKAGE = join(require.resolve("better-sqlite3/package.json"), "..");
const LEVELS = { "-O3": "", "-O2": "-O2" } as const;

/** Compiles the package in `dir` with `cflags` appended, as `npm rebuild` does; its wall time in ms. */
async function compile(dir: string, cflags: string): Promise<number> {
  const t0 = performance.now();
  await run("npm", ["rebuild", "--loglevel=error", "--ignore-scripts=false"], { cwd: dir, env: { ...process.env, CFLAGS: cflags }, maxBuffer: 1 << 26 });
  return performance.now() - t0;
}

/** The workload against one build: ms. */
function workload(binding: string): number {
  const db = new Database(":memory:", { nativeBinding: binding });
  db.exec("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT, v INTEGER, data TEXT); CREATE INDEX t_v ON t(v)");
  const insert = db.prepare("INSERT INTO t (name, v, data) VALUES (?, ?, ?)");
  const t0 = performance.now();
  db.transaction(() => {
    for (let i = 0; i < 200_000; i++) insert.run(`n${i}`, i % 1000, JSON.stringify({ i, x: "y".repeat(20) }));
  })();
  const point = db.prepare("SELECT count(*), sum(length(data)) FROM t WHERE v = ?");
  for (let i = 0; i < 2000; i++) point.get(i % 1000);
  const scan = db.prepare("SELECT * FROM t WHERE name LIKE ? ORDER BY v DESC LIMIT 50");
  for (let i = 0; i < 50; i++) scan.all("n1%");
  const ms = performance.now() - t0;
  db.close();
  return ms;
}

async function main() {
  const work = await mkdtemp(join(tmpdir(), "forgevm-bench-sqlite-"));
  try {
    const compileMs: Record<string, number> = {};
    const bindings: Record<string, string> = {};
    for (const [level, cflags] of Object.entries(LEVELS)) {
      // A package of its own in a folder of its own: npm rebuild builds the package at the cwd's root.
      const dir = join(work, level.slice(1));
      await cp(PACKAGE, join(dir, "node_modules", "better-sqlite3"), { recursive: true, filter: (p) => !p.includes("/build/") });
      await cp(join(PACKAGE, "..", "bindings"), join(dir, "node_modules", "bindings"), { recursive: true });
      await cp(join(PACKAGE, "..", "file-uri-to-path"), join(dir, "node_modules", "file-uri-to-path"), { recursive: true });
      compileMs[level] = await compile(dir, cflags);
      bindings[level] = join(dir, "node_modules", "better-sqlite3", "build", "Release", "better_sqlite3.node");
    }
    const ms: Record<string, number[]> = { "-O3": [], "-O2": [] };
    for (let r = 0; r < ROUNDS; r++) for (const level of r % 2 ? ["-O2", "-O3"] : ["-O3", "-O2"]) ms[level].push(workload(bindings[level]));
    const p50 = (l: string) => pct(ms[l], 50);
    console.log(
      JSON.stringify(
        {
          bench: "sqlite-build",
          date: new Date().toISOString(),
          machine: machine(),
          rounds: ROUNDS,
          baseline: "-O3",
          compile_ms: Object.fromEntries(Object.entries(compileMs).map(([k, v]) => [k, Math.round(v)])),
          compile_ratio: +(compileMs["-O3"] / compileMs["-O2"]).toFixed(2),
          workload_ms_p50: { "-O3": Math.round(p50("-O3")), "-O2": Math.round(p50("-O2")) },
          workload_ratio: +(p50("-O2") / p50("-O3")).toFixed(3),
        },
        null,
        2,
      ),
    );
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

await main();
