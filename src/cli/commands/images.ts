// Images: pull, import, list, remove, through the server of the data directory (its owner's, or
// one the command starts for itself: context.ts).
import { spawn } from "node:child_process";
import { createReadStream, statSync } from "node:fs";
import { Readable } from "node:stream";
import type { Command } from "commander";
import type { Cli } from "../context.js";
import { emit, mib, progress, table } from "../output.js";

interface Summary {
  name: string;
  digest?: string;
  size: number;
  layers?: number;
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
        const server = await cli.dataDirClient();
        const job = await server.images.pull(ref, { onProgress: progress });
        const info = (await server.images.list()).find((i) => i.name === job.image);
        const img: Summary = { name: job.image, digest: job.digest, size: info?.size ?? 0, layers: info?.layers };
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
      const server = await cli.dataDirClient();
      const info = await server.images.import(Readable.toWeb(archiveStream(path)) as ReadableStream<Uint8Array>, opts);
      const img: Summary = { name: info.name, digest: info.digest, size: info.size, layers: info.layers };
      emit(o.json, img, () => console.log(summary(img, performance.now() - t0)));
    });

  program
    .command("image")
    .description("built-in images: forgevm image system debian-12 (or desktop) builds a system image (systemd as init) from Debian's archive")
    .command("system")
    .description("build system images, booted by systemd (docs/system-images.md): debian-12 (sshd, journald), desktop (an XFCE desktop with Firefox, docs/desktop.md)")
    .argument("<name...>", "which: debian-12, desktop (several share one debootstrap)")
    .option("--json", "print JSON")
    .action(async (shorts: string[], o: { json?: boolean }) => {
      const { pathsFor } = await import("../../config/paths.js");
      const { ensureSystemImages } = await import("../../setup/base-image.js");
      const paths = pathsFor(await cli.dataDir());
      const names = await ensureSystemImages(paths, shorts, (m) => (o.json ? undefined : console.log(m)));
      emit(o.json, names.length === 1 ? { name: names[0] } : { names }, () => {
        for (const name of names) console.log(`${name}: forgevm run ${name} …, or any spawn of it, boots systemd`);
      });
    });

  program
    .command("rmi")
    .description("remove local images (refused while a sandbox or a kept snapshot uses one) and prune unused blobs")
    .argument("<name...>", "image names")
    .option("--json", "print JSON")
    .action(async (names: string[], o: { json?: boolean }) => {
      const server = await cli.dataDirClient();
      let pruned = 0;
      for (const n of names) {
        pruned += (await server.images.remove(n)).pruned_blobs;
        if (!o.json) console.log(`removed ${n}`);
      }
      emit(o.json, { removed: names, pruned_blobs: pruned }, () => pruned && console.log(`pruned ${pruned} unused blobs`));
    });

  program
    .command("images")
    .description("list local images")
    .option("--json", "print JSON")
    .action(async (o: { json?: boolean }) => {
      const rows = await (await cli.dataDirClient()).images.list();
      emit(o.json, rows, () =>
        table(
          ["NAME", "DIGEST", "SIZE", "CREATED", "IN USE"],
          rows.map((i) => [i.name, i.digest?.slice(0, 19) ?? "-", mib(i.size), i.created_at, i.in_use ? "yes" : "no"]),
          "no images",
        ),
      );
    });
}
