// Writes the documents generated from the code's one definition of each wire message:
// docs/openapi.json (from the route schemas), the SDKs' wire types made from it
// (scripts/sdk-types.ts), the error table in docs/errors.md (from http/errors.ts's ERRORS) and the
// generated parts of docs/architecture.md (scripts/architecture-doc.ts).
// `npm run docs` runs it; test/unit/contract.test.ts fails when the committed copies drift.
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { buildApp } from "../src/compose/app.js";
import type { Forge } from "../src/core/forge.js";
import { ERRORS } from "../src/http/errors.js";
import { ARCHITECTURE_FILE, architectureDoc } from "./architecture-doc.js";
import { MODULES_FILE, modulesDoc } from "./modules-doc.js";
import { TESTING_FILE, testingDoc } from "./testing-doc.js";
import { PY_WIRE_FILE, pyWire, TS_WIRE_FILE, tsWire } from "./sdk-types.js";

const repo = fileURLToPath(new URL("../../", import.meta.url));
export const OPENAPI_FILE = join(repo, "docs", "openapi.json");
export const ERRORS_FILE = join(repo, "docs", "errors.md");
const TABLE_START = "<!-- errors:start -->";
const TABLE_END = "<!-- errors:end -->";

/** The OpenAPI document the routes describe (no Forge needed: only the schemas are read). */
export async function openapiDocument(): Promise<object> {
  const version = (JSON.parse(readFileSync(join(repo, "package.json"), "utf8")) as { version: string }).version;
  const app = await buildApp({ forge: {} as Forge, version });
  await app.ready();
  const doc = app.swagger();
  await app.close();
  return doc;
}

/** The error table as docs/errors.md holds it. */
export function errorTable(): string {
  const rows = Object.entries(ERRORS).map(([code, e]) => `| \`${code}\` | ${e.status} | ${e.retryable ? "yes" : "no"} | ${e.what} |`);
  return [TABLE_START, "| code | HTTP status | retry later? | what it means |", "|---|---|---|---|", ...rows, TABLE_END].join("\n");
}

/** docs/errors.md with its table replaced by the current one. */
export function errorsDoc(current: string): string {
  const a = current.indexOf(TABLE_START);
  const b = current.indexOf(TABLE_END);
  if (a < 0 || b < 0) throw new Error(`${ERRORS_FILE} has no ${TABLE_START} … ${TABLE_END} section`);
  return current.slice(0, a) + errorTable() + current.slice(b + TABLE_END.length);
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const doc = await openapiDocument();
  writeFileSync(OPENAPI_FILE, `${JSON.stringify(doc, null, 2)}\n`);
  writeFileSync(TS_WIRE_FILE, tsWire(doc));
  writeFileSync(PY_WIRE_FILE, pyWire(doc));
  writeFileSync(ERRORS_FILE, errorsDoc(readFileSync(ERRORS_FILE, "utf8")));
  writeFileSync(ARCHITECTURE_FILE, architectureDoc(readFileSync(ARCHITECTURE_FILE, "utf8")));
  writeFileSync(MODULES_FILE, modulesDoc());
  writeFileSync(TESTING_FILE, testingDoc(readFileSync(TESTING_FILE, "utf8")));
  console.log(
    `wrote ${OPENAPI_FILE}, ${TS_WIRE_FILE}, ${PY_WIRE_FILE}, the table in ${ERRORS_FILE}, the generated parts of ${ARCHITECTURE_FILE}, ${MODULES_FILE} and the tier table of ${TESTING_FILE}`,
  );
}
