// Images: pull, import, list, remove. Through the server that owns the data directory when one
// does; otherwise the core does the work here, on the data directory itself.
import { spawn } from "node:child_process";
import { createReadStream, statSync } from "node:fs";
import { Readable } from "node:stream";
import type { Command } from "commander";
import type { Cli } from "../context.js";
import { emit, mib, progress, table } from "../output.js";

/** One progress bar per layer being downloaded, redrawn in place on a terminal. */
function layerBar(layer: { index: number; count: number; digest: string; size: number }, received: number): void {
  if (!process.stderr.isTTY) return;
  const width = 30;
  const frac = layer.size ? Math.min(1, received / layer.size) : 1;
  const bar = "#".repeat(Math.round(frac * width)).padEnd(width, " ");
  const m = (n: number) => (n / 1048576).toFixed(1);
  process.stderr.write(`\r\x1b[K  layer ${layer.index + 1}/${layer.count} ${layer.digest.slice(7, 19)} [${bar}] ${Math.round(frac * 100)}% ${m(received)}/${m(layer.size)} MiB`);
}

interface Summary {
  name: string;
  digest?: string;
  size: number;
  layers?: number;
}

/** The summary of an image the core stored here, without a server. */
function localSummary(i: { name: string; digest?: string; size: number; layers?: unknown[] }): Summary {
  return { name: i.name, digest: i.digest, size: i.size, layers: i.layers?.length };
}

function summary(i: Summary, ms: number) {
  return `${i.name}\n  digest ${i.digest ?? "-"}\n  ${i.layers ?? "?"} layers, rootfs ${mib(i.size)}, ${(ms / 1000).toFixed(1)} s`;
}

/** A directory (an OCI layout) as a tar stream; an archive file as it is. */
function archiveStream(path: string): Readable {
  if (!statSync(path).isDirectory()) return createReadStream(path);
  const tar = spawn("tar", ["-C", path, "-cf", "-", "."], { stdio: ["ignore", "pipe", "inherit"] });
  return tar.stdout;
}

export function imageCommands(program: Command, cli: Cli): void {
  for (const name of ["pull", "build-image"]) {
    program
      .command(name)
      .description(
        name === "pull" ? "pull an image from its registry (e.g. alpine:latest, ghcr.io/org/app@sha256:…)" : "pull an image and build its root filesystem (same as pull)",
      )
      .argument("<ref>", "image reference")
      .option("--json", "print JSON")
      .action(async (ref: string, o: { json?: boolean }) => {
        const t0 = performance.now();
        const server = await cli.serverIfAny();
        let img: Summary;
        if (server) {
          const job = await server.images.pull(ref, { onProgress: progress });
          const info = (await server.images.list()).find((i) => i.name === job.image);
          img = { name: job.image, digest: job.digest, size: info?.size ?? 0 };
        } else {
          img = localSummary(await cli.withLocalForge((forge) => forge.images.pull(ref, progress, layerBar)));
        }
        emit(o.json, img, () => console.log(summary(img, performance.now() - t0)));
      });
  }

  program
    .command("import")
    .description("import an image from an OCI layout directory, an OCI archive, or a docker save / skopeo docker-archive tarball")
    .argument("<path>", "OCI layout directory or archive file")
    .argument("[name]", "name (and :tag) to store it under; a docker save tarball carries its own")
    .option("--name <name>", "name to store it under (same as the argument)")
    .option("--tag <tag>", "tag of the stored image (replaces the name's own)")
    .option("--ref <ref>", "which image of several in the source (a tag or ref name)")
    .option("--json", "print JSON")
    .action(async (path: string, positional: string | undefined, o: { name?: string; tag?: string; ref?: string; json?: boolean }) => {
      const t0 = performance.now();
      const opts = { name: o.name ?? positional, tag: o.tag, ref: o.ref };
      const server = await cli.serverIfAny();
      let img: Summary;
      if (server) {
        const info = await server.images.import(Readable.toWeb(archiveStream(path)) as ReadableStream<Uint8Array>, opts);
        img = { name: info.name, digest: info.digest, size: info.size };
      } else {
        img = localSummary(await cli.withLocalForge((forge) => forge.images.import(path, { ...opts, log: progress })));
      }
      emit(o.json, img, () => console.log(summary(img, performance.now() - t0)));
    });

  program
    .command("rmi")
    .description("remove local images (refused while a sandbox or a kept snapshot uses one) and prune unused blobs")
    .argument("<name...>", "image names")
    .option("--json", "print JSON")
    .action(async (names: string[], o: { json?: boolean }) => {
      const server = await cli.serverIfAny();
      let pruned = 0;
      const remove = async (fn: (n: string) => Promise<number>) => {
        for (const n of names) {
          pruned += await fn(n);
          if (!o.json) console.log(`removed ${n}`);
        }
      };
      if (server) await remove(async (n) => (await server.images.remove(n)).pruned_blobs);
      else {
        await cli.withLocalForge(async (forge) => {
          await remove(async (n) => {
            await forge.images.remove(n);
            return 0; // blobs are pruned once, below
          });
          pruned = await forge.images.pruneBlobs();
        });
      }
      emit(o.json, { removed: names, pruned_blobs: pruned }, () => pruned && console.log(`pruned ${pruned} unused blobs`));
    });

  program
    .command("images")
    .description("list local images")
    .option("--json", "print JSON")
    .action(async (o: { json?: boolean }) => {
      const server = await cli.serverIfAny();
      const rows = server
        ? await server.images.list()
        : (await cli.withLocalForge((forge) => forge.images.list())).map(({ inUse, createdAt, layers: _l, ...m }) => ({ ...m, created_at: createdAt, in_use: inUse }));
      emit(o.json, rows, () =>
        table(
          ["NAME", "DIGEST", "SIZE", "CREATED", "IN USE"],
          rows.map((i) => [i.name, i.digest?.slice(0, 19) ?? "-", mib(i.size), i.created_at, i.in_use ? "yes" : "no"]),
          "no images",
        ),
      );
    });
}
