// GET /mcp/audit: what agents did through MCP, call by call (mcp/server.ts writes it).
import type { FastifyPluginAsyncTypebox } from "@fastify/type-provider-typebox";
import { Type } from "typebox";
import type { Forge } from "../../../core/forge.js";

const AuditEntry = Type.Object(
  {
    seq: Type.Integer(),
    time: Type.String(),
    interface: Type.String(),
    session: Type.String(),
    tool: Type.String(),
    arguments: Type.Union([Type.Record(Type.String(), Type.Unknown()), Type.Null()]),
    outcome: Type.Union([Type.Literal("ok"), Type.Literal("error"), Type.Literal("refused"), Type.Literal("cancelled")]),
    error: Type.Union([Type.String(), Type.Null()]),
    sandbox_id: Type.Union([Type.String(), Type.Null()]),
    duration_ms: Type.Integer(),
  },
  { $id: "AuditEntry" },
);

export const auditRoutes: FastifyPluginAsyncTypebox<{ forge: Forge }> = async (app, { forge }) => {
  app.get(
    "/mcp/audit",
    {
      schema: {
        tags: ["mcp"],
        description: "Tool calls agents made through MCP, oldest first: the newest `limit` that match. Arguments are stored with secrets and contents redacted.",
        querystring: Type.Object(
          {
            session: Type.Optional(Type.String({ minLength: 1, maxLength: 128 })),
            tool: Type.Optional(Type.String({ minLength: 1, maxLength: 64 })),
            after: Type.Optional(Type.String({ pattern: "^[0-9]{1,15}$", description: "Only entries with a larger seq" })),
            limit: Type.Optional(Type.String({ pattern: "^[0-9]{1,5}$", description: "At most this many (default 100, at most 10000)" })),
          },
          { additionalProperties: false },
        ),
        response: { 200: Type.Object({ entries: Type.Array(AuditEntry) }) },
      },
    },
    async (req) => {
      const q = req.query;
      const limit = Math.min(Number(q.limit ?? 100), 10_000);
      return { entries: forge.audit.list({ session: q.session, tool: q.tool, after: q.after ? Number(q.after) : undefined, limit }) };
    },
  );
};
