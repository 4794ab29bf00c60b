// Ready-made LLM tools, named as in the product document: execute_code (a shell command),
// write_file and read_file, as definitions in OpenAI
// function-calling and Anthropic tool_use formats, and one dispatcher that runs a tool call
// (either format) against a sandbox and returns the text to send back to the model.
import type { Sandbox } from "./sandbox.js";

const TOOLS = [
  {
    name: "execute_code",
    description:
      "Execute a shell command in a sandboxed VM (e.g. `python3 script.py`); returns the exit code, stdout and stderr. Files and installed packages persist between calls.",
    parameters: {
      type: "object",
      properties: { command: { type: "string", description: "The shell command to run." } },
      required: ["command"],
    },
  },
  {
    name: "write_file",
    description: "Write a file in the sandbox, creating parent directories.",
    parameters: {
      type: "object",
      properties: { path: { type: "string", description: "Absolute path." }, content: { type: "string", description: "File content." } },
      required: ["path", "content"],
    },
  },
  {
    name: "read_file",
    description: "Read a text file from the sandbox.",
    parameters: { type: "object", properties: { path: { type: "string", description: "Absolute path." } }, required: ["path"] },
  },
] as const;

/** How long one tool command may run. */
const TOOL_TIMEOUT = "120s";

export type ToolName = (typeof TOOLS)[number]["name"];

/** Tool definitions for OpenAI's chat completions `tools` parameter. */
export function openaiTools() {
  return TOOLS.map((t) => ({ type: "function" as const, function: { name: t.name, description: t.description, parameters: t.parameters } }));
}

/** Tool definitions for Anthropic's messages `tools` parameter. */
export function anthropicTools() {
  return TOOLS.map((t) => ({ name: t.name, description: t.description, input_schema: t.parameters }));
}

/** An OpenAI tool call (`{function: {name, arguments}}`) or an Anthropic tool_use block (`{name, input}`). */
export type ToolCall = { function: { name: string; arguments: string }; [other: string]: unknown } | { name: string; input: Record<string, unknown>; [other: string]: unknown };

/** Runs one tool call in the sandbox; resolves with the text result for the model (errors included, never thrown). */
export async function handleToolCall(sandbox: Sandbox, call: ToolCall): Promise<string> {
  let name: string;
  let args: Record<string, unknown>;
  try {
    if ("function" in call && call.function) {
      const f = call.function as { name: string; arguments: string };
      name = f.name;
      args = f.arguments ? (JSON.parse(f.arguments) as Record<string, unknown>) : {};
    } else {
      name = String(call.name);
      args = (call.input as Record<string, unknown>) ?? {};
    }
  } catch {
    return "error: the tool arguments are not valid JSON";
  }
  const str = (k: string) => (typeof args[k] === "string" ? (args[k] as string) : undefined);
  try {
    switch (name) {
      case "execute_code": {
        const command = str("command");
        if (command === undefined) return "error: execute_code needs a string `command`";
        const r = await sandbox.exec(command, { timeout: TOOL_TIMEOUT });
        return `exit_code: ${r.exit_code}${r.timed_out ? " (timed out)" : ""}\nstdout:\n${r.stdout}${r.stderr ? `\nstderr:\n${r.stderr}` : ""}`;
      }
      case "write_file": {
        const path = str("path");
        const content = str("content");
        if (path === undefined || content === undefined) return "error: write_file needs string `path` and `content`";
        await sandbox.writeFile(path, content);
        return `wrote ${content.length} characters to ${path}`;
      }
      case "read_file": {
        const path = str("path");
        if (path === undefined) return "error: read_file needs a string `path`";
        return await sandbox.readFile(path);
      }
      default:
        return `error: unknown tool ${name}`;
    }
  } catch (e) {
    return `error: ${(e as Error).message}`;
  }
}
