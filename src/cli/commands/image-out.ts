// Images made and sent elsewhere: commit (a sandbox's disk as a new image), export (an OCI
// archive) and push (to a registry). Commit needs the server that runs the sandbox; export and
// push go through the server of the data directory (its owner's, or one of the command's own).
import { createWriteStream } from "node:fs";
import { rename, rm } from "node:fs/promises";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import type { Command } from "commander";
import type { ImageChanges } from "forgevm";
import { applyChange } from "../changes.js";
import type { Cli } from "../context.js";
import { listOption } from "../options.js";
import { emit, mib } from "../output.js";
import { familiarName } from "../../core/images/image-reference.js";

export function imageOutCommands(program: Command, cli: Cli): void {
  program
    .command("commit")
    .description("make a new image from a running sandbox's disk: one layer on top of its image")
    .argument("<sandbox>", "sandbox id or name")
    .argument("<image>", "NAME[:TAG] of the new image")
    .option(
      "-c, --change <instruction>",
      'config change, as docker commit: "CMD [\\"app\\"]", "ENV K=V", "WORKDIR /app", "USER u", "EXPOSE 80", "LABEL k=v", "ENTRYPOINT …"',
      listOption,
    )
    .option("-m, --message <text>", "a comment kept in the image's history")
    .option("--squash", "one layer holding the whole filesystem instead of one on top of the image's")
    .option("--no-pause", "let the sandbox's processes run while its disk is read")
    .option("--json", "print JSON")
    .action(async (id: string, image: string, o: { change?: string[]; message?: string; squash?: boolean; pause: boolean; json?: boolean }) => {
      let changes: ImageChanges | undefined;
      for (const c of o.change ?? []) changes = applyChange(changes ?? {}, c);
      const client = await cli.client();
      const r = await client.commit(id, image, { changes, squash: o.squash, comment: o.message, pause: o.pause });
      emit(o.json, r, () =>
        console.log(
          `${familiarName(r.image.name)}\n  digest ${r.image.digest}\n  ${r.image.layers} layers (+${r.layer.entries} entries, ${r.layer.whiteouts} removed, ${mib(r.layer.size)}), rootfs ${mib(r.image.size)}\n  ${(r.duration_ms / 1000).toFixed(1)} s, processes stopped ${r.frozen_ms} ms`,
        ),
      );
    });

  program
    .command("export")
    .alias("save")
    .description("write an image as an OCI archive (docker load, podman load and skopeo read it)")
    .argument("<image>", "image name")
    .option("-o, --output <file>", "the archive to write (default: standard output, when it is not a terminal)")
    .action(async (image: string, o: { output?: string }) => {
      if (!o.output && process.stdout.isTTY) throw new Error("the archive would go to your terminal: give a file with -o FILE, or redirect the output");
      const server = await cli.dataDirClient();
      const write = async (source: Readable) => {
        if (!o.output) return pipeline(source, process.stdout);
        const tmp = `${o.output}.part`;
        try {
          await pipeline(source, createWriteStream(tmp));
          await rename(tmp, o.output);
        } catch (e) {
          await rm(tmp, { force: true });
          throw e;
        }
      };
      await write(Readable.fromWeb((await server.images.export(image)) as import("node:stream/web").ReadableStream));
      if (o.output) console.error(`wrote ${o.output}`);
    });

  program
    .command("push")
    .description("push a local image to a registry (credentials as for pull; blobs the registry has are skipped or mounted)")
    .argument("<image>", "local image name")
    .argument("[reference]", "where to push, e.g. registry.example.com/team/app:v1 (default: the image's own name)")
    .option("--json", "print JSON")
    .action(async (image: string, reference: string | undefined, o: { json?: boolean }) => {
      const r = await (await cli.dataDirClient()).images.push(image, reference);
      emit(o.json, r, () => {
        for (const b of r.blobs) console.log(`${b.digest.slice(7, 19)}: ${b.status} ${mib(b.size)}`);
        console.log(`${r.reference}@${r.digest}`);
      });
    });
}
