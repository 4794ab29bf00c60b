// Snapshots, forks and restores.
import { createReadStream, createWriteStream } from "node:fs";
import { rename } from "node:fs/promises";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import type { Command } from "commander";
import type { SnapshotInfo } from "forgevm";
import type { Cli } from "../context.js";
import { intOption, ttlOption } from "../options.js";
import { emit, table } from "../output.js";

export function copyCommands(program: Command, cli: Cli): void {
  program
    .command("snapshot")
    .description(
      "snapshot a running sandbox (memory, processes and disk); it keeps running. `snapshot export SNAPSHOT -o FILE` and `snapshot import FILE [--name N]` move one to another host",
    )
    .argument("<id>", "sandbox id (or export / import)")
    .argument("[name]", "name to restore it by (the snapshot to export; the archive to import)")
    .option("-o, --output <file>", "export: the archive to write")
    .option("--name <name>", "import: the name the snapshot gets here (default: the one it carries)")
    .option("--json", "print JSON")
    .action(async (id: string, name: string | undefined, o: { json?: boolean; output?: string; name?: string }) => {
      const client = await cli.client();
      if (id === "export" || id === "import") {
        if (!name) throw new Error(id === "export" ? "snapshot export SNAPSHOT -o FILE: name the snapshot" : "snapshot import FILE: name the archive");
        if (id === "export") {
          if (!o.output) throw new Error("snapshot export: give the archive to write with -o FILE");
          const tmp = `${o.output}.part`;
          await pipeline(Readable.fromWeb((await client.exportSnapshot(name)) as import("node:stream/web").ReadableStream), createWriteStream(tmp));
          await rename(tmp, o.output);
          return emit(o.json, { snapshot: name, file: o.output }, () => console.log(o.output));
        }
        const snap = await client.importSnapshot(Readable.toWeb(createReadStream(name)) as ReadableStream<Uint8Array>, { name: o.name });
        return emit(o.json, snap, () => console.log(snap.id));
      }
      const snap = await (await client.get(id)).snapshot(name);
      emit(o.json, snap, () => console.log(snap.id));
    });

  program
    .command("snapshots")
    .description("list snapshots, or show one")
    .argument("[snapshot]", "id or name of one snapshot to show")
    .option("--json", "print JSON")
    .action(async (one: string | undefined, o: { json?: boolean }) => {
      const client = await cli.client();
      if (one) return console.log(JSON.stringify(await client.snapshot(one), null, 2));
      const list = await client.snapshots();
      const row = (s: SnapshotInfo) => [s.id, s.name ?? "-", s.kind, s.image, `${s.memory_mb}M`, `${Math.round(s.size_bytes / 1048576)}M`, s.source_id ?? "-", s.created_at];
      emit(o.json, list, () => table(["ID", "NAME", "KIND", "IMAGE", "MEM", "SIZE", "FROM", "CREATED"], list.map(row), "no snapshots"));
    });

  program
    .command("snapshot-rm")
    .description("delete snapshots (files stay until no sandbox restored from them runs)")
    .argument("<snapshot...>", "snapshot ids or names")
    .option("--json", "print JSON")
    .action(async (ids: string[], o: { json?: boolean }) => {
      const client = await cli.client();
      for (const id of ids) {
        await client.deleteSnapshot(id);
        if (!o.json) console.log(`deleted ${id}`);
      }
      if (o.json) console.log(JSON.stringify({ deleted: ids }));
    });

  for (const [name, what] of [
    ["fork", "make running copies of a sandbox as it is now"],
    ["restore", "start sandboxes from a snapshot"],
  ] as const) {
    program
      .command(name)
      .description(what)
      .argument("<id>", name === "fork" ? "sandbox id" : "snapshot id or name")
      .option("-n, --count <n>", "how many copies", intOption("--count", 1, 32), 1)
      .option("--ttl <duration>", "lifetime of each copy, e.g. 30m", ttlOption("--ttl"))
      .option("--forkable", "each copy keeps its RAM in a file of its own, to be forked fast in turn (copies otherwise share their pages)")
      .option("--json", "print JSON")
      .action(async (id: string, o: { count: number; ttl?: string; forkable?: boolean; json?: boolean }) => {
        const client = await cli.client();
        const opts = { count: o.count, ttl: o.ttl, forkable: o.forkable };
        const copies = name === "fork" ? await client.fork(id, opts) : { sandboxes: (await client.restore(id, opts)).map((s) => s.info) };
        emit(o.json, copies, () => {
          for (const s of copies.sandboxes) console.log(s.id);
          if ("pause_ms" in copies) console.error(`parent paused ${copies.pause_ms} ms`);
        });
      });
  }
}
