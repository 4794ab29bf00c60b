// docs/modules.md: every file of src/, folder by folder, with the first sentence of the comment it
// opens with, so that a reader finds where something is done by its name and one line about it.
// `npm run docs` writes it; test/unit/layers.test.ts fails when the committed file is not what this writes.
import { readFileSync } from "node:fs";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { sourceFiles } from "../test/dependency-graph.js";

const repo = fileURLToPath(new URL("../../", import.meta.url));
export const MODULES_FILE = join(repo, "docs", "modules.md");
const src = join(repo, "src");

/** The first sentence of a file's opening comment (a "Past 400 lines because…" note skipped). */
export function firstSentence(text: string): string {
  const comment: string[] = [];
  for (const line of text.split("\n")) {
    const m = /^\/\/ ?(.*)$/.exec(line);
    if (!m) break;
    comment.push(m[1]);
  }
  let flat = comment.join(" ").replace(/\s+/g, " ").trim();
  const sentenceEnd = /\.(\s|$)/;
  if (flat.startsWith("Past 400 lines")) {
    const m = sentenceEnd.exec(flat);
    flat = m ? flat.slice(m.index + 1).trim() : "";
  }
  const m = sentenceEnd.exec(flat);
  return (m ? flat.slice(0, m.index) : flat).trim();
}

export function modulesDoc(): string {
  const byFolder = new Map<string, string[]>();
  for (const file of sourceFiles(src).sort()) {
    const rel = relative(src, file);
    const folder = rel.includes("/") ? rel.slice(0, rel.lastIndexOf("/")) : ".";
    const line = `| \`${rel}\` | ${firstSentence(readFileSync(file, "utf8")).replaceAll("|", "\\|") || "—"} |`;
    byFolder.set(folder, [...(byFolder.get(folder) ?? []), line]);
  }
  const parts = [...byFolder.entries()]
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([folder, rows]) => `## ${folder === "." ? "src/" : `src/${folder}/`}\n\n| file | what it is |\n|---|---|\n${rows.join("\n")}\n`);
  return `# Modules

What this page is for: finding where something is done. Every file of \`src/\`, folder by folder,
with the first sentence of the comment it opens with. It is written by \`npm run docs\` from the
files themselves (\`scripts/modules-doc.ts\`), and a test fails when it is out of date. How the
folders depend on each other, and where each request is handled, is in
[architecture.md](architecture.md).

${parts.join("\n")}`;
}
