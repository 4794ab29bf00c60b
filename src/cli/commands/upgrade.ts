// `forgevm upgrade` for an installation from the npm package: the current version is packed
// aside, the new one installed with npm into the same prefix, and its self-check run (every
// module of the server loads, the native SQLite binding opens a database, the guest agent and the
// jail helper it ships are there); when that fails, the packed version is installed back. The data
// directory is not touched: a newer server migrates its database when it opens it, and
// `forgevm setup` builds what the new version needs (the initramfs with its agent) when asked.
// A checkout is updated with git instead.
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import type { Command } from "commander";
import { globalPrefix, INSTALL_ROOT, IS_CHECKOUT, PACKAGE } from "../../setup/install.js";
import { emit } from "../output.js";

/** What the self-check looks for in an installation (relative to its root). */
const SHIPPED = ["agent/build/forgevm-agent", "agent/build/git-credential-forgevm", "jail/build/forgevm-jail", "dist/web/index.html", "deploy/debian-packages.txt"];

/** Runs a command, its output passed through (to stderr, so `--json` stays parseable); rejects with its last lines. */
function step(cmd: string, args: string[], quiet: boolean): Promise<string> {
  return new Promise((ok, fail) => {
    const p = spawn(cmd, args, { stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    const take = (d: Buffer) => {
      out = (out + d.toString()).slice(-8000);
      if (!quiet) process.stderr.write(d);
    };
    p.stdout.on("data", take);
    p.stderr.on("data", take);
    p.on("error", (e) => fail(new Error(`${cmd}: ${e.message}`)));
    p.on("close", (code) => (code === 0 ? ok(out) : fail(new Error(`${cmd} ${args.join(" ")} failed (exit ${code}): ${out.trim().split("\n").slice(-5).join(" / ")}`))));
  });
}

/** The installed version's own self-check, run as a separate process of the new files. */
function selfCheck(bin: string): Promise<{ version: string; problems: string[] }> {
  return new Promise((ok) => {
    const p = spawn(process.execPath, [bin, "self-check", "--json"], { stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    let err = "";
    p.stdout.on("data", (d: Buffer) => (out += d));
    p.stderr.on("data", (d: Buffer) => (err = (err + d.toString()).slice(-2000)));
    p.on("error", (e) => ok({ version: "?", problems: [`its self-check did not start: ${e.message}`] }));
    p.on("close", () => {
      try {
        ok(JSON.parse(out));
      } catch {
        ok({ version: "?", problems: [`its self-check did not run: ${(err || out).trim().slice(-500)}`] });
      }
    });
  });
}

export function upgradeCommands(program: Command): void {
  program
    .command("self-check", { hidden: true })
    .description("check this installation: every module loads, SQLite opens, the shipped binaries are there (forgevm upgrade runs it)")
    .option("--json", "print JSON")
    .action(async (o: { json?: boolean }) => {
      const problems: string[] = [];
      await import("../../compose/serve.js").catch((e: Error) => problems.push(`the server's modules do not load: ${e.message}`));
      try {
        const { default: Database } = await import("better-sqlite3");
        new Database(":memory:").close();
      } catch (e) {
        problems.push(`SQLite's native binding does not load: ${(e as Error).message}`);
      }
      for (const f of SHIPPED) if (!existsSync(join(INSTALL_ROOT, f))) problems.push(`${f} is missing from ${INSTALL_ROOT}`);
      emit(o.json, { version: PACKAGE.version, from: INSTALL_ROOT, problems }, () => {
        console.log(problems.length ? `ForgeVM ${PACKAGE.version}: NOT ok` : `ForgeVM ${PACKAGE.version}: ok`);
        for (const p of problems) console.log(`  problem: ${p}`);
      });
      if (problems.length) process.exitCode = 1;
    });

  program
    .command("upgrade")
    .description("install a newer ForgeVM from npm (or a package file) into the same place, and go back to this one if its self-check fails")
    .argument("[package]", `what to install: an npm spec or a .tgz file (default ${PACKAGE.name}@latest)`)
    .option("-q, --quiet", "print only the outcome")
    .option("--json", "print JSON")
    .action(async (spec: string | undefined, o: { quiet?: boolean; json?: boolean }) => {
      if (IS_CHECKOUT) throw new Error(`this ForgeVM is a checkout (${INSTALL_ROOT}): update it with git pull && ./setup.sh`);
      const prefix = globalPrefix();
      if (!prefix) throw new Error(`this ForgeVM (${INSTALL_ROOT}) was not installed with npm install -g: upgrade it the way it was installed`);
      const wanted = !spec ? `${PACKAGE.name}@latest` : existsSync(spec) ? resolve(spec) : spec;
      const quiet = !!(o.quiet || o.json);
      const say = (m: string) => quiet || console.error(`upgrade: ${m}`);
      // npm installs the new version over this one: its entry point is where this one's is.
      const bin = join(INSTALL_ROOT, "dist", "src", "cli", "main.js");
      const npm = (args: string[]) => step("npm", [...args, "--prefix", prefix, "--no-audit", "--no-fund", "--loglevel=error"], quiet);
      const keep = await mkdtemp(join(tmpdir(), "forgevm-upgrade-"));
      try {
        say(`keeping ForgeVM ${PACKAGE.version} to go back to`);
        await step("npm", ["pack", INSTALL_ROOT, "--pack-destination", keep, "--loglevel=error"], true);
        const previous = join(keep, (await readdir(keep)).find((f) => f.endsWith(".tgz")) ?? "");
        say(`installing ${wanted}`);
        await npm(["install", "-g", wanted]);
        const check = await selfCheck(bin);
        if (!check.problems.length) {
          const outcome = { upgraded: true, from: PACKAGE.version, to: check.version, rolled_back: false, problems: [] };
          emit(o.json, outcome, () =>
            console.log(
              `upgraded ForgeVM ${PACKAGE.version} → ${check.version}. Next: forgevm setup (what the new version needs in the data directory), then restart the server (forgevm service restart, or stop and start forgevm serve)`,
            ),
          );
          return;
        }
        say(`ForgeVM ${check.version} failed its self-check; installing ${PACKAGE.version} again`);
        await npm(["install", "-g", previous]);
        const back = await selfCheck(bin);
        const outcome = {
          upgraded: false,
          from: PACKAGE.version,
          to: check.version,
          rolled_back: back.version === PACKAGE.version && !back.problems.length,
          problems: check.problems,
        };
        emit(o.json, outcome, () => {
          console.log(
            `not upgraded: ForgeVM ${check.version} failed its self-check, and ${PACKAGE.version} is installed again${outcome.rolled_back ? "" : " (but ITS self-check fails too: forgevm self-check says why)"}`,
          );
          for (const p of check.problems) console.log(`  problem: ${p}`);
        });
        process.exitCode = 1;
      } finally {
        await rm(keep, { recursive: true, force: true });
      }
    });
}
