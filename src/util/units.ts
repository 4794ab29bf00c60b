// Sizes for people, the same in the CLI's tables, the terminal dashboard and the web console.

/** Bytes in the largest binary unit that keeps the number short: "512 MiB", "1.2 GiB"; "–" for none. */
export function bytes(n: number | null | undefined): string {
  if (n === null || n === undefined || Number.isNaN(n)) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = n;
  let u = 0;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u++;
  }
  return `${v >= 100 || u === 0 ? Math.round(v) : v.toFixed(1)} ${units[u]}`;
}
