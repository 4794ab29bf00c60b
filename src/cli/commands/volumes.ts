// `forgevm volume create|ls|inspect|rm`: named volumes, through the server of the data directory
// (its owner's, or one this command starts: context.ts).
import { resolve } from "node:path";
import type { Command } from "commander";
import type { VolumeInfo } from "forgevm";
import type { Cli } from "../context.js";
import { emit, mib, table } from "../output.js";

/** "512m", "2g", "1024" (MiB) → MiB. */
export function sizeMb(text: string): number {
  const m = /^(\d+(?:\.\d+)?)\s*([mgt]i?b?)?$/i.exec(text.trim());
  if (!m) throw new Error(`--size must be a size like 512m, 2g or 1024 (MiB), got "${text}"`);
  const unit = (m[2] ?? "m")[0].toLowerCase();
  return Math.round(Number(m[1]) * (unit === "t" ? 1048576 : unit === "g" ? 1024 : 1));
}

export function volumeCommands(program: Command, cli: Cli): void {
  const volume = program.command("volume").description("named volumes: data that outlives sandboxes (mount with -v NAME:/path[:ro])");
  const through = async <T>(call: (c: import("forgevm").Client) => Promise<T>) => call(await cli.dataDirClient());

  volume
    .command("create")
    .description("create an empty volume")
    .argument("<name>", "volume name")
    .option("-s, --size <size>", "its size, e.g. 512m or 10g (default 1g); the file is sparse")
    .option("--json", "print JSON")
    .action(async (name: string, o: { size?: string; json?: boolean }) => {
      const size = o.size ? sizeMb(o.size) : undefined;
      const v = await through<VolumeInfo>((c) => c.volumes.create(name, { size_mb: size }));
      emit(o.json, v, () => console.log(v.name));
    });

  volume
    .command("ls")
    .alias("list")
    .description("list volumes and the sandboxes that mount them")
    .option("--json", "print JSON")
    .action(async (o: { json?: boolean }) => {
      const list = await through<VolumeInfo[]>((c) => c.volumes.list());
      emit(o.json, list, () =>
        table(
          ["NAME", "SIZE", "USED", "MOUNTED BY"],
          list.map((v) => [v.name, mib(v.size_mb * 1048576), mib(v.used_bytes), v.mounted_by.map((m) => `${m.sandbox}:${m.path}${m.read_only ? ":ro" : ""}`).join(", ") || "-"]),
          "no volumes",
        ),
      );
    });

  volume
    .command("inspect")
    .description("everything about a volume (as JSON, as the REST API answers)")
    .argument("<name>", "volume name")
    .option("--json", "print JSON (what it prints anyway: accepted as every show command takes it)")
    .action(async (name: string) => {
      const v = await through<VolumeInfo>((c) => c.volumes.get(name));
      console.log(JSON.stringify(v, null, 2));
    });

  program
    .command("mount")
    .description("mount a host directory (inside the server's mounts.host_dirs) into a running sandbox, live")
    .argument("<sandbox>", "sandbox id or name")
    .argument("<host-dir>", "the host directory")
    .argument("<path>", "where it appears in the guest")
    .option("--ro", "read-only")
    .action(async (id: string, host: string, path: string, o: { ro?: boolean }) => {
      const list = await (await cli.client()).mount(id, resolve(host), path, { readOnly: o.ro });
      for (const m of list) console.log(`${m.host} on ${m.path}${m.read_only ? " (read-only)" : ""}`);
    });

  program
    .command("unmount")
    .alias("umount")
    .description("unmount a host directory from a running sandbox")
    .argument("<sandbox>", "sandbox id or name")
    .argument("<path>", "where it is mounted in the guest")
    .action(async (id: string, path: string) => {
      await (await cli.client()).unmount(id, path);
    });

  volume
    .command("rm")
    .alias("remove")
    .description("delete volumes and their data (refused while a sandbox mounts one)")
    .argument("<name...>", "volume names")
    .action(async (names: string[]) => {
      for (const n of names) {
        await through((c) => c.volumes.remove(n));
        console.log(n);
      }
    });
}
