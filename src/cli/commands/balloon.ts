// `forgevm balloon ID [SIZE]`: how much of its memory a running sandbox may use, shown or changed
// without a restart (the REST API's /sandboxes/{id}/balloon).
import { type Command, InvalidArgumentError } from "commander";
import type { Cli } from "../context.js";
import { emit } from "../output.js";

/** "256", "256m", "256MiB", "1g": a size in MiB. */
function sizeMb(v: string): number {
  const m = /^(\d+)\s*(m|mb|mib|g|gb|gib)?$/i.exec(v.trim());
  if (!m) throw new InvalidArgumentError(`SIZE must be MiB or a size like 256m or 1g (got "${v}")`);
  return Number(m[1]) * (/^g/i.test(m[2] ?? "") ? 1024 : 1);
}

export function balloonCommands(program: Command, cli: Cli): void {
  program
    .command("balloon")
    .description("show how much of its memory a running sandbox may use, or set it (SIZE, e.g. 256m) without a restart: the rest goes back to the host")
    .argument("<id>", "sandbox id or name")
    .argument("[size]", "the memory to leave it (at most what it was given)", sizeMb)
    .option("--json", "print JSON")
    .action(async (id: string, size: number | undefined, o: { json?: boolean }) => {
      const b = await (await cli.client()).balloon(id, size);
      emit(o.json, b, () =>
        console.log(`${id}: ${b.actual_mb} MiB of the ${b.memory_mb} MiB it was given; the guest counts ${b.guest_total_mb} MiB, ${b.guest_available_mb} MiB available`),
      );
    });
}
