// The MCP gateway that E2B's SDK starts in a sandbox made with `mcp` (agent/runtime/mcp-gateway.py):
// written onto the guest's PATH before create answers, so the SDK's `mcp-gateway --config …`
// finds it. It needs the image's python3, as the code contexts do.
import { readFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import { ForgevmError } from "../../http/errors.js";
import type { Guest } from "./guest.js";

/** Where the program goes: on the PATH of a login shell, which is how the SDK runs it. */
export const MCP_GATEWAY_PATH = "/usr/local/bin/mcp-gateway";
/** The guest port it serves Streamable HTTP MCP on (E2B's `mcpPort`). */
export const MCP_GATEWAY_PORT = 50005;
const SOURCE = fileURLToPath(new URL("../../../../agent/runtime/mcp-gateway.py", import.meta.url));

/** Puts the gateway program into the guest; a 400 when the image has no python3 to run it. */
export async function installMcpGateway(guest: Guest): Promise<void> {
  const python = await guest.exec(["sh", "-c", "command -v python3"], { timeoutMs: 10_000 });
  if (python.exitCode !== 0) throw new ForgevmError("BAD_REQUEST", "mcp: the MCP gateway runs on python3, which this image does not have: use an image with python3");
  await guest.writeFile(MCP_GATEWAY_PATH, await readFile(SOURCE), { mode: 0o755 });
}
