// `forgevm service install|uninstall|show`: a systemd unit that starts the server at boot with
// this command's data directory and config, so sandboxes with a restart policy come back after
// a reboot (the server saves them when it stops and starts them when it starts).
import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdir, rm, writeFile } from "node:fs/promises";
import { homedir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import type { Command } from "commander";
import type { Cli } from "../context.js";
import { ignore } from "../../util/ignore.js";

const run = promisify(execFile);

export interface ServiceOptions {
  name: string;
  unitDir?: string;
  user?: boolean;
  enable: boolean;
}

/** The `forgevm` launcher of this installation. */
function launcher(): string {
  return resolve(dirname(fileURLToPath(import.meta.url)), "../../../../bin/forgevm");
}

// systemd splits ExecStart on spaces and reads quotes and backslashes: quote every word.
function quote(word: string): string {
  return /^[\w@%+=:,./-]+$/.test(word) ? word : `"${word.replace(/(["\\$])/g, "\\$1").replace(/%/g, "%%")}"`;
}

/** The unit file that runs `forgevm serve` on this data directory and config. */
export async function serviceUnit(cli: Cli, opts: { configFile?: string; user?: boolean }): Promise<string> {
  const argv = [launcher(), "--data-dir", await cli.dataDir(), ...(opts.configFile ? ["--config", resolve(opts.configFile)] : []), "serve"];
  // FORGEVM_* settings in force now are the server's too; the API key belongs in the config file (a unit is world-readable).
  const env = Object.entries(process.env)
    .filter(([k, v]) => k.startsWith("FORGEVM_") && k !== "FORGEVM_API_KEY" && k !== "FORGEVM_URL" && v !== undefined)
    .map(([k, v]) => `Environment=${quote(`${k}=${v}`)}`);
  return [
    "[Unit]",
    "Description=ForgeVM: disposable microVMs for AI agents and people",
    "After=network-online.target",
    "Wants=network-online.target",
    "",
    "[Service]",
    "Type=simple",
    `ExecStart=${argv.map(quote).join(" ")}`,
    `WorkingDirectory=${quote(process.cwd())}`,
    ...env,
    // Only the server gets the stop signal (it saves the sandboxes that have a restart policy and
    // ends the rest), and after a crash its VMs live on for the restarted server to re-attach.
    "KillMode=process",
    "TimeoutStopSec=120",
    "Restart=on-failure",
    "RestartSec=2",
    "LimitNOFILE=1048576",
    "",
    "[Install]",
    `WantedBy=${opts.user ? "default.target" : "multi-user.target"}`,
    "",
  ].join("\n");
}

/** The system unit `forgevm service install` writes by default (setup and status look for it). */
export const SYSTEM_UNIT = "/etc/systemd/system/forgevm.service";

function unitPath(o: ServiceOptions): string {
  const dir = o.unitDir ?? (o.user ? join(homedir(), ".config", "systemd", "user") : "/etc/systemd/system");
  return join(dir, `${o.name}.service`);
}

async function systemctl(o: ServiceOptions, ...args: string[]): Promise<void> {
  await run("systemctl", [...(o.user ? ["--user"] : []), ...args]);
}

function hasSystemd(): boolean {
  return existsSync("/run/systemd/system");
}

/** Writes the unit for this data directory and config, and enables and starts it unless `o.enable` is false. */
export async function installService(cli: Cli, o: ServiceOptions, configFile?: string): Promise<void> {
  const file = unitPath(o);
  await mkdir(dirname(file), { recursive: true });
  await writeFile(file, await serviceUnit(cli, { configFile, user: o.user }), { mode: 0o644 });
  console.log(`wrote ${file}`);
  if (!o.enable) return;
  if (!hasSystemd()) {
    console.log("systemd is not running here: the unit is written but not enabled; start the server with its ExecStart line");
    return;
  }
  await systemctl(o, "daemon-reload");
  await systemctl(o, "enable", "--now", `${o.name}.service`);
  console.log(`enabled and started ${o.name}.service (systemctl ${o.user ? "--user " : ""}status ${o.name})`);
}

export function serviceCommands(program: Command, cli: Cli): void {
  const service = program.command("service").description("run the server as a systemd service that starts at boot");
  const common = (c: Command) =>
    c
      .option("--name <name>", "unit name", "forgevm")
      .option("--user", "a user unit (systemctl --user) instead of a system one")
      .option("--unit-dir <dir>", "where to write the unit (default /etc/systemd/system, or ~/.config/systemd/user with --user)");

  common(service.command("install").description("write the unit for this data directory and config, enable it and start it"))
    .option("--no-enable", "only write the unit file")
    .action((o: ServiceOptions) => installService(cli, o, program.opts().config));

  common(service.command("uninstall").description("stop and disable the unit, and remove its file")).action(async (o: ServiceOptions) => {
    const file = unitPath(o);
    if (hasSystemd() && existsSync(file)) {
      await systemctl(o, "disable", "--now", `${o.name}.service`).catch((e) => console.error(`systemctl: ${(e as { stderr?: string }).stderr?.trim() ?? e}`));
    }
    await rm(file, { force: true });
    if (hasSystemd()) await systemctl(o, "daemon-reload").catch(ignore("systemd reloads on its own at the next boot"));
    console.log(`removed ${file}`);
  });

  service
    .command("show")
    .description("print the unit install would write")
    .option("--user", "as a user unit")
    .action(async (o: { user?: boolean }) => {
      process.stdout.write(await serviceUnit(cli, { configFile: program.opts().config, user: o.user }));
    });
}
