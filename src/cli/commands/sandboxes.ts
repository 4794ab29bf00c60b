// Sandbox commands: spawn, list, inspect, extend, kill, logs.
import type { Command } from "commander";
import type { SandboxInfo } from "forgevm";
import type { Cli } from "../context.js";
import { durationOption, intOption, listOption, nonEmpty, pairOption } from "../options.js";
import { emit, table } from "../output.js";
import { withSpawnProgress } from "../spawn-progress.js";

/** The options every command that makes a sandbox takes (spawn, run). */
export function sandboxOptions(c: Command): Command {
  return c
    .option("-i, --image <name>", "image (default: the server's, forgevm/debian:bookworm)")
    .option("--template <name>", "a stored template whose settings fill in the rest")
    .option("-m, --memory <mib>", "memory in MiB", intOption("--memory", 64, 65536))
    .option("-c, --vcpus <n>", "vCPUs", intOption("--vcpus", 1, 64))
    .option("--disk <mib>", "disk size in MiB", intOption("--disk", 64, 1048576))
    .option("-e, --env <NAME=VALUE>", "environment of every command in it (repeatable)", pairOption("--env"))
    .option("--secret <NAME=VALUE>", "a secret: every command's environment and /run/secrets/NAME, never stored (repeatable)", pairOption("--secret"))
    .option("--network <mode>", "none (loopback only), allowlist (listed hosts through the egress proxy) or full (internet, never the host)")
    .option("--allow <entry>", "egress allowlist entry: host, *.domain, IP/CIDR, :port, @preset (repeatable)", listOption)
    .option("-p, --publish <spec>", "publish a guest port: [ADDRESS:]HOST:GUEST, e.g. 8080:80 (repeatable)", listOption)
    .option("--name <name>", "a name to find it by (kept in its metadata as name)");
}

/** The spawn request those options stand for. */
export function spawnRequest(o: Record<string, any>) {
  return {
    image: o.image,
    template: o.template,
    memory_mb: o.memory,
    vcpus: o.vcpus,
    disk_mb: o.disk,
    ttl: o.ttl,
    env: nonEmpty(o.env),
    secrets: nonEmpty(o.secret),
    network: o.network,
    allow: o.allow,
    ports: o.publish,
    metadata: o.name ? { name: o.name } : undefined,
  };
}

const row = (s: SandboxInfo) => [s.id, s.metadata?.name ?? "-", s.state, s.image, `${s.memory_mb}M`, s.vcpus, s.state === "error" ? (s.error ?? "") : s.expires_at];

export function sandboxCommands(program: Command, cli: Cli): void {
  sandboxOptions(program.command("spawn").description("create a sandbox on the server and print its id"))
    .option("--ttl <duration>", "lifetime, e.g. 30m or 1h", durationOption("--ttl"))
    .option("--json", "print the sandbox as JSON")
    .action(async (o) => {
      const client = await cli.client();
      const sb = await withSpawnProgress(client, () => client.spawn(spawnRequest(o) as never));
      emit(o.json, sb.info, () => console.log(sb.id));
    });

  program
    .command("list")
    .alias("ls")
    .description("list live sandboxes (with --all, failed and destroyed ones too, with the reason)")
    .option("-a, --all", "include sandboxes that failed or were destroyed")
    .option("--json", "print JSON")
    .action(async (o: { all?: boolean; json?: boolean }) => {
      const list = await (await cli.client()).list({ all: o.all });
      emit(o.json, list, () => table(["ID", "NAME", "STATE", "IMAGE", "MEM", "CPUS", o.all ? "EXPIRES / ERROR" : "EXPIRES"], list.map(row), "no sandboxes"));
    });

  program
    .command("inspect")
    .alias("get")
    .description("everything the server knows about a sandbox (also one that failed, with its reason)")
    .argument("<id>", "sandbox id")
    .option("--json", "print JSON (the default)")
    .action(async (id: string) => {
      console.log(JSON.stringify(await (await cli.client()).info(id), null, 2));
    });

  program
    .command("extend")
    .description("give a sandbox a new expiry, this long from now")
    .argument("<id>", "sandbox id")
    .argument("<ttl>", "lifetime from now, e.g. 30m or 2h", durationOption("ttl"))
    .option("--json", "print the sandbox as JSON")
    .action(async (id: string, ttl: string, o: { json?: boolean }) => {
      const sb = await (await (await cli.client()).get(id)).extendTtl(ttl);
      emit(o.json, sb.info, () => console.log(`${sb.id} expires at ${sb.info.expires_at}`));
    });

  program
    .command("kill")
    .alias("destroy")
    .alias("rm")
    .description("destroy sandboxes")
    .argument("<id...>", "sandbox ids")
    .option("--json", "print JSON")
    .action(async (ids: string[], o: { json?: boolean }) => {
      const client = await cli.client();
      for (const id of ids) {
        await client.destroy(id);
        if (!o.json) console.log(`destroyed ${id}`);
      }
      if (o.json) console.log(JSON.stringify({ destroyed: ids }));
    });

  program
    .command("logs")
    .description("print the last lines of a sandbox's console (kept after it is gone)")
    .argument("<id>", "sandbox id")
    .option("-n, --lines <n>", "how many lines", intOption("--lines", 1, 100000), 100)
    .option("--json", "print JSON")
    .action(async (id: string, o: { lines: number; json?: boolean }) => {
      const lines = await (await cli.client()).logs(id, o.lines);
      emit(o.json, lines, () => console.log(lines.join("\n")));
    });
}
