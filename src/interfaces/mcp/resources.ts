// Resources: each live sandbox's console log and egress log, readable by URI.
import { McpError, ErrorCode } from "@modelcontextprotocol/sdk/types.js";
import type { Agents } from "./sessions.js";

const URI = /^forgevm:\/\/sandboxes\/([A-Za-z0-9_-]{1,128})\/(console|egress)$/;
const LINES = 500;

export const RESOURCE_TEMPLATES = [
  {
    uriTemplate: "forgevm://sandboxes/{sandbox_id}/console",
    name: "console",
    title: "Console log",
    description: "The last lines of a sandbox's serial console",
    mimeType: "text/plain",
  },
  {
    uriTemplate: "forgevm://sandboxes/{sandbox_id}/egress",
    name: "egress",
    title: "Egress log",
    description: "A sandbox's outgoing connections, allowed and denied (JSON lines)",
    mimeType: "application/x-ndjson",
  },
];

/** The resources of every live sandbox agents made. */
export function listResources(agents: Agents) {
  return agents.sandboxes().flatMap((r) => [
    { uri: `forgevm://sandboxes/${r.id}/console`, name: `${r.id} console`, title: `Console log of ${r.id}`, mimeType: "text/plain" },
    { uri: `forgevm://sandboxes/${r.id}/egress`, name: `${r.id} egress`, title: `Egress log of ${r.id}`, mimeType: "application/x-ndjson" },
  ]);
}

/** A resource's contents. */
export async function readResource(agents: Agents, uri: string) {
  const m = URI.exec(uri);
  if (!m) throw new McpError(ErrorCode.InvalidParams, `unknown resource "${uri.slice(0, 200)}": resources look like forgevm://sandboxes/ID/console or …/egress`);
  const [, id, kind] = m;
  agents.row(id);
  if (kind === "console") return [{ uri, mimeType: "text/plain", text: (await agents.forge.sandboxes.logs(id, LINES)).join("\n") }];
  const entries = await agents.forge.network.egressLog(id, LINES);
  return [{ uri, mimeType: "application/x-ndjson", text: entries.map((e) => JSON.stringify(e)).join("\n") }];
}
