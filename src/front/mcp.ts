// MCP through a front. An MCP session lives on one node: its initialize goes to the up node with
// the most room, and the session id the node gives is handed to the client with that node's id in
// front of it (`NODE~ID`), so any front can send the session's later requests to its node without
// keeping anything. The session's tools work on that node: the sandboxes it makes land there.
import type { IncomingMessage, ServerResponse } from "node:http";
import type { ClusterDirectory } from "../core/cluster/directory.js";
import type { ErrorCode } from "../http/errors.js";
import { notDelivered, readBody, relay } from "./proxy.js";

const SEP = "~";
const SESSION = "mcp-session-id";

/** Relays a request to /mcp to the node of its session, or places a new session. */
export async function relayMcp(
  req: IncomingMessage,
  res: ServerResponse,
  dir: ClusterDirectory,
  problem: (res: ServerResponse, code: ErrorCode, message: string, status?: number) => void,
): Promise<void> {
  const given = req.headers[SESSION];
  const tagged = (nodeId: string) => (h: Record<string, string | string[]>) => {
    if (typeof h[SESSION] === "string") h[SESSION] = `${nodeId}${SEP}${h[SESSION]}`;
  };
  if (typeof given === "string") {
    const at = given.indexOf(SEP);
    const node = at > 0 ? (await dir.nodes()).find((n) => n.id === given.slice(0, at)) : undefined;
    if (!node) return problem(res, "NOT_FOUND", `MCP session ${given.slice(0, 80)} is not one a front gave (NODE${SEP}ID): initialize a new one`);
    if (node.state === "down") return problem(res, "UNAVAILABLE", `MCP session ${given.slice(0, 80)}: its node ${node.id} is down`);
    const sid = given.slice(at + 1);
    return relay(req, res, node.url, node.id, {
      requestHeaders: (h) => {
        h[SESSION] = sid;
      },
      responseHeaders: tagged(node.id),
    }).catch((e: Error) => problem(res, "UNAVAILABLE", `node ${node.id} cannot be reached: ${e.message}`, 502));
  }
  // A new session: the up node with the largest share of its memory free.
  const up = (await dir.upNodes()).sort((a, b) => b.free_memory_mb / Math.max(1, b.memory_mb) - a.free_memory_mb / Math.max(1, a.memory_mb));
  const body = await readBody(req);
  for (const node of up) {
    try {
      return await relay(req, res, node.url, node.id, { body, fresh: true, responseHeaders: tagged(node.id) });
    } catch (e) {
      if (!notDelivered(e)) return problem(res, "UNAVAILABLE", `node ${node.id} did not answer: ${(e as Error).message}`, 502);
    }
  }
  problem(res, "UNAVAILABLE", "no node is up to take an MCP session");
}
