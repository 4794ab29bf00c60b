// What the CLI prints: tables for people, JSON (--json) for programs, progress on stderr.

/** Prints `value` as JSON when asked, else runs `human`. */
export function emit(json: boolean | undefined, value: unknown, human: () => void): void {
  if (json) console.log(JSON.stringify(value, null, 2));
  else human();
}

/** A table with a header row, its columns lined up as `docker ps` lines them up (`--json` is for programs). */
export function table(header: string[], rows: (string | number)[][], empty = "nothing to show"): void {
  if (!rows.length) {
    console.log(empty);
    return;
  }
  const all = [header, ...rows].map((r) => r.map(String));
  const widths = header.map((_, i) => Math.max(...all.map((r) => [...(r[i] ?? "")].length)));
  for (const r of all) console.log(r.map((cell, i) => (i === r.length - 1 ? cell : cell.padEnd(widths[i] + (cell.length - [...cell].length)))).join("   "));
}

/** A progress line on stderr (on a terminal it replaces a bar drawn in place). */
export function progress(m: string): void {
  if (process.stderr.isTTY) process.stderr.write("\r\x1b[K");
  console.error(`  ${m}`);
}

export const mib = (bytes: number) => `${(bytes / 1048576).toFixed(0)} MiB`;
