// .dockerignore, as Docker reads it: one pattern per line, `#` comments, `!` re-includes, `*`
// and `?` within one path component, `**` across any number of them; the last pattern that
// matches a path decides, and an excluded directory excludes what is under it.

interface Rule {
  re: RegExp;
  exclude: boolean;
}

function toRegExp(pattern: string): RegExp {
  let re = "";
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i];
    if (c === "*") {
      if (pattern[i + 1] === "*") {
        // "**/" matches any number of directories (none included); "**" at the end matches anything
        if (pattern[i + 2] === "/") {
          re += "(?:.*/)?";
          i += 2;
        } else {
          re += ".*";
          i++;
        }
      } else re += "[^/]*";
    } else if (c === "?") re += "[^/]";
    else if (c === "[") {
      const end = pattern.indexOf("]", i + 1);
      if (end < 0) re += "\\[";
      else {
        re += `[${pattern
          .slice(i + 1, end)
          .replace(/^!/, "^")
          .replace(/\\/g, "\\\\")}]`;
        i = end;
      }
    } else if (c === "\\" && i + 1 < pattern.length) re += `\\${pattern[++i]}`;
    else re += c.replace(/[.+^${}()|\\]/g, "\\$&");
  }
  return new RegExp(`^${re}$`);
}

export class DockerIgnore {
  private readonly rules: Rule[];

  constructor(text = "") {
    this.rules = text
      .replace(/\r\n/g, "\n")
      .split("\n")
      .map((l) => l.trim())
      .filter((l) => l && !l.startsWith("#"))
      .map((l) => {
        const exclude = !l.startsWith("!");
        const p = (exclude ? l : l.slice(1).trim())
          .replace(/^\/+/, "")
          .replace(/\/+$/, "")
          .split("/")
          .filter((c) => c && c !== ".")
          .join("/");
        return { re: toRegExp(p), exclude };
      });
  }

  /** Whether a path relative to the context ("src/app.js") is left out. */
  ignores(rel: string): boolean {
    const parts = rel.split("/").filter(Boolean);
    // A path is out when it, or a directory above it, is out by the last rule that matches.
    let out = false;
    for (let n = 1; n <= parts.length; n++) {
      const sub = parts.slice(0, n).join("/");
      let verdict: boolean | null = null;
      for (const r of this.rules) if (r.re.test(sub)) verdict = r.exclude;
      if (verdict !== null) out = verdict;
    }
    return out;
  }
}
