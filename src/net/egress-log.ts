// Per-sandbox egress decision logs: one JSON object per line in <dir>/<sandbox>.jsonl, appended
// in order. A log stops growing at MAX_LOG_BYTES (with one last line saying so), so a guest
// hammering the proxy cannot fill the host's disk.
import { appendFileSync, mkdirSync, statSync } from "node:fs";
import { readFile, rm, stat } from "node:fs/promises";
import { join } from "node:path";

export const MAX_LOG_BYTES = 8 * 1024 * 1024;

export interface EgressEntry {
  ts: string;
  method: string;
  host: string;
  port: number;
  decision: "allow" | "deny";
  /** Why: "allowed", or what made the request refused. */
  reason: string;
  /** The allowlist entry that allowed it. */
  rule?: string;
  /** The address connected to (after resolution and checks). */
  address?: string;
  /** An allowed request whose upstream connection failed. */
  error?: string;
  /** A package file answered from the package cache (hit) or fetched and kept (miss). */
  cache?: "hit" | "miss";
  /** The egress rule (its destination key) whose headers were added; never a header's value. */
  injected?: string;
  /** Its headers' names, as added. */
  headers?: string[];
}

export class EgressLog {
  private readonly sizes = new Map<string, number>();
  private made = false;

  constructor(private readonly dir: string) {}

  private file(id: string): string {
    if (!/^[A-Za-z0-9_-]+$/.test(id)) throw new RangeError(`bad sandbox id "${id}"`);
    return join(this.dir, `${id}.jsonl`);
  }

  /** Appends one decision (synchronously, so lines of one sandbox never interleave or reorder). */
  append(id: string, entry: EgressEntry): void {
    // a log written before a restart counts toward the cap too
    let size = this.sizes.get(id) ?? statSizeSync(this.file(id)) ?? 0;
    if (size >= MAX_LOG_BYTES) return;
    let line = `${JSON.stringify(entry)}\n`;
    if (size + line.length >= MAX_LOG_BYTES) line = `${JSON.stringify({ ts: entry.ts, note: "log full: later decisions are not recorded" })}\n`;
    if (!this.made) {
      mkdirSync(this.dir, { recursive: true, mode: 0o700 });
      this.made = true;
    }
    try {
      appendFileSync(this.file(id), line, { mode: 0o600 });
      size += Buffer.byteLength(line);
    } catch {
      size = MAX_LOG_BYTES; // unwritable: stop trying
    }
    this.sizes.set(id, line.includes('"note"') ? MAX_LOG_BYTES : size);
  }

  /** The last `lines` entries, oldest first. */
  async tail(id: string, lines: number): Promise<EgressEntry[]> {
    const text = await readFile(this.file(id), "utf8").catch(() => "");
    return text
      .split("\n")
      .filter((l) => l)
      .slice(-lines)
      .map((l) => JSON.parse(l) as EgressEntry);
  }

  /** Size of a sandbox's log on disk (0 when it has none). */
  async bytes(id: string): Promise<number> {
    return (await stat(this.file(id)).catch(() => null))?.size ?? 0;
  }

  async remove(id: string): Promise<void> {
    this.sizes.delete(id);
    await rm(this.file(id), { force: true });
  }

  close(): void {
    this.sizes.clear();
  }
}

function statSizeSync(file: string): number | null {
  try {
    return statSync(file).size;
  } catch {
    return null;
  }
}
