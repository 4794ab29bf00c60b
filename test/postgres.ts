// A real PostgreSQL for the cluster tests: Debian's server binaries, a database cluster made in a
// temporary directory of this test run, on a free loopback port, run as the `postgres` system
// user (initdb refuses root). Stopped at exit; restartable, for the tests of a database restart.
import { execFileSync, spawnSync } from "node:child_process";
import { chownSync, mkdirSync, mkdtempSync, readdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { createServer } from "node:net";
import { join } from "node:path";
import { removeAtExit } from "./helpers.js";

export interface TestPostgres {
  /** postgres://forgevm@127.0.0.1:PORT/forgevm */
  url: string;
  port: number;
  stop(): void;
  start(): void;
}

function binDir(): string {
  const versions = readdirSync("/usr/lib/postgresql").sort((a, b) => Number(b) - Number(a));
  if (!versions.length) throw new Error("no PostgreSQL server in /usr/lib/postgresql (./setup.sh --test installs Debian's postgresql)");
  return join("/usr/lib/postgresql", versions[0], "bin");
}

/** A loopback port nothing listens on now. */
export async function freePort(): Promise<number> {
  const s = createServer().listen(0, "127.0.0.1");
  await new Promise((r) => s.once("listening", r));
  const port = (s.address() as { port: number }).port;
  await new Promise((r) => s.close(r));
  return port;
}

/** Makes and starts a database cluster of its own; the returned handle stops it (also at exit). */
export async function startPostgres(): Promise<TestPostgres> {
  const bin = binDir();
  // Not under the test run's directory: the postgres user cannot pass its 0700 parents.
  const root = mkdtempSync(join(tmpdir(), "fvpg-"));
  removeAtExit(root);
  const data = join(root, "pgdata");
  const sockets = join(root, "sockets");
  mkdirSync(sockets, { recursive: true });
  const uid = Number(execFileSync("id", ["-u", "postgres"]).toString().trim());
  const gid = Number(execFileSync("id", ["-g", "postgres"]).toString().trim());
  chownSync(root, uid, gid);
  chownSync(sockets, uid, gid);
  const as = (cmd: string, args: string[]) => {
    const r = spawnSync("runuser", ["-u", "postgres", "--", join(bin, cmd), ...args], { encoding: "utf8" });
    if (r.status !== 0) throw new Error(`${cmd} failed: ${r.stderr || r.stdout}`);
    return r.stdout;
  };
  as("initdb", ["-D", data, "-U", "forgevm", "--auth=trust", "-E", "UTF8", "--no-sync"]);
  const port = await freePort();
  const opts = `-p ${port} -k ${sockets} -c listen_addresses=127.0.0.1 -c fsync=off`;
  let running = false;
  const pg: TestPostgres = {
    url: `postgres://forgevm@127.0.0.1:${port}/forgevm`,
    port,
    start() {
      as("pg_ctl", ["start", "-w", "-D", data, "-l", join(root, "log"), "-o", opts]);
      running = true;
    },
    stop() {
      if (!running) return;
      as("pg_ctl", ["stop", "-w", "-m", "fast", "-D", data]);
      running = false;
    },
  };
  pg.start();
  as("createdb", ["-h", sockets, "-p", String(port), "-U", "forgevm", "forgevm"]);
  process.once("exit", () => {
    if (running) spawnSync("runuser", ["-u", "postgres", "--", join(bin, "pg_ctl"), "stop", "-m", "immediate", "-D", data]);
  });
  return pg;
}
