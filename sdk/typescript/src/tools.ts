// Ready-made LLM tools: definitions of execute_code, write_file and read_file in OpenAI
// function-calling and Anthropic tool_use formats, and one dispatcher that runs a tool call
// (either format) against a sandbox and returns the text to send back to the model.
import type { Sandbox } from "./sandbox.js";

const LANGUAGES = { python: "python3", bash: "bash", sh: "sh", node: "node" } as const;

const TOOLS = [
  {
    name: "execute_code",
    description: "Run code in an isolated Linux sandbox and return its exit code, stdout and stderr. State (files, installed packages) persists between calls.",
    parameters: {
      type: "object",
      properties: {
        code: { type: "string", description: "The program or shell commands to run." },
        language: { type: "string", enum: Object.keys(LANGUAGES), description: "Language of the code (default python)." },
      },
      required: ["code"],
    },
  },
  {
    name: "write_file",
    description: "Write a text file in the sandbox, creating parent directories.",
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
export type ToolCall =
  | { function: { name: string; arguments: string }; [other: string]: unknown }
  | { name: string; input: Record<string, unknown>; [other: string]: unknown };

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
        const code = str("code");
        if (code === undefined) return "error: execute_code needs a string `code`";
        const lang = (str("language") ?? "python") as keyof typeof LANGUAGES;
        const interp = LANGUAGES[lang];
        if (!interp) return `error: unknown language ${lang} (use one of ${Object.keys(LANGUAGES).join(", ")})`;
        const r = await sandbox.exec(`${interp} -`, { stdin: code, timeout: "120s" });
        return `exit_code: ${r.exit_code}\nstdout:\n${r.stdout}${r.stderr ? `\nstderr:\n${r.stderr}` : ""}`;
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
