// What an agent is told: the server's instructions at initialize, and a prompt with the workflow
// and the operator's current policy.
import { McpError, ErrorCode } from "@modelcontextprotocol/sdk/types.js";
import { describePolicy, type McpPolicy } from "./policy.js";

const WORKFLOW = [
  "ForgeVM gives you disposable Linux VMs (sandboxes) to run code in, isolated from the host.",
  "1. create_sandbox → a sandbox_id (Debian with bash and Python by default; see images and templates).",
  "2. exec runs shell commands; run_code runs Python/JavaScript/bash in an interpreter that keeps variables between calls.",
  "3. write_file, read_file and list_files move files in and out; upload/download use only host directories the operator shared.",
  "4. fork or snapshot/restore to try things from the same state; logs and egress_log show the console and network decisions.",
  "5. destroy_sandbox when done. Sandboxes this session made go when it ends, unless created with keep: true.",
].join("\n");

/** The instructions sent at initialize. */
export function instructions(p: McpPolicy): string {
  return `${WORKFLOW}\n\nThe operator's policy (calls beyond it are refused, naming the rule):\n${describePolicy(p)}`;
}

export const PROMPTS = [
  {
    name: "sandbox_workflow",
    title: "Work in a sandbox",
    description: "How to use ForgeVM sandboxes for a task, with the operator's current policy",
    arguments: [{ name: "task", description: "What to do in the sandbox", required: false }],
  },
];

/** A prompt by name. */
export function prompt(p: McpPolicy, name: string, args: Record<string, string> | undefined) {
  if (name !== "sandbox_workflow") throw new McpError(ErrorCode.InvalidParams, `unknown prompt "${name.slice(0, 64)}"; prompts/list names the ones there are`);
  const task = args?.task ? `\n\nThe task: ${args.task}` : "";
  return {
    description: PROMPTS[0].description,
    messages: [{ role: "user" as const, content: { type: "text" as const, text: `${instructions(p)}${task}` } }],
  };
}
