// MCP over streamable HTTP at /mcp on `forgevm serve`: one transport and server per session
// (Mcp-Session-Id), resumable streams, the REST API's key (X-API-Key, or Authorization: Bearer),
// and sessions that end on DELETE, on close, or after mcp.session_idle without a request —
// taking their sandboxes with them unless marked keep.
import { randomUUID } from "node:crypto";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { isInitializeRequest } from "@modelcontextprotocol/sdk/types.js";
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from "fastify";
import type { Forge } from "../../core/forge.js";
import { SessionEventStore } from "./event-store.js";
import type { McpPolicy } from "./policy.js";
import { mcpServer } from "./server.js";
import { Agents, type McpSession } from "./sessions.js";
import { ignore } from "../../util/ignore.js";
import { keyMatches } from "../../http/api-key.js";
import type { ServerInterface } from "../../server/interface.js";

export const MCP_PATH = "/mcp";
/** Largest JSON-RPC message accepted (write_file's content is capped below it). */
const BODY_LIMIT = 48 * 1024 * 1024;

interface Live {
  transport: StreamableHTTPServerTransport;
  session: McpSession;
}

function rpcError(reply: FastifyReply, status: number, code: number, message: string) {
  return reply.status(status).type("application/json").send({ jsonrpc: "2.0", error: { code, message }, id: null });
}

export const mcpRoutes: FastifyPluginAsync<{ forge: Forge; policy: McpPolicy; version: string }> = async (app, { forge, policy, version }) => {
  const agents = new Agents(forge, policy);
  const live = new Map<string, Live>();

  const endSession = async (id: string) => {
    const l = live.get(id);
    if (!l) return;
    live.delete(id);
    await l.session.end();
    await l.transport.close().catch(ignore("the transport may be closed already"));
  };

  // A client that vanished without DELETE leaves a session nobody uses: it ends after the idle time.
  const sweep = setInterval(
    () => {
      const cutoff = Date.now() - policy.sessionIdleMs;
      for (const [id, l] of live) if (l.session.lastSeen < cutoff) void endSession(id);
    },
    Math.min(60_000, Math.max(1000, policy.sessionIdleMs / 4)),
  );
  sweep.unref();
  app.addHook("onClose", async () => {
    clearInterval(sweep);
    await Promise.all([...live.keys()].map(endSession));
  });

  const handle = async (req: FastifyRequest, reply: FastifyReply) => {
    const header = req.headers["mcp-session-id"];
    const sid = typeof header === "string" ? header : undefined;
    const l = sid ? live.get(sid) : undefined;
    if (sid && !l) return rpcError(reply, 404, -32001, `MCP session ${sid.slice(0, 64)} not found (it ended or the server restarted): initialize a new one`);
    if (!l) {
      if (req.method !== "POST" || !isInitializeRequest(req.body)) {
        return rpcError(reply, 400, -32000, "no Mcp-Session-Id: the first request of a session must be initialize (POST)");
      }
      const id = randomUUID();
      const session = agents.open(id);
      const transport = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => id,
        eventStore: new SessionEventStore(),
        onsessioninitialized: (s) => void live.set(s, { transport, session }),
        onsessionclosed: (s) => void endSession(s),
      });
      transport.onclose = () => void endSession(id);
      await mcpServer(session, version).connect(transport);
      reply.hijack();
      await transport.handleRequest(req.raw, reply.raw, req.body);
      // An initialize the transport refused made no session: nothing may stay behind.
      if (!live.has(id)) await session.end();
      return;
    }
    l.session.lastSeen = Date.now();
    reply.hijack();
    await l.transport.handleRequest(req.raw, reply.raw, req.body);
  };

  const opts = { schema: { hide: true }, bodyLimit: BODY_LIMIT };
  app.post(MCP_PATH, opts, handle);
  app.get(MCP_PATH, opts, handle);
  app.delete(MCP_PATH, opts, handle);
};

/** MCP as one of the server's interfaces: its clients are configured with an Authorization header, so /mcp takes the key as a bearer token too. */
export function mcpInterface(o: { forge: Forge; policy: McpPolicy; version: string }): ServerInterface {
  return {
    name: "mcp",
    keyHint: `on ${MCP_PATH}, as Authorization: Bearer KEY`,
    admits: (req, apiKey) => {
      const bearer = /^Bearer\s+(.+)$/i.exec(String(req.headers.authorization ?? ""))?.[1];
      return !!bearer && req.url.split("?")[0] === MCP_PATH && keyMatches(bearer, apiKey);
    },
    async register(app) {
      await app.register(mcpRoutes, o);
    },
  };
}
