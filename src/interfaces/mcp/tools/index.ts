// Every tool the MCP server offers, in the order tools/list shows them. Names are part of the
// contract (docs/mcp.md); test/vm/mcp.test.ts checks this list against it.
import type { Tool } from "../tool.js";
import { fork, restore, snapshot } from "./copies.js";
import { computer } from "./desktop.js";
import { exec, runCode } from "./exec.js";
import { download, listFiles, readFile, upload, writeFile } from "./files.js";
import { images, pullImage, templates } from "./images.js";
import { createSandbox, destroySandbox, egressLog, listSandboxes, logs, publishPort, setMemory } from "./sandboxes.js";

export const TOOLS: Tool[] = [
  createSandbox,
  listSandboxes,
  destroySandbox,
  exec,
  runCode,
  writeFile,
  readFile,
  listFiles,
  upload,
  download,
  fork,
  snapshot,
  restore,
  logs,
  egressLog,
  publishPort,
  setMemory,
  images,
  pullImage,
  templates,
  computer,
];

export const TOOLS_BY_NAME = new Map(TOOLS.map((t) => [t.name, t]));
