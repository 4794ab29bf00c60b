// Builds the package twice from one source: ESM into dist/esm, CommonJS into dist/cjs (files
// renamed .cjs/.d.cts, so one package serves `import` and `require`). Uses the TypeScript of the
// enclosing workspace; the published package ships only dist/.
import { execFileSync } from "node:child_process";
import { readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";

const here = new URL(".", import.meta.url).pathname;
const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");
const run = (...args) => execFileSync(process.execPath, [tsc, "-p", join(here, "tsconfig.json"), ...args], { stdio: "inherit" });

rmSync(join(here, "dist"), { recursive: true, force: true });
run();
run("--module", "CommonJS", "--moduleResolution", "Node10", "--outDir", join(here, "dist/cjs"));
for (const f of readdirSync(join(here, "dist/cjs"))) {
  const p = join(here, "dist/cjs", f);
  const to = f.endsWith(".d.ts") ? p.replace(/\.d\.ts$/, ".d.cts") : f.endsWith(".js") ? p.replace(/\.js$/, ".cjs") : p;
  writeFileSync(p, readFileSync(p, "utf8").replace(/(require\(|from )"(\.\/[^"]+)\.js"/g, '$1"$2.cjs"'));
  if (to !== p) renameSync(p, to);
}
