// Dockerfiles, parsed: line continuations, comments, JSON and shell forms, build arguments and
// variable substitution (${VAR}, ${VAR:-default}, ${VAR:+alt}), stages (FROM … AS name). The
// instructions a build supports are FROM, RUN, COPY, ADD, ENV, ARG, WORKDIR, USER, ENTRYPOINT,
// CMD, EXPOSE, LABEL and SHELL; VOLUME, STOPSIGNAL and HEALTHCHECK are recorded in the image's
// config as Docker records them (a stop sends STOPSIGNAL first; the main process's HEALTHCHECK runs, core/sandboxes/health.ts),
// MAINTAINER is its label, ONBUILD is left out with a warning; anything else is an error that
// names its line.

export class DockerfileError extends Error {
  override name = "DockerfileError";
  constructor(
    message: string,
    readonly line?: number,
  ) {
    super(line ? `Dockerfile line ${line}: ${message}` : `Dockerfile: ${message}`);
  }
}

export type Instruction =
  | { op: "RUN"; line: number; text: string; argv: string[] | null; command: string }
  | { op: "COPY" | "ADD"; line: number; text: string; sources: string[]; dest: string; from?: string; chown?: string; chmod?: number }
  | { op: "ENV" | "LABEL"; line: number; text: string; pairs: [string, string][] }
  | { op: "ARG"; line: number; text: string; name: string; value?: string }
  | { op: "WORKDIR" | "USER"; line: number; text: string; value: string }
  | { op: "CMD" | "ENTRYPOINT"; line: number; text: string; argv: string[] | null; command: string }
  | { op: "SHELL"; line: number; text: string; argv: string[] }
  | { op: "EXPOSE"; line: number; text: string; ports: string[] }
  | { op: "VOLUME"; line: number; text: string; paths: string[] }
  | { op: "STOPSIGNAL"; line: number; text: string; signal: string }
  | { op: "HEALTHCHECK"; line: number; text: string; healthcheck: Record<string, unknown> }
  /** Read and kept out of the image, with a warning: ONBUILD (a trigger for images built FROM this one). */
  | { op: "IGNORED"; line: number; text: string; warning: string };

export interface Stage {
  /** FROM's image, variables substituted ("scratch" for none). */
  from: string;
  name?: string;
  index: number;
  line: number;
  steps: Instruction[];
}

export interface Dockerfile {
  stages: Stage[];
  /** ARGs declared before the first FROM, with their defaults (usable in FROM lines). */
  globalArgs: Map<string, string | undefined>;
}

const SUPPORTED = [
  "FROM",
  "RUN",
  "COPY",
  "ADD",
  "ENV",
  "ARG",
  "WORKDIR",
  "USER",
  "ENTRYPOINT",
  "CMD",
  "EXPOSE",
  "LABEL",
  "SHELL",
  "VOLUME",
  "STOPSIGNAL",
  "HEALTHCHECK",
  "MAINTAINER",
  "ONBUILD",
];

/** A Docker duration ("30s", "1m30s", "500ms") in nanoseconds, as an image config keeps it. */
function durationNs(text: string, line: number, flag: string): number {
  const parts = [...text.matchAll(/(\d+(?:\.\d+)?)(ms|s|m|h)/g)];
  if (!parts.length || parts.map((p) => p[0]).join("") !== text) throw new DockerfileError(`HEALTHCHECK --${flag}: "${text}" is not a duration like 30s or 1m30s`, line);
  const unit = { ms: 1e6, s: 1e9, m: 60e9, h: 3600e9 } as const;
  return Math.round(parts.reduce((n, p) => n + Number(p[1]) * unit[p[2] as keyof typeof unit], 0));
}

/** HEALTHCHECK [--interval=… --timeout=… --start-period=… --retries=N] CMD … | NONE, as Docker records it. */
function healthcheckOf(rest: string, line: number): Record<string, unknown> {
  let after = rest;
  const hc: Record<string, unknown> = {};
  for (let m = /^--([a-z-]+)=(\S+)\s*/.exec(after); m; m = /^--([a-z-]+)=(\S+)\s*/.exec(after)) {
    after = after.slice(m[0].length);
    const key = { interval: "Interval", timeout: "Timeout", "start-period": "StartPeriod", "start-interval": "StartInterval", retries: "Retries" }[m[1]];
    if (!key) throw new DockerfileError(`HEALTHCHECK --${m[1]} is not an option (--interval, --timeout, --start-period, --start-interval, --retries are)`, line);
    if (key === "Retries") {
      if (!/^\d{1,4}$/.test(m[2])) throw new DockerfileError(`HEALTHCHECK --retries must be a number, got ${m[2]}`, line);
      hc.Retries = Number(m[2]);
    } else hc[key] = durationNs(m[2], line, m[1]);
  }
  if (/^NONE$/i.test(after)) return { Test: ["NONE"] };
  const cmd = /^CMD\s+([\s\S]+)$/i.exec(after);
  if (!cmd) throw new DockerfileError("HEALTHCHECK needs CMD <command> or NONE", line);
  const argv = jsonForm(cmd[1], line, "HEALTHCHECK CMD");
  return { Test: argv ? ["CMD", ...argv] : ["CMD-SHELL", cmd[1]], ...hc };
}

/** Logical lines: continuations joined, comments and blank lines dropped, each with its first line number. */
function logicalLines(text: string): { line: number; text: string }[] {
  const out: { line: number; text: string }[] = [];
  const raw = text.replace(/\r\n/g, "\n").split("\n");
  let cur: string | null = null;
  let start = 0;
  for (let i = 0; i < raw.length; i++) {
    const l = raw[i];
    const trimmed = l.trim();
    if (trimmed.startsWith("#") || (cur !== null && trimmed === "")) {
      continue; // comments (and blank lines inside a continuation) are skipped
    }
    if (cur === null) {
      if (trimmed === "") continue;
      cur = "";
      start = i + 1;
    }
    if (/\\\s*$/.test(l)) {
      cur += `${l.replace(/\\\s*$/, "")} `;
      continue;
    }
    cur += l;
    out.push({ line: start, text: cur.trim() });
    cur = null;
  }
  if (cur?.trim()) out.push({ line: start, text: cur.trim() });
  return out;
}

/** The JSON (exec) form of an argument list, or null for the shell form. */
function jsonForm(rest: string, line: number, what: string): string[] | null {
  if (!rest.startsWith("[")) return null;
  let v: unknown;
  try {
    v = JSON.parse(rest);
  } catch {
    return null; // Docker treats malformed JSON as the shell form
  }
  if (!Array.isArray(v) || !v.every((x) => typeof x === "string")) throw new DockerfileError(`${what} needs a JSON array of strings`, line);
  return v;
}

/** Substitutes $VAR, ${VAR}, ${VAR:-default} and ${VAR:+alt}; `\$` stays a dollar. */
export function substitute(text: string, vars: Map<string, string>, line?: number): string {
  return text.replace(/\\\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::([-+])([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)|\$\{[^}]*\}?/g, (m, braced, mod, word, bare) => {
    if (m === "\\$") return "$";
    const name = braced ?? bare;
    if (!name) throw new DockerfileError(`bad substitution "${m}"`, line);
    const v = vars.get(name);
    if (mod === "-") return v ? v : substitute(word, vars, line);
    if (mod === "+") return v ? substitute(word, vars, line) : "";
    return v ?? "";
  });
}

/** Words of a line, honouring quotes and backslashes (for COPY, EXPOSE, ENV and LABEL pairs). */
export function words(text: string): string[] {
  const out: string[] = [];
  let cur = "";
  let inWord = false;
  let quote: string | null = null;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (quote) {
      if (c === quote) quote = null;
      else if (c === "\\" && quote === '"' && i + 1 < text.length) cur += text[++i];
      else cur += c;
      continue;
    }
    if (c === '"' || c === "'") {
      quote = c;
      inWord = true;
    } else if (c === "\\" && i + 1 < text.length) {
      cur += text[++i];
      inWord = true;
    } else if (/\s/.test(c)) {
      if (inWord) out.push(cur);
      cur = "";
      inWord = false;
    } else {
      cur += c;
      inWord = true;
    }
  }
  if (quote) throw new DockerfileError(`unterminated quote in "${text}"`);
  if (inWord) out.push(cur);
  return out;
}

function pairs(rest: string, line: number, what: string): [string, string][] {
  const w = words(rest);
  if (!w.length) throw new DockerfileError(`${what} needs KEY=VALUE`, line);
  if (!w[0].includes("=")) {
    // the old form: ENV KEY value with spaces
    const m = /^(\S+)\s+([\s\S]*)$/.exec(rest);
    if (!m) throw new DockerfileError(`${what} needs KEY=VALUE`, line);
    return [[m[1], words(m[2]).join(" ")]];
  }
  return w.map((p) => {
    const eq = p.indexOf("=");
    if (eq <= 0) throw new DockerfileError(`${what}: "${p}" is not KEY=VALUE`, line);
    return [p.slice(0, eq), p.slice(eq + 1)];
  });
}

/**
 * Parses a Dockerfile. `buildArgs` are the --build-arg values; substitution happens here for
 * everything but RUN, CMD and ENTRYPOINT (whose shell expands its own variables at run time).
 */
export function parseDockerfile(text: string, buildArgs: Record<string, string> = {}): Dockerfile {
  const lines = logicalLines(text);
  const globalArgs = new Map<string, string | undefined>();
  const stages: Stage[] = [];
  let vars = new Map<string, string>();
  const globalVars = new Map<string, string>();
  for (const { line, text: l } of lines) {
    const m = /^(\S+)\s*([\s\S]*)$/.exec(l)!;
    const op = m[1].toUpperCase();
    const rest = m[2].trim();
    if (!SUPPORTED.includes(op)) {
      throw new DockerfileError(`${m[1]} is not supported (supported: ${SUPPORTED.join(", ")})`, line);
    }
    if (op === "FROM") {
      const w = words(substitute(rest, globalVars, line));
      const platform = w.findIndex((x) => x.startsWith("--platform="));
      if (platform >= 0) w.splice(platform, 1);
      if (!(w.length === 1 || (w.length === 3 && w[1].toUpperCase() === "AS"))) throw new DockerfileError("FROM takes an image and an optional AS name", line);
      const name = w.length === 3 ? w[2].toLowerCase() : undefined;
      if (name && stages.some((s) => s.name === name)) throw new DockerfileError(`a stage is named "${name}" already`, line);
      stages.push({ from: w[0], name, index: stages.length, line, steps: [] });
      vars = new Map();
      continue;
    }
    if (!stages.length) {
      if (op !== "ARG") throw new DockerfileError(`${op} before the first FROM (only ARG may come first)`, line);
      const [name, value] = argDecl(rest, line);
      globalArgs.set(name, value);
      const v = buildArgs[name] ?? value;
      if (v !== undefined) globalVars.set(name, v);
      continue;
    }
    const stage = stages[stages.length - 1];
    const sub = (s: string) => substitute(s, vars, line);
    switch (op) {
      case "RUN":
      case "CMD":
      case "ENTRYPOINT": {
        if (!rest) throw new DockerfileError(`${op} needs a command`, line);
        const argv = jsonForm(rest, line, op);
        stage.steps.push({ op, line, text: l, argv, command: argv ? argv.join(" ") : rest });
        break;
      }
      case "SHELL": {
        const argv = jsonForm(rest, line, "SHELL");
        if (!argv?.length) throw new DockerfileError('SHELL needs a JSON array, e.g. ["/bin/bash", "-c"]', line);
        stage.steps.push({ op, line, text: l, argv });
        break;
      }
      case "VOLUME": {
        const paths = (jsonForm(rest, line, op) ?? words(rest)).map(sub);
        if (!paths.length || paths.some((p) => !p.startsWith("/"))) throw new DockerfileError("VOLUME takes absolute paths", line);
        stage.steps.push({ op, line, text: l, paths });
        break;
      }
      case "STOPSIGNAL": {
        const signal = sub(rest).toUpperCase();
        if (!/^(SIG)?[A-Z0-9+]{2,12}$|^\d{1,2}$/.test(signal)) throw new DockerfileError(`STOPSIGNAL: "${rest}" is not a signal`, line);
        stage.steps.push({ op, line, text: l, signal });
        break;
      }
      case "HEALTHCHECK":
        stage.steps.push({ op, line, text: l, healthcheck: healthcheckOf(rest, line) });
        break;
      case "MAINTAINER":
        // Deprecated by Docker for the label it sets.
        stage.steps.push({ op: "LABEL", line, text: l, pairs: [["maintainer", sub(rest)]] });
        break;
      case "ONBUILD":
        stage.steps.push({ op: "IGNORED", line, text: l, warning: `ONBUILD is not kept: images built FROM this one do not run "${rest.slice(0, 80)}"` });
        break;
      case "COPY":
      case "ADD": {
        // Flags come first, and the JSON form may follow them (COPY --chown=u ["a b", "/c"]).
        const flagWords: string[] = [];
        let after = rest;
        for (let m = /^(--\S+)\s*/.exec(after); m; m = /^(--\S+)\s*/.exec(after)) {
          flagWords.push(m[1]);
          after = after.slice(m[0].length);
        }
        let w = jsonForm(after, line, op) ?? words(after);
        const flags: Record<string, string> = {};
        while (flagWords.length) {
          const f = flagWords.shift()!;
          const eq = f.indexOf("=");
          if (eq < 0) throw new DockerfileError(`${op} flag ${f} needs a value (${f}=…)`, line);
          const key = f.slice(2, eq);
          if (!["from", "chown", "chmod", "link"].includes(key)) throw new DockerfileError(`${op} --${key} is not supported (--from, --chown, --chmod are)`, line);
          flags[key] = f.slice(eq + 1);
        }
        w = w.map(sub);
        if (w.length < 2) throw new DockerfileError(`${op} needs a source and a destination`, line);
        const chmod = flags.chmod !== undefined ? Number.parseInt(flags.chmod, 8) : undefined;
        if (chmod !== undefined && (!/^[0-7]{3,4}$/.test(flags.chmod) || Number.isNaN(chmod))) throw new DockerfileError(`--chmod must be octal, got ${flags.chmod}`, line);
        if (op === "ADD" && w.slice(0, -1).some((s) => /^[a-z]+:\/\//i.test(s)))
          throw new DockerfileError("ADD from a URL is not supported (download it in a RUN step through the build's network)", line);
        stage.steps.push({
          op,
          line,
          text: l,
          sources: w.slice(0, -1),
          dest: w[w.length - 1],
          ...(flags.from !== undefined ? { from: sub(flags.from).toLowerCase() } : {}),
          ...(flags.chown !== undefined ? { chown: sub(flags.chown) } : {}),
          ...(chmod !== undefined ? { chmod } : {}),
        });
        break;
      }
      case "ENV":
      case "LABEL": {
        const p = pairs(rest, line, op).map(([k, v]) => [k, sub(v)] as [string, string]);
        if (op === "ENV") for (const [k, v] of p) vars.set(k, v);
        stage.steps.push({ op, line, text: l, pairs: p });
        break;
      }
      case "ARG": {
        const [name, value] = argDecl(rest, line);
        // A stage sees a global ARG only when it declares it again (without a value, it takes the global one).
        const v = buildArgs[name] ?? (value !== undefined ? sub(value) : globalVars.get(name));
        if (v !== undefined && !vars.has(name)) vars.set(name, v);
        stage.steps.push({ op, line, text: l, name, ...(v !== undefined ? { value: v } : {}) });
        break;
      }
      case "WORKDIR":
      case "USER": {
        const value = sub(rest);
        if (!value) throw new DockerfileError(`${op} needs a value`, line);
        stage.steps.push({ op, line, text: l, value });
        break;
      }
      case "EXPOSE": {
        const ports = words(sub(rest)).map((p) => {
          if (!/^\d{1,5}(\/(tcp|udp))?$/.test(p)) throw new DockerfileError(`EXPOSE: "${p}" is not PORT[/tcp|udp]`, line);
          return p.includes("/") ? p : `${p}/tcp`;
        });
        stage.steps.push({ op, line, text: l, ports });
        break;
      }
    }
  }
  if (!stages.length) throw new DockerfileError("no FROM: a Dockerfile starts with FROM image");
  return { stages, globalArgs };
}

function argDecl(rest: string, line: number): [string, string | undefined] {
  const m = /^([A-Za-z_][A-Za-z0-9_]*)(?:=([\s\S]*))?$/.exec(rest.trim());
  if (!m) throw new DockerfileError(`ARG needs NAME or NAME=default, got "${rest}"`, line);
  return [m[1], m[2] !== undefined ? (words(m[2])[0] ?? "") : undefined];
}
