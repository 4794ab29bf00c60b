// The docs name functions, classes and SDK calls in code quotes; a name that nothing defines any
// more is a stale doc. Every camelCase or PascalCase name quoted in the README and docs/ must occur
// in the project's code (or, for the E2B and Daytona guides, in the SDKs they describe).
import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { it } from "node:test";
import { fileURLToPath } from "node:url";

const repo = fileURLToPath(new URL("../../../", import.meta.url));

/** Every file under `dir` whose name ends with one of `exts` (node_modules, dist and caches left out). */
function files(dir: string, exts: string[]): string[] {
  if (!existsSync(dir)) return [];
  if (statSync(dir).isFile()) return [dir];
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    if (["node_modules", "dist", "__pycache__", ".git"].includes(e.name)) return [];
    const path = join(dir, e.name);
    return e.isDirectory() ? files(path, exts) : exts.some((x) => e.name.endsWith(x)) ? [path] : [];
  });
}

const wordsOf = (paths: string[]) => new Set(paths.flatMap((p) => readFileSync(p, "utf8").match(/[A-Za-z_][A-Za-z0-9_]*/g) ?? []));

const CODE = ["src", "web/src", "scripts", "agent", "sdk/typescript/src", "sdk/python/forgevm", "bench", "test", "deploy", "setup.sh", "bin"].flatMap((d) =>
  files(join(repo, d), [".ts", ".tsx", ".mjs", ".js", ".py", ".c", ".h", ".sh", ".yaml", ".json", "forgevm", "setup.sh"]),
);
/** The SDKs the E2B and Daytona guides describe, call by call. */
const SDKS = [
  ...files(join(repo, "node_modules/e2b/dist"), [".d.ts"]),
  ...files(join(repo, "node_modules/@e2b/code-interpreter/dist"), [".d.ts"]),
  ...files(join(repo, "node_modules/@e2b/desktop/dist"), [".d.ts"]),
  ...files(join(repo, "node_modules/@daytonaio/sdk/esm"), [".d.ts"]),
];

/** camelCase or PascalCase names (two humps at least) inside `code quotes`. */
function quotedNames(markdown: string): string[] {
  const names = new Set<string>();
  for (const [, quoted] of markdown.matchAll(/`([^`\n]+)`/g)) {
    for (const part of quoted.split(/[\s,.:;/=<>{}[\]"'|()…]+/)) {
      if (/^[a-z][a-zA-Z0-9]*[A-Z][A-Za-z0-9]*$/.test(part) || /^[A-Z][a-z0-9]+[A-Z][A-Za-z0-9]*$/.test(part)) names.add(part);
    }
  }
  return [...names];
}

it("every function, class or SDK call the README and docs/ quote exists in the code, or in the SDK a guide describes", () => {
  const code = wordsOf(CODE);
  const sdks = wordsOf(SDKS);
  assert.ok(code.has("MainRunner") && code.has("settleIdle"), "the code's names were read");
  const docs = [
    "README.md",
    ...readdirSync(join(repo, "docs"))
      .filter((f) => f.endsWith(".md"))
      .map((f) => `docs/${f}`),
  ];
  const stale: string[] = [];
  for (const doc of docs) {
    const withSdk = /docs\/(e2b|daytona|frameworks)\.md$/.test(doc);
    for (const name of quotedNames(readFileSync(join(repo, doc), "utf8"))) {
      if (!code.has(name) && !(withSdk && sdks.has(name))) stale.push(`${doc}: ${name}`);
    }
  }
  assert.deepEqual(stale, []);
});
