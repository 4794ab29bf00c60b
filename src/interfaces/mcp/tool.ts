// What a tool is: a name (part of the contract), a one-line description an LLM can act on, JSON
// schemas for its arguments and its structured result, and a run function over the core. Every
// tool lives in tools/ and is listed in tools/index.ts.
import type { Static, TSchema } from "typebox";
import { Value } from "typebox/value";
import type { Forge } from "../../core/forge.js";
import { ForgevmError } from "../../http/errors.js";
import type { McpPolicy } from "./policy.js";
import type { Agents, McpSession } from "./sessions.js";

/** What a tool call gets besides its arguments. */
export interface ToolContext {
  forge: Forge;
  policy: McpPolicy;
  agents: Agents;
  session: McpSession;
  /** Aborts when the client cancels the call (notifications/cancelled) or goes away. */
  signal: AbortSignal;
  /** Sends a progress notification when the client asked for them (a no-op otherwise). */
  progress(progress: number, total?: number, message?: string): void;
}

/** What a tool call returns: the structured result, the text an LLM reads, and extra content. */
export interface ToolOutput<O> {
  result: O;
  /** Defaults to the result as JSON. */
  text?: string;
  /** Images and such that go along with the text (run_code's figures). */
  extra?: { type: "image"; data: string; mimeType: string }[];
  /** The sandbox the call acted on (for the audit log). */
  sandboxId?: string;
}

export interface Tool<I extends TSchema = TSchema, O extends TSchema = TSchema> {
  name: string;
  title: string;
  description: string;
  input: I;
  output: O;
  annotations?: { readOnlyHint?: boolean; destructiveHint?: boolean; idempotentHint?: boolean; openWorldHint?: boolean };
  /** It makes or removes sandboxes (clients are told the resource list changed). */
  changesSandboxes?: boolean;
  /** Argument names whose values the audit log keeps only as a size (file contents, code, stdin). */
  bulky?: string[];
  run(ctx: ToolContext, args: Static<I>): Promise<ToolOutput<Static<O>>>;
}

/** Declares a tool, keeping its argument and result types tied to its schemas. */
export function tool<I extends TSchema, O extends TSchema>(t: Tool<I, O>): Tool {
  return t as unknown as Tool;
}

/** Checks a call's arguments against the tool's schema; the error names the first bad field. */
export function checkArguments(t: Tool, args: unknown): void {
  const errors = [...Value.Errors(t.input, args ?? {})];
  if (!errors.length) return;
  const e = errors.find((x) => x.keyword !== "boolean") ?? errors[0];
  const params = e.params as { additionalProperties?: string[]; requiredProperties?: string[] };
  const field = e.instancePath.slice(1).replace(/\//g, ".");
  if (e.keyword === "additionalProperties") throw new ForgevmError("BAD_REQUEST", `${t.name}: unknown argument ${params.additionalProperties?.map((a) => `"${a}"`).join(", ")}`);
  if (e.keyword === "required") throw new ForgevmError("BAD_REQUEST", `${t.name}: missing argument ${params.requiredProperties?.map((a) => `"${a}"`).join(", ")}`);
  throw new ForgevmError("BAD_REQUEST", `${t.name}: argument ${field || "(arguments)"} ${e.message}`);
}
