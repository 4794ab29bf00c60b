// One MCP session's server: tools, resources and a prompt over the core, for any transport. Each
// tool call is checked against its schema and the operator's policy, run, and written to the
// audit log with its outcome; failures are tool errors (isError) that say what to do, so the
// agent can correct itself and the server keeps serving.
import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import {
  CallToolRequestSchema,
  ErrorCode,
  GetPromptRequestSchema,
  ListPromptsRequestSchema,
  ListResourcesRequestSchema,
  ListResourceTemplatesRequestSchema,
  ListToolsRequestSchema,
  McpError,
  ReadResourceRequestSchema,
  type CallToolResult,
} from "@modelcontextprotocol/sdk/types.js";
import { toForgevmError } from "../../core/error-map.js";
import { redactArguments } from "./audit.js";
import { instructions, PROMPTS, prompt } from "./prompts.js";
import { PolicyError } from "./policy.js";
import { listResources, readResource, RESOURCE_TEMPLATES } from "./resources.js";
import type { McpSession } from "./sessions.js";
import { checkArguments, type ToolContext } from "./tool.js";
import { TOOLS, TOOLS_BY_NAME } from "./tools/index.js";
import { ignore } from "../../util/ignore.js";

export const SERVER_NAME = "forgevm";

/** The MCP server of one session (connect it to a transport). */
export function mcpServer(session: McpSession, version: string): Server {
  const { agents } = session;
  const server = new Server(
    { name: SERVER_NAME, title: "ForgeVM sandboxes", version },
    {
      capabilities: { tools: { listChanged: false }, resources: { listChanged: true }, prompts: { listChanged: false }, logging: {} },
      instructions: instructions(agents.policy),
    },
  );

  server.setRequestHandler(ListToolsRequestSchema, async () => {
    session.lastSeen = Date.now();
    return {
      tools: TOOLS.map((t) => ({
        name: t.name,
        title: t.title,
        description: t.description,
        inputSchema: t.input as never,
        outputSchema: t.output as never,
        ...(t.annotations ? { annotations: { title: t.title, ...t.annotations } } : {}),
      })),
    };
  });

  server.setRequestHandler(CallToolRequestSchema, async (req, extra): Promise<CallToolResult> => {
    session.lastSeen = Date.now();
    const { name, arguments: args } = req.params;
    const t = TOOLS_BY_NAME.get(name);
    const t0 = performance.now();
    if (!t) {
      agents.forge.audit.record({
        interface: "mcp",
        session: session.id,
        tool: name.slice(0, 64),
        arguments: null,
        outcome: "error",
        error: "unknown tool",
        sandbox_id: null,
        duration_ms: 0,
      });
      throw new McpError(ErrorCode.InvalidParams, `unknown tool "${name.slice(0, 64)}"; tools/list names the ones there are`);
    }
    const token = extra._meta?.progressToken;
    const ctx: ToolContext = {
      forge: agents.forge,
      policy: agents.policy,
      agents,
      session,
      signal: extra.signal,
      progress: (progress, total, message) => {
        if (token === undefined || extra.signal.aborted) return;
        void extra
          .sendNotification({
            method: "notifications/progress",
            params: { progressToken: token, progress, ...(total !== undefined ? { total } : {}), ...(message ? { message } : {}) },
          })
          .catch(ignore("progress is a hint; the client may have gone"));
      },
    };
    let sandboxId = typeof args?.sandbox_id === "string" ? args.sandbox_id.slice(0, 128) : null;
    try {
      checkArguments(t, args);
      const out = await t.run(ctx, (args ?? {}) as never);
      sandboxId = out.sandboxId ?? sandboxId;
      agents.forge.audit.record({
        interface: "mcp",
        session: session.id,
        tool: name,
        arguments: redactArguments(args, t.bulky),
        outcome: "ok",
        error: null,
        sandbox_id: sandboxId,
        duration_ms: Math.round(performance.now() - t0),
      });
      return {
        content: [{ type: "text", text: out.text ?? JSON.stringify(out.result, null, 2) }, ...(out.extra ?? [])],
        structuredContent: out.result as Record<string, unknown>,
      };
    } catch (e) {
      const err = toForgevmError(e);
      const outcome = extra.signal.aborted ? "cancelled" : e instanceof PolicyError ? "refused" : "error";
      agents.forge.audit.record({
        interface: "mcp",
        session: session.id,
        tool: name,
        arguments: redactArguments(args, t.bulky),
        outcome,
        error: err.message,
        sandbox_id: sandboxId,
        duration_ms: Math.round(performance.now() - t0),
      });
      return {
        isError: true,
        content: [{ type: "text", text: `${err.code}: ${err.message}` }],
        _meta: { "forgevm/error": { code: err.code, status: err.status, ...err.detail } },
      };
    } finally {
      if (t.changesSandboxes) void server.sendResourceListChanged().catch(ignore("the client may have gone"));
    }
  });

  server.setRequestHandler(ListResourcesRequestSchema, async () => ({ resources: listResources(agents) }));
  server.setRequestHandler(ListResourceTemplatesRequestSchema, async () => ({ resourceTemplates: RESOURCE_TEMPLATES }));
  server.setRequestHandler(ReadResourceRequestSchema, async (req) => {
    try {
      return { contents: await readResource(agents, req.params.uri) };
    } catch (e) {
      if (e instanceof McpError) throw e;
      const err = toForgevmError(e);
      throw new McpError(err.code === "NOT_FOUND" ? -32002 : ErrorCode.InvalidParams, err.message);
    }
  });
  server.setRequestHandler(ListPromptsRequestSchema, async () => ({ prompts: PROMPTS }));
  server.setRequestHandler(GetPromptRequestSchema, async (req) => prompt(agents.policy, req.params.name, req.params.arguments));
  paramsErrorsAreInvalidParams(server);
  return server;
}

type RequestHandler = (request: unknown, extra: unknown) => Promise<unknown>;

/**
 * The SDK checks a request's params against its schema before a handler runs and lets the
 * schema's error through as -32603 (internal error); malformed params are the caller's: -32602,
 * naming what was wrong.
 */
function paramsErrorsAreInvalidParams(server: Server): void {
  const handlers = (server as unknown as { _requestHandlers: Map<string, RequestHandler> })._requestHandlers;
  for (const [method, handle] of handlers) {
    handlers.set(method, async (request, extra) => {
      try {
        return await handle(request, extra);
      } catch (e) {
        // A schema's error (zod's, whichever version): a list of issues.
        const issues = (e as { issues?: { path?: (string | number)[]; message?: string }[] })?.issues;
        if (e instanceof McpError || !Array.isArray(issues)) throw e;
        const issue = issues[0];
        throw new McpError(ErrorCode.InvalidParams, `${method}: ${issue ? `${issue.path?.join(".") || "params"}: ${issue.message}` : "the params are malformed"}`);
      }
    });
  }
}
