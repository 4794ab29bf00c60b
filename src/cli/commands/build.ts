// `forgevm build`: a Dockerfile build, as `docker build` runs one. The context directory is sent
// as a tar (what .dockerignore leaves out stays here), the server builds it in VMs, and the log
// is followed here with each step's outcome (the data directory's server, or one of the command's own).
import { statSync } from "node:fs";
import type { Command } from "commander";
import { ForgevmError } from "forgevm";
import type { Cli } from "../context.js";
import { buildDirectory } from "../build-context.js";
import { listOption, pairOption } from "../options.js";
import { emit } from "../output.js";

interface BuildFlags {
  tag: string;
  file?: string;
  buildArg?: Record<string, string>;
  network?: string;
  allow?: string[];
  cache: boolean;
  target?: string;
  json?: boolean;
  quiet?: boolean;
}

export function buildCommands(program: Command, cli: Cli): void {
  program
    .command("build")
    .description("build an image from a Dockerfile, in VMs (FROM, RUN, COPY, ADD, ENV, ARG, WORKDIR, USER, ENTRYPOINT, CMD, EXPOSE, LABEL, SHELL; multi-stage)")
    .argument("<context>", "the build context directory")
    .requiredOption("-t, --tag <name>", "NAME[:TAG] of the image")
    .option("-f, --file <path>", "the Dockerfile, relative to the context (default: Dockerfile)")
    .option("--build-arg <NAME=VALUE>", "a build argument (repeatable)", pairOption("--build-arg"))
    .option("--network <mode>", "network of RUN steps: none (default), allowlist (with --allow) or full")
    .option("--allow <entry>", "egress allowlist entry for RUN steps: host, *.domain, IP/CIDR, @preset (repeatable)", listOption)
    .option("--no-cache", "run every step, ignoring the cache")
    .option("--target <stage>", "build up to this stage")
    .option("-q, --quiet", "print only the image's digest")
    .option("--json", "print the finished job as JSON")
    .action(async (context: string, o: BuildFlags) => {
      if (!statSync(context, { throwIfNoEntry: false })?.isDirectory()) throw new Error(`${context} is not a directory: give the build context`);
      const opts = { tag: o.tag, dockerfile: o.file, buildArgs: o.buildArg, network: o.network, allow: o.allow, noCache: !o.cache, target: o.target };
      const say = (line: string) => {
        if (!o.quiet && !o.json) console.error(line);
      };
      const client = await cli.dataDirClient();
      const job = await buildDirectory(client, context, opts, say);
      if (job.state !== "done") {
        // The log above ends with the error already: said again only when no log was shown.
        const why = job.error ?? `the build ended ${job.state}`;
        throw new ForgevmError(o.quiet || o.json ? why : `the build ${job.state === "cancelled" ? "was cancelled" : "failed (its log above says why)"}`, job.error_code ?? "");
      }
      const result = { image: job.image!, digest: job.digest!, steps: job.steps, state: job.state };
      const cached = result.steps.filter((s) => s.status === "cached").length;
      emit(o.json, result, () => {
        if (o.quiet) console.log(result.digest);
        else console.log(`${result.image}\n  digest ${result.digest}\n  ${result.steps.length} steps, ${cached} from the cache`);
      });
    });
}
