// The server itself: serve, setup, doctor, version.
import type { Command } from "commander";
import { stat } from "node:fs/promises";
import { INSTALL_ROOT, INSTALLED_AS, INSTALLED_AS_WORDS } from "../../setup/install.js";
import { pathsFor } from "../../config/paths.js";
import type { Cli } from "../context.js";
import { emit } from "../output.js";

/** What a data directory lacks to serve (its kernel, its initramfs), or null when it is set up; nothing is made. */
async function notSetUp(dataDir: string): Promise<string | null> {
  const paths = pathsFor(dataDir);
  for (const [what, file] of [
    ["the guest kernel", paths.kernel],
    ["the initramfs", paths.initramfs],
  ] as const) {
    if (!(await stat(file).catch(() => null))) return what;
  }
  return null;
}

export function serverCommands(program: Command, cli: Cli, version: string): void {
  program
    .command("serve")
    .description("run the server: the REST API, the E2B, Daytona, MCP and Custom HTTP interfaces and the web console, on one port")
    .option("-p, --port <port>", "listen on this port (server.port; default 7423)")
    .option("--host <address>", "listen on this address (server.host; default 127.0.0.1)")
    .option("--data-dir <dir>", "the data directory (data_dir; default $FORGEVM_DATA_DIR or ~/.local/share/forgevm)")
    .option("--role <role>", "standalone (default), node (runs sandboxes in a cluster) or front (routes a cluster's requests)")
    .option("--database <url>", "the cluster's catalogue: postgres://user@host:port/db")
    .option("--advertise <url>", "a node: the address fronts reach it at")
    .addHelpText(
      "after",
      `
Settings come from --config FILE, else ./forgevm.yaml, else ~/.forgevm/config.yaml; then
FORGEVM_<SECTION>_<KEY> variables (FORGEVM_SERVER_PORT=8080); then these flags. A stop (Ctrl-C,
SIGTERM) leaves sandboxes running for the next start (server.on_stop: keep | pause | destroy).`,
    )
    .action(async (o: { port?: string; host?: string; dataDir?: string; role?: string; database?: string; advertise?: string }) => {
      const cfg = await cli.config();
      if (o.port !== undefined) {
        const port = Number(o.port);
        if (!Number.isInteger(port) || port < 0 || port > 65535) throw new Error(`--port must be a port number from 0 to 65535, got "${o.port}"`);
        cfg.server.port = port;
      }
      if (o.host !== undefined) cfg.server.host = o.host;
      if (o.dataDir !== undefined) cfg.data_dir = o.dataDir;
      if (o.role !== undefined) {
        if (o.role !== "standalone" && o.role !== "node" && o.role !== "front") throw new Error(`--role must be standalone, node or front, got "${o.role}"`);
        cfg.cluster.role = o.role;
      }
      if (o.database !== undefined) cfg.cluster.database = o.database;
      if (o.advertise !== undefined) cfg.cluster.advertise = o.advertise;
      const { serveForever } = await import("../../compose/serve.js");
      await serveForever(version, cfg, cfg.notes);
    });

  program
    .command("setup")
    .description(
      "set up a data directory, step by step: the guest kernel, the initramfs, the default image and the ssh server for guests (each checked and skipped when done), then what is optional (the code-interpreter image, a boot-time service: asked), then a test sandbox that runs a command (./setup.sh also installs packages and builds)",
    )
    .option("-y, --yes", "take the defaults without asking (the code-interpreter image: yes; the service: no)")
    .option("-q, --quiet", "print nothing but the test sandbox's line")
    .option("--no-test-sandbox", "end without booting a test sandbox")
    .option("--desktop", "build the desktop image too (docs/desktop.md: XFCE, Firefox, noVNC; several minutes), without asking")
    .action(async (o: { yes?: boolean; quiet?: boolean; testSandbox: boolean; desktop?: boolean }) => {
      const { guidedSetup } = await import("../setup-guide.js");
      const { installService } = await import("./service.js");
      await guidedSetup(cli, o, () => installService(cli, { name: "forgevm", enable: true }, program.opts().config));
    });

  program
    .command("doctor")
    .description("check every provider: QEMU, the kernel, the initramfs and the accelerator; bubblewrap for local (of the running server, if one owns the data directory)")
    .option("--json", "print JSON")
    .action(async (o: { json?: boolean }) => {
      // A check changes nothing: a data directory that is not set up is reported, not made one.
      const dataDir = (await cli.serverUrl()) ? null : await cli.dataDir();
      const missing = dataDir ? await notSetUp(dataDir) : null;
      if (missing) {
        const problem = `the data directory ${dataDir} is not set up (${missing} missing): run ./setup.sh, or forgevm setup`;
        emit(o.json, { name: "qemu", healthy: false, default: true, accel: null, problems: [problem], details: {}, providers: [] }, () => console.log(`NOT healthy: ${problem}`));
        process.exitCode = 1;
        return;
      }
      const server = await cli.dataDirClient();
      type Health = { name: string; healthy: boolean; default: boolean; accel: string | null; problems: string[]; details: Record<string, string> };
      const all: Health[] = await Promise.all(
        (await server.providers()).map(async (p) => {
          const d = await server.provider(p.name);
          return {
            name: d.name,
            healthy: d.healthy,
            default: d.default,
            accel: (d.config.accel as string | null) ?? null,
            problems: d.problems,
            details: Object.fromEntries(
              Object.entries(d.config)
                .filter(([k]) => k !== "accel")
                .map(([k, v]) => [k, String(v)]),
            ),
          };
        }),
      );
      // The default provider's health at the top (as before there were several), every provider under "providers".
      const h = all.find((p) => p.default) ?? all[0];
      const notes = await hostNotes();
      emit(o.json, { ...h, providers: all, notes }, () => {
        for (const p of all) {
          console.log(`provider ${p.name}${p.default ? " (default)" : ""}: ${p.healthy ? "healthy" : "NOT healthy"}${p.accel ? `, accel ${p.accel}` : ""}`);
          for (const [k, v] of Object.entries(p.details)) console.log(`  ${k}: ${v}`);
          for (const problem of p.problems) console.log(`  problem: ${problem}`);
        }
        for (const n of notes) console.log(`note: ${n}`);
      });
      if (!all.every((p) => p.healthy)) process.exitCode = 1;
    });

  program
    .command("version")
    .description("print the version")
    .option("--json", "print JSON")
    .action((o: { json?: boolean }) => {
      emit(o.json, { version, from: INSTALL_ROOT, installed_as: INSTALLED_AS, node: process.version }, () =>
        console.log(`forgevm ${version} (${INSTALLED_AS_WORDS}, Node.js ${process.version})`),
      );
    });
}

/** What a user of this machine should know that is no provider's health: a name resolver that leaves out `*.localhost`. */
async function hostNotes(): Promise<string[]> {
  const { lookup } = await import("node:dns/promises");
  const resolves = await lookup("8000-forgevm-doctor.localhost").then(
    () => true,
    () => false,
  );
  return resolves
    ? []
    : [
        "names under .localhost do not resolve here, so E2B's getHost addresses (<port>-<id>.localhost:<port>) reach sandbox ports from browsers and curl but not from Node.js or Python clients on this machine: install libnss-myhostname (Debian and Ubuntu), or set e2b.domain to a name whose wildcard DNS points at this server",
      ];
}
