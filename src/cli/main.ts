// The `forgevm` command line.
import { Command, InvalidArgumentError } from "commander";
import { readFileSync } from "node:fs";
import { Forge } from "../core/forge.js";
import { defaultDataDir, pathsFor } from "../config/paths.js";
import { listImages } from "../images/store.js";
import { runSetup } from "../setup/index.js";

const pkg = JSON.parse(readFileSync(new URL("../../../package.json", import.meta.url), "utf8")) as { version: string };

function intOption(name: string, min: number, max: number) {
  return (v: string) => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < min || n > max) throw new InvalidArgumentError(`${name} must be an integer from ${min} to ${max}`);
    return n;
  };
}

function envOption(v: string, acc: Record<string, string>) {
  const i = v.indexOf("=");
  if (i <= 0) throw new InvalidArgumentError(`--env takes NAME=VALUE, got "${v}"`);
  return { ...acc, [v.slice(0, i)]: v.slice(i + 1) };
}

const program = new Command("forgevm")
  .description("Disposable, isolated microVMs for AI agents and people")
  .version(pkg.version, "-V, --version")
  .option("--data-dir <dir>", "data directory (default: $FORGEVM_DATA_DIR or ~/.local/share/forgevm)");

const dataDir = () => (program.opts().dataDir as string | undefined) ?? defaultDataDir();

program
  .command("version")
  .description("print the version")
  .action(() => console.log(`forgevm ${pkg.version}`));

program
  .command("setup")
  .description("fetch the guest kernel, build the initramfs and the default image (./setup.sh also installs packages)")
  .option("-q, --quiet", "print nothing when everything is already set up")
  .action(async (o: { quiet?: boolean }) => {
    const lines: string[] = [];
    await runSetup(pathsFor(dataDir()), (m) => (o.quiet ? lines.push(m) : console.log(`setup: ${m}`)));
  });

program
  .command("run")
  .description("boot a sandbox, run one command in it with output streamed, destroy it; exits with the command's code")
  .argument("<command...>", "command and arguments (use -- before it)")
  .option("-i, --image <name>", "image name", undefined)
  .option("-m, --memory <mib>", "memory in MiB", intOption("--memory", 64, 65536), 512)
  .option("-c, --cpus <n>", "vCPUs", intOption("--cpus", 1, 64), 1)
  .option("--disk <mib>", "disk size in MiB", intOption("--disk", 64, 1048576), 2048)
  .option("-t, --timeout <seconds>", "kill the command after this long (exit code 124)", intOption("--timeout", 1, 86400))
  .option("-e, --env <NAME=VALUE>", "environment variable (repeatable)", envOption, {})
  .option("-w, --workdir <dir>", "working directory in the guest")
  .option("-u, --user <user>", "user to run as")
  .action(async (command: string[], o) => {
    const forge = await Forge.open({ dataDir: dataDir() });
    let stopping = false;
    const stop = async (code: number) => {
      if (stopping) return;
      stopping = true;
      await forge.close();
      process.exit(code);
    };
    process.once("SIGINT", () => void stop(130));
    process.once("SIGTERM", () => void stop(143));
    const sb = await forge.spawn({ image: o.image, memoryMb: o.memory, vcpus: o.cpus, diskMb: o.disk });
    try {
      const s = sb.execStream(command.length === 1 ? command[0] : command, {
        env: o.env,
        cwd: o.workdir,
        user: o.user,
        timeoutMs: o.timeout ? o.timeout * 1000 : undefined,
      });
      s.stdout.pipe(process.stdout, { end: false });
      s.stderr.pipe(process.stderr, { end: false });
      const r = await s.result;
      if (r.timed_out) console.error(`forgevm: command timed out after ${o.timeout} s`);
      process.exitCode = r.exit_code;
    } finally {
      await forge.close();
    }
  });

program
  .command("images")
  .description("list local images")
  .option("--json", "print JSON")
  .action(async (o: { json?: boolean }) => {
    const images = await listImages(pathsFor(dataDir()));
    if (o.json) return console.log(JSON.stringify(images.map(({ dir: _d, rootfs: _r, ...m }) => m), null, 2));
    for (const i of images) console.log(`${i.name}\t${(i.size / 1048576).toFixed(0)} MiB\t${i.createdAt}\t${i.description ?? ""}`);
  });

program
  .command("doctor")
  .description("check QEMU, the kernel, the initramfs and the accelerator")
  .option("--json", "print JSON")
  .action(async (o: { json?: boolean }) => {
    const forge = await Forge.open({ dataDir: dataDir() });
    const h = await forge.provider.health();
    if (o.json) console.log(JSON.stringify(h, null, 2));
    else {
      console.log(`provider ${h.name}: ${h.healthy ? "healthy" : "NOT healthy"}${h.accel ? `, accel ${h.accel}` : ""}`);
      for (const [k, v] of Object.entries(h.details)) console.log(`  ${k}: ${v}`);
      for (const p of h.problems) console.log(`  problem: ${p}`);
    }
    if (!h.healthy) process.exitCode = 1;
  });

program.parseAsync().catch((e: Error) => {
  console.error(`forgevm: ${e.message}`);
  process.exit(1);
});
