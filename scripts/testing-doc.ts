// The tier table of docs/testing.md: each tier, what it holds, and how many files it has and how
// many of those run after the others (host state) or alone, from scripts/test-tiers.ts. `npm run docs` writes it;
// test/unit/layers.test.ts fails when the committed table is not what this writes.
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { APART, HOST_STATE, TIERS, type Tier } from "./test-tiers.js";

const repo = fileURLToPath(new URL("../../", import.meta.url));
export const TESTING_FILE = join(repo, "docs", "testing.md");

const WHAT: Record<Tier, string> = {
  unit: "no VM and no server process: parsers, the wire codecs, the C agent under AddressSanitizer, the layer and docs checks (every name the docs quote exists: `docs-names`), the contract between the schemas, the OpenAPI document and both SDKs",
  api: "HTTP behaviour where a VM adds nothing: authentication and origins, connection limits, the local (namespaces) provider, setup",
  vm: "everything whose behaviour is the VM's, with real VMs: exec, files, snapshots, forks, pause, images, builds, the E2B and MCP surfaces, the SDKs, the console in Chromium, the TUI in a pseudo-terminal, the README's tour",
  cluster: "a PostgreSQL of their own and several servers",
};

/** The table, between its markers, in the text of docs/testing.md. */
export function testingDoc(text: string): string {
  const rows = (Object.keys(TIERS) as Tier[]).map((t) => {
    const files = TIERS[t] as readonly string[];
    const hostState = files.filter((f) => f in HOST_STATE).length;
    const apart = files.filter((f) => f in APART).length;
    return `| \`${t}\` | ${WHAT[t]} | ${files.length} | ${hostState} | ${apart} |`;
  });
  const table = ["| tier | what | files | of which change host state | of which are kept apart |", "|---|---|---|---|---|", ...rows].join("\n");
  const start = "<!-- tiers:start -->\n";
  const end = "<!-- tiers:end -->";
  const i = text.indexOf(start);
  const j = text.indexOf(end);
  if (i < 0 || j < i) throw new Error(`${TESTING_FILE} has no ${start.trim()} … ${end} markers`);
  return `${text.slice(0, i + start.length)}${table}\n${text.slice(j)}`;
}
