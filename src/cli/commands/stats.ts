// `forgevm stats [ID…]`: a live table of what each running sandbox uses (as `docker stats`), from
// the server's sampler: host side (the VMM's CPU and memory, host disk I/O) and guest side
// (memory in use of its total, network, processes).
import type { Command } from "commander";
import type { LiveStats, MetricSample } from "forgevm";
import type { Cli } from "../context.js";
import { emit, table } from "../output.js";
import { bytes } from "../../util/units.js";

const pct = (v: number | null | undefined) => (v === null || v === undefined ? "-" : `${v.toFixed(1)}%`);
const rate = (a: number | null | undefined, b: number | null | undefined) => `${bytes(a)}/s / ${bytes(b)}/s`;

/** One row of the table. */
export function statsRow(id: string, name: string | null, s: MetricSample): string[] {
  const mem = s.mem_used_bytes !== null && s.mem_used_bytes !== undefined ? `${bytes(s.mem_used_bytes)} / ${bytes(s.mem_total_bytes)}` : "-";
  const memPct = s.mem_used_bytes && s.mem_total_bytes ? pct((s.mem_used_bytes / s.mem_total_bytes) * 100) : "-";
  return [id, name ?? "-", pct(s.cpu_pct), mem, memPct, bytes(s.rss_bytes), rate(s.net_rx_bps, s.net_tx_bps), rate(s.disk_read_bps, s.disk_write_bps), String(s.processes ?? "-")];
}

const HEADER = ["ID", "NAME", "CPU %", "MEM USAGE / LIMIT", "MEM %", "HOST RSS", "NET I/O", "DISK I/O", "PIDS"];

function render(stats: LiveStats, only: string[]): void {
  const rows = stats.sandboxes.filter((s) => !only.length || only.includes(s.id) || (s.name !== null && only.includes(s.name)));
  table(
    HEADER,
    rows.map((s) => statsRow(s.id, s.name, s.sample)),
    only.length ? "none of those sandboxes is running" : "no running sandboxes",
  );
}

export function statsCommands(program: Command, cli: Cli): void {
  program
    .command("stats")
    .description("live CPU, memory, network and disk of running sandboxes (Ctrl-C ends)")
    .argument("[ids...]", "sandbox ids or names (default: all)")
    .option("--no-stream", "print one table and exit")
    .option("--json", "print the newest samples as JSON and exit")
    .action(async (ids: string[], o: { stream: boolean; json?: boolean }) => {
      const client = await cli.client();
      const first = await client.stats();
      if (o.json || !o.stream) return emit(o.json, first, () => render(first, ids));
      const tty = process.stdout.isTTY;
      for (let stats = first; ; stats = await client.stats()) {
        if (tty) process.stdout.write("\x1b[H\x1b[2J");
        render(stats, ids);
        if (!tty) console.log("");
        await new Promise((r) => setTimeout(r, Math.max(1000, stats.interval_ms)));
      }
    });
}
