// Docker's `commit --change` instructions ("CMD ["app"]", "ENV K=V", "EXPOSE 80"…) turned into
// the API's image changes; anything else is refused with the instructions that are understood.
import type { ImageChanges } from "forgevm";

const SUPPORTED = "CMD, ENTRYPOINT, ENV, WORKDIR, USER, EXPOSE, LABEL";

/** An argv from JSON form (["a","b"]) or shell form (run by /bin/sh -c). */
function argv(rest: string, what: string): string[] {
  if (rest.startsWith("[")) {
    let v: unknown;
    try {
      v = JSON.parse(rest);
    } catch {
      throw new Error(`${what}: ${rest} is not a JSON array of strings`);
    }
    if (!Array.isArray(v) || !v.length || !v.every((x) => typeof x === "string")) throw new Error(`${what}: ${rest} is not a JSON array of strings`);
    return v;
  }
  return ["/bin/sh", "-c", rest];
}

/** key=value pairs (values may be quoted), or the old "KEY value" form for one pair. */
function pairs(rest: string, what: string): [string, string][] {
  if (!rest.includes("=")) {
    const m = /^(\S+)\s+(.*)$/.exec(rest);
    if (!m) throw new Error(`${what} needs KEY=VALUE, got "${rest}"`);
    return [[m[1], m[2]]];
  }
  const out: [string, string][] = [];
  const re = /([^\s=]+)=("((?:[^"\\]|\\.)*)"|'([^']*)'|(\S*))/g;
  let m: RegExpExecArray | null;
  while ((m = re.exec(rest))) out.push([m[1], m[3] !== undefined ? m[3].replace(/\\(.)/g, "$1") : (m[4] ?? m[5] ?? "")]);
  if (!out.length) throw new Error(`${what} needs KEY=VALUE, got "${rest}"`);
  return out;
}

/** Folds one `--change` instruction into `into`. */
export function applyChange(into: ImageChanges, line: string): ImageChanges {
  const m = /^\s*(\w+)\s+([\s\S]*\S)\s*$/.exec(line);
  if (!m) throw new Error(`--change "${line}": expected an instruction and its value (${SUPPORTED})`);
  const [, word, rest] = m;
  switch (word.toUpperCase()) {
    case "CMD":
      into.cmd = argv(rest, "CMD");
      break;
    case "ENTRYPOINT":
      into.entrypoint = argv(rest, "ENTRYPOINT");
      break;
    case "ENV":
      into.env = { ...into.env, ...Object.fromEntries(pairs(rest, "ENV")) };
      break;
    case "LABEL":
      into.labels = { ...into.labels, ...Object.fromEntries(pairs(rest, "LABEL")) };
      break;
    case "WORKDIR":
      if (!rest.startsWith("/")) throw new Error(`WORKDIR must be an absolute path, got "${rest}"`);
      into.workdir = rest;
      break;
    case "USER":
      into.user = rest;
      break;
    case "EXPOSE":
      into.expose = [...(into.expose ?? []), ...rest.split(/\s+/)];
      break;
    default:
      throw new Error(`--change "${line}": ${word} cannot be changed by a commit (these can: ${SUPPORTED})`);
  }
  return into;
}
