// `forgevm env create|ls|build|builds|cancel|spawn|registry`: the Environments API through the server
// (builds run there, in VMs, and outlive the command).
import { userInfo } from "node:os";
import type { Command } from "commander";
import type { Client, EnvironmentBuild, EnvironmentSpec } from "forgevm";
import type { Cli } from "../context.js";
import { listOption } from "../options.js";
import { emit, table } from "../output.js";

const defaultOwner = () => userInfo().username;
const ENDED = ["ready", "failed", "canceled"];

/** A spec by id, or by name among the owner's. */
async function findSpec(client: Client, nameOrId: string, owner: string): Promise<EnvironmentSpec> {
  const mine = await client.environments.listSpecs(owner);
  const found = mine.find((s) => s.name === nameOrId || s.id === nameOrId);
  if (found) return found;
  return client.environments.getSpec(nameOrId).catch(() => {
    throw new Error(`no environment "${nameOrId}" of owner ${owner}: see forgevm env ls --owner ${owner}`);
  });
}

const size = (b: number) => (b ? `${(b / 1048576).toFixed(0)} MiB` : "-");

function printBuild(b: EnvironmentBuild): void {
  console.log(`${b.id} ${b.status}${b.current_step ? ` (${b.current_step})` : ""}${b.error ? `: ${b.error}` : ""}`);
  for (const a of b.artifacts) console.log(`  ${a.target}: ${a.status} ${a.image_ref}${a.digest ? `@${a.digest}` : ""}${a.error ? ` (${a.error})` : ""}`);
}

export function environmentCommands(program: Command, cli: Cli): void {
  const env = program.command("env").description("environments: a base image plus Debian and Python packages, built into an image in VMs");

  env
    .command("create")
    .description("describe an environment")
    .argument("<name>", "its name (unique per owner)")
    .requiredOption("--base <image>", "base image, e.g. forgevm/debian:bookworm or python:3.12-slim")
    .option("--pip <package>", "a Python package (repeatable), e.g. numpy==1.26", listOption)
    .option("--apt <package>", "a Debian package (repeatable)", listOption)
    .option("--python <version>", "the Python to install into (MAJOR.MINOR; the image must have it)")
    .option("--owner <id>", "whose environment (default: your user name)")
    .option("--json", "print JSON")
    .action(async (name: string, o: { base: string; pip?: string[]; apt?: string[]; python?: string; owner?: string; json?: boolean }) => {
      const spec = await (await cli.client()).environments.createSpec({
        owner_id: o.owner ?? defaultOwner(),
        name,
        base_image: o.base,
        python_packages: o.pip ?? [],
        apt_packages: o.apt ?? [],
        ...(o.python ? { python_version: o.python } : {}),
      });
      emit(o.json, spec, () => console.log(`${spec.id} ${spec.name}`));
    });

  env
    .command("ls")
    .alias("list")
    .description("list an owner's environments")
    .option("--owner <id>", "whose (default: your user name)")
    .option("--json", "print JSON")
    .action(async (o: { owner?: string; json?: boolean }) => {
      const list = await (await cli.client()).environments.listSpecs(o.owner ?? defaultOwner());
      emit(o.json, list, () =>
        table(
          ["NAME", "ID", "BASE", "APT", "PIP"],
          list.map((s) => [s.name, s.id, s.base_image, s.apt_packages.join(" ") || "-", s.python_packages.join(" ") || "-"]),
          "no environments",
        ),
      );
    });

  env
    .command("build")
    .description("build an environment into an image (and push it to --target registries)")
    .argument("<env>", "environment name or spec id")
    .option("--owner <id>", "whose (default: your user name)")
    .option("--target <target>", "local (default), ghcr, dockerhub or a registry connection id (repeatable)", listOption)
    .option("--wait", "wait for the build to end, printing its log")
    .option("--json", "print JSON")
    .action(async (name: string, o: { owner?: string; target?: string[]; wait?: boolean; json?: boolean }) => {
      const client = await cli.client();
      const spec = await findSpec(client, name, o.owner ?? defaultOwner());
      let b = await client.environments.build(spec.id, { targets: o.target });
      if (o.wait) b = await client.environments.followBuild(b.id, (line) => !o.json && console.error(line));
      emit(o.json, b, () => printBuild(b));
      if (o.wait && b.status !== "ready") process.exitCode = 1;
    });

  env
    .command("builds")
    .description("list builds, newest first")
    .option("--owner <id>", "whose (default: everyone's)")
    .option("--limit <n>", "at most this many (1-200, default 30)", (v) => Number(v))
    .option("--json", "print JSON")
    .action(async (o: { owner?: string; limit?: number; json?: boolean }) => {
      const list = await (await cli.client()).environments.listBuilds({ ownerId: o.owner, limit: o.limit });
      emit(o.json, list, () =>
        table(
          ["BUILD", "ENV", "STATUS", "STEP", "SIZE", "CREATED"],
          list.map(({ build, spec }) => [build.id, spec.name, build.status, build.current_step ?? "-", size(build.image_size_bytes), build.created_at]),
          "no builds",
        ),
      );
    });

  env
    .command("cancel")
    .description("stop a queued or running build")
    .argument("<build>", "build id")
    .action(async (id: string) => {
      const b = await (await cli.client()).environments.cancelBuild(id);
      printBuild(b);
    });

  const registry = env.command("registry").description("registry connections builds push with (--target ID, or ghcr/dockerhub for the default one)");

  registry
    .command("add")
    .description("add (or with --id replace) a registry login; the secret is read from stdin")
    .argument("<provider>", "ghcr, dockerhub, or registry (with --registry)")
    .argument("<username>", "the registry user name")
    .option("--registry <host>", "host[:port] of the registry (provider registry)")
    .option("--secret-ref <NAME>", "use the server's secret FORGEVM_SECRET_NAME instead of reading one")
    .option("--default", "the owner's default connection for this provider")
    .option("--id <id>", "the connection's id (replaces the one with this id)")
    .option("--owner <id>", "whose (default: your user name)")
    .option("--json", "print JSON")
    .action(async (provider: string, username: string, o: { registry?: string; secretRef?: string; default?: boolean; id?: string; owner?: string; json?: boolean }) => {
      let secret = o.secretRef ? `secret:${o.secretRef}` : "";
      if (!secret) {
        if (process.stdin.isTTY) console.error("registry token or password (then Enter and Ctrl-D):");
        const chunks: Buffer[] = [];
        for await (const c of process.stdin) chunks.push(c as Buffer);
        secret = Buffer.concat(chunks)
          .toString("utf8")
          .replace(/\r?\n$/, "");
        if (!secret) throw new Error('no secret on stdin: pipe the token in (echo "$TOKEN" | forgevm env registry add …) or pass --secret-ref NAME');
      }
      const c = await (await cli.client()).environments.putRegistryConnection({
        owner_id: o.owner ?? defaultOwner(),
        provider: provider as "ghcr",
        username,
        secret_ref: secret,
        is_default: o.default ?? false,
        ...(o.registry ? { registry: o.registry } : {}),
        ...(o.id ? { id: o.id } : {}),
      });
      emit(o.json, c, () => console.log(`${c.id} ${c.provider} ${c.username}@${c.registry} (secret ${c.secret_storage})`));
    });

  registry
    .command("ls")
    .description("list an owner's registry connections (never their secrets)")
    .option("--owner <id>", "whose (default: your user name)")
    .option("--json", "print JSON")
    .action(async (o: { owner?: string; json?: boolean }) => {
      const list = await (await cli.client()).environments.listRegistryConnections(o.owner ?? defaultOwner());
      emit(o.json, list, () =>
        table(
          ["ID", "PROVIDER", "REGISTRY", "USER", "DEFAULT", "SECRET"],
          list.map((c) => [c.id, c.provider, c.registry, c.username, c.is_default ? "yes" : "-", c.secret_ref ?? c.secret_storage]),
          "no registry connections",
        ),
      );
    });

  registry
    .command("rm")
    .description("remove a registry connection")
    .argument("<id>", "connection id")
    .action(async (id: string) => {
      await (await cli.client()).environments.deleteRegistryConnection(id);
      console.log(id);
    });

  env
    .command("spawn")
    .description("start a sandbox of a build's image; prints its id")
    .argument("<build>", "build id")
    .option("--ttl <duration>", "lifetime, e.g. 30m")
    .option("--memory <mb>", "memory in MiB", (v) => Number(v))
    .action(async (id: string, o: { ttl?: string; memory?: number }) => {
      const client = await cli.client();
      const cfg = await client.environments.spawnConfig(id);
      if (!cfg.ready) throw new Error(`build ${id} has no image to spawn yet: ${cfg.note}${ENDED.includes(cfg.build_status) ? "" : ` (wait: forgevm env builds)`}`);
      const sb = await client.spawn({ image: cfg.image, ...(o.ttl ? { ttl: o.ttl } : {}), ...(o.memory ? { memory_mb: o.memory } : {}) });
      console.log(`${sb.id} ${cfg.image}`);
    });
}
