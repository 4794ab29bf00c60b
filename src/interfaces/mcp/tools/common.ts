// Argument shapes several tools share.
import { Type } from "typebox";
import { NO_EXPIRY, parseDuration } from "../../../schemas/durations.js";
import { familiarName } from "../../../core/images/image-reference.js";
import type { SandboxRow } from "../../../core/types.js";
import { KEEP_KEY, SESSION_KEY, type McpSession } from "../sessions.js";

export const SandboxId = Type.String({ minLength: 1, maxLength: 128, description: "The sandbox's id, as create_sandbox returned it" });
export const Duration = (what: string) => Type.String({ minLength: 1, maxLength: 32, description: `${what}: a duration such as "90s", "30m" or "2h"` });
export const Lines = Type.Integer({ minimum: 1, maximum: 10000, description: "How many of the last lines (default 100)" });
export const Keep = Type.Boolean({ description: "Keep the sandbox when this MCP session ends (it still expires at its ttl)" });
export const Env = Type.Record(Type.String({ pattern: "^[A-Za-z_][A-Za-z0-9_]*$" }), Type.String({ maxLength: 65536 }), { description: "Environment variables" });

/** Milliseconds of an optional duration argument. */
export const ms = (v: string | undefined, field: string) => (v === undefined ? undefined : parseDuration(v, field));

export const SandboxSummary = Type.Object({
  sandbox_id: Type.String(),
  state: Type.String(),
  image: Type.String(),
  template: Type.Union([Type.String(), Type.Null()]),
  memory_mb: Type.Integer(),
  vcpus: Type.Integer(),
  network: Type.String(),
  created_at: Type.String(),
  expires_at: Type.Union([Type.String(), Type.Null()], { description: "null: it lives until it is destroyed" }),
  keep: Type.Boolean({ description: "Survives the end of the session that made it" }),
  this_session: Type.Boolean({ description: "Made by this MCP session" }),
});

/** A sandbox as the tools show it. */
export function summary(r: SandboxRow, session: McpSession) {
  return {
    sandbox_id: r.id,
    state: r.state,
    image: familiarName(r.image),
    template: r.template,
    memory_mb: r.memory_mb,
    vcpus: r.vcpus,
    network: r.network?.mode ?? "none",
    created_at: r.created_at,
    expires_at: r.expires_at === NO_EXPIRY ? null : r.expires_at,
    keep: r.metadata?.[KEEP_KEY] === "true",
    this_session: r.metadata?.[SESSION_KEY] === session.id,
  };
}
