// What a VMM process costs the host, from /proc: CPU time, resident and proportional memory,
// block I/O. Read by the metrics sampler every few seconds, so each read is a few small files.
import { readFile } from "node:fs/promises";
import type { VmUsage } from "./provider.js";

/** Linux's USER_HZ: /proc reports CPU time in these ticks on every architecture we run on. */
const TICKS_PER_SECOND = 100;

/** One process's usage, or null when it is gone. */
export async function processUsage(pid: number): Promise<VmUsage | null> {
  const [stat, status, rollup, io] = await Promise.all(["stat", "status", "smaps_rollup", "io"].map((f) => readFile(`/proc/${pid}/${f}`, "utf8").catch(() => null)));
  if (!stat || !status) return null;
  // Fields after the command name, which may hold spaces and parentheses: utime and stime are 14 and 15.
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  const ticks = Number(fields[11]) + Number(fields[12]);
  const kb = (text: string | null, key: string) => Number(new RegExp(`^${key}:\\s+(\\d+)`, "m").exec(text ?? "")?.[1] ?? 0) * 1024;
  const num = (key: string) => Number(new RegExp(`^${key}:\\s+(\\d+)`, "m").exec(io ?? "")?.[1] ?? 0);
  const rssBytes = kb(status, "VmRSS");
  return {
    cpuMs: Math.round((ticks * 1000) / TICKS_PER_SECOND),
    rssBytes,
    pssBytes: rollup ? kb(rollup, "Pss") : rssBytes,
    diskReadBytes: num("read_bytes"),
    diskWriteBytes: num("write_bytes"),
  };
}
