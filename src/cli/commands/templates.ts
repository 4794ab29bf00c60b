// Templates: named spawn settings with setup commands and warm pools.
import { readFileSync } from "node:fs";
import { MEMORY_MB } from "../../schemas/bounds.js";
import type { Command } from "commander";
import type { Template, TemplateInput } from "forgevm";
import type { Cli } from "../context.js";
import { commaListOption, egressHeaderOption, intOption, listOption, nonEmpty, pairOption, ttlOption } from "../options.js";
import { emit, table } from "../output.js";
import { withSpawnProgress } from "../spawn-progress.js";

function templateFlags(c: Command): Command {
  return c
    .option("-f, --file <file>", "the template as YAML or JSON (flags override its fields)")
    .option("-i, --image <name>", "image")
    .option("-m, --memory <mib>", "memory in MiB", intOption("--memory", MEMORY_MB.minimum, MEMORY_MB.maximum))
    .option("-c, --vcpus <n>", "vCPUs", intOption("--vcpus", 1, 64))
    .option("--ttl <duration>", "lifetime of its sandboxes, e.g. 30m (0: until removed)", ttlOption("--ttl"))
    .option("-e, --env <NAME=VALUE>", "environment of its sandboxes (repeatable)", pairOption("--env"))
    .option("--setup <command>", "a command run once, before its base snapshot (repeatable, in order)", listOption)
    .option("--allow <entry>", "egress allowlist of its sandboxes and setup commands (repeatable)", listOption)
    .option("--secret-name <NAME>", "a secret its sandboxes need, given at spawn (repeatable)", listOption)
    .option(
      "--egress-header <HOST:NAME=VALUE>",
      "a header the egress proxy adds to its sandboxes' requests for HOST (on --allow), secrets by placeholder: 'api.openai.com:Authorization=Bearer {{OPENAI_KEY}}' (repeatable)",
      egressHeaderOption,
    )
    .option("--pool-size <n>", "warm sandboxes kept ready", intOption("--pool-size", 0, 64))
    .option("--forward <kinds>", "credentials its sandboxes have forwarded from the host: ssh-agent, git (comma-separated)", commaListOption)
    .option("--description <text>", "what it is for")
    .option("--json", "print JSON");
}

async function templateBody(name: string, o: Record<string, any>): Promise<TemplateInput> {
  const fromFile = o.file ? ((await import("yaml")).parse(readFileSync(o.file, "utf8")) as Record<string, unknown>) : {};
  const t: Record<string, unknown> = { ...fromFile, name };
  const set = (k: string, v: unknown) => v !== undefined && (t[k] = v);
  set("image", o.image);
  set("memory_mb", o.memory);
  set("vcpus", o.vcpus);
  set("ttl", o.ttl);
  set("env", nonEmpty(o.env));
  set("setup", o.setup);
  set("allowed_hosts", o.allow);
  set("egress_rules", o.egressHeader);
  set(
    "secrets",
    o.secretName?.map((n: string) => ({ name: n })),
  );
  set("pool_size", o.poolSize);
  set("forward", o.forward);
  set("description", o.description);
  return t as unknown as TemplateInput;
}

const row = (t: Template) => [t.name, t.image ?? "-", `${t.memory_mb}M`, t.cpu_cores ?? "-", (t.setup ?? []).length, t.pool_size ?? 0, t.description || "-"];

export function templateCommands(program: Command, cli: Cli): void {
  const tpl = program.command("template").alias("templates").description("named spawn settings: image, size, env, setup commands, allowlist, warm pool");

  tpl
    .command("ls", { isDefault: true })
    .description("list templates")
    .option("--json", "print JSON")
    .action(async (o: { json?: boolean }) => {
      const list = await (await cli.client()).templates.list();
      emit(o.json, list, () => table(["NAME", "IMAGE", "MEM", "CPUS", "SETUP", "POOL", "DESCRIPTION"], list.map(row), "no templates"));
    });

  tpl
    .command("get")
    .description("show one template (as JSON, as the REST API answers)")
    .argument("<name>")
    .option("--json", "print JSON (what it prints anyway: accepted as every show command takes it)")
    .action(async (name: string) => console.log(JSON.stringify(await (await cli.client()).templates.get(name), null, 2)));

  templateFlags(tpl.command("create").description("store a new template").argument("<name>")).action(async (name: string, o) => {
    const t = await (await cli.client()).templates.create(await templateBody(name, o));
    emit(o.json, t, () => console.log(`created template ${t.name}`));
  });

  templateFlags(tpl.command("update").description("replace a template (its base snapshot and warm pool are remade)").argument("<name>")).action(async (name: string, o) => {
    const { name: _n, ...body } = await templateBody(name, o);
    const t = await (await cli.client()).templates.update(name, body);
    emit(o.json, t, () => console.log(`updated template ${t.name}`));
  });

  tpl
    .command("rm")
    .description("delete templates")
    .argument("<name...>")
    .option("--json", "print JSON")
    .action(async (names: string[], o: { json?: boolean }) => {
      const client = await cli.client();
      for (const n of names) {
        await client.templates.delete(n);
        if (!o.json) console.log(`deleted template ${n}`);
      }
      if (o.json) console.log(JSON.stringify({ deleted: names }));
    });

  tpl
    .command("spawn")
    .description("spawn a sandbox from a template and print its id")
    .argument("<name>")
    .option("--ttl <duration>", "lifetime, e.g. 30m", ttlOption("--ttl"))
    .option("--secret <NAME=VALUE>", "a value for one of its secrets (repeatable)", pairOption("--secret"))
    .option("--json", "print JSON")
    .action(async (name: string, o: { ttl?: string; secret?: Record<string, string>; json?: boolean }) => {
      const client = await cli.client();
      const sb = await withSpawnProgress(client, () => client.templates.spawn(name, { ttl: o.ttl, secrets: nonEmpty(o.secret) }));
      emit(o.json, sb.info, () => console.log(sb.id));
    });
}
