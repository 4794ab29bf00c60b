// The composition root of the server: which interfaces one `forgevm serve` offers, built over one
// Forge and handed to the server (server/app.ts). Adding a protocol adds a folder of interfaces/
// and one line in interfacesFor.
import type { FastifyInstance } from "fastify";
import type { Forge } from "../core/forge.js";
import { consoleInterface } from "../interfaces/console/console.js";
import { customHttpInterface } from "../interfaces/custom-http/server.js";
import { daytonaInterface } from "../interfaces/daytona/index.js";
import { e2bInterface } from "../interfaces/e2b/index.js";
import { mcpInterface } from "../interfaces/mcp/http.js";
import type { McpPolicy } from "../interfaces/mcp/policy.js";
import { restInterface } from "../interfaces/rest/index.js";
import { createServer, type ServerOptions } from "../server/app.js";
import type { ServerInterface } from "../server/interface.js";

export interface AppOptions extends Omit<ServerOptions, "interfaces" | "countError"> {
  forge: Forge;
  maxOutputBytes?: number;
  /** The domain sandboxes' ports are served under for E2B's getHost (e2b.domain); absent, localhost with the server's port. */
  e2bDomain?: string;
  /** The domain Daytona's previews are served under as `<port>-<id>.<domain>` (daytona.preview_domain); absent, previews are paths only. */
  daytonaPreviewDomain?: string;
  /** Serve MCP at /mcp under this policy (absent: no /mcp). */
  mcp?: McpPolicy;
}

/** The interfaces of one server, in the order their Host routing is tried (a Daytona preview host before E2B's). */
export function interfacesFor(o: AppOptions): ServerInterface[] {
  if (o.daytonaPreviewDomain && o.daytonaPreviewDomain.toLowerCase() === o.e2bDomain?.toLowerCase()) {
    throw new Error("daytona.preview_domain must differ from e2b.domain: both name sandbox ports by Host, and one Host can mean only one of them");
  }
  const { forge, apiKey, version } = o;
  return [
    restInterface({ forge, version, maxOutputBytes: o.maxOutputBytes }),
    consoleInterface(),
    daytonaInterface({ forge, apiKey, previewDomain: o.daytonaPreviewDomain, listenHost: o.listenHost }),
    e2bInterface({ forge, domain: o.e2bDomain, apiKey }),
    customHttpInterface({ forge }),
    ...(o.mcp ? [mcpInterface({ forge, policy: o.mcp, version })] : []),
  ];
}

/** The Fastify application of `forgevm serve`: every interface over one Forge (built apart from listen() so tests can inject requests). */
export async function buildApp(o: AppOptions): Promise<FastifyInstance> {
  return createServer({ ...o, interfaces: interfacesFor(o), countError: (code) => o.forge.metrics.countError?.(code) });
}
