// Snapshots on a front. A snapshot lives on the node that took it (or imported it): the front
// lists every node's, each naming its node, and sends whatever names one snapshot (inspect,
// delete, export, spawn: a restore lands where the snapshot is) to the node that holds it, found
// by asking the up nodes. Importing one goes to the node named in X-ForgeVM-Node.
import type { IncomingMessage, ServerResponse } from "node:http";
import type { ClusterDirectory } from "../core/cluster/directory.js";
import type { ErrorCode } from "../http/errors.js";
import { nodeAuth, relay } from "./proxy.js";

const ONE = /^\/api\/v1\/snapshots\/([^/]+)(?:\/(spawn|export))?$/;

/** What a front needs from its caller to answer snapshot requests. */
export interface SnapshotContext {
  dir: ClusterDirectory;
  problem(res: ServerResponse, code: ErrorCode, message: string, status?: number): void;
  send(res: ServerResponse, status: number, body: unknown): void;
}

/** Answers GET /api/v1/snapshots and requests about one snapshot; false for other paths. */
export async function handleSnapshots(req: IncomingMessage, res: ServerResponse, path: string, c: SnapshotContext): Promise<boolean> {
  if (path === "/api/v1/snapshots" && req.method === "GET") {
    const lists = await Promise.all(
      (await c.dir.upNodes()).map(async (n) => {
        const r = await fetch(new URL("/api/v1/snapshots", n.url), { headers: nodeAuth(req) }).catch(() => null);
        return r?.ok ? ((await r.json()) as Record<string, unknown>[]).map((s) => ({ ...s, node: n.id })) : [];
      }),
    );
    c.send(res, 200, lists.flat());
    return true;
  }
  const m = ONE.exec(path);
  if (!m || m[1] === "import") return false;
  const id = decodeURIComponent(m[1]);
  const nodes = await c.dir.upNodes();
  const holders = (
    await Promise.all(
      nodes.map(async (n) => {
        const r = await fetch(new URL(`/api/v1/snapshots/${encodeURIComponent(id)}`, n.url), { headers: nodeAuth(req) }).catch(() => null);
        await r?.body?.cancel();
        return r?.ok ? n : null;
      }),
    )
  ).filter((n) => n !== null);
  if (!holders.length) {
    c.problem(res, "NOT_FOUND", `snapshot ${id} not found on any up node`);
    return true;
  }
  if (holders.length > 1) {
    c.problem(res, "CONFLICT", `snapshot ${id} names one on each of ${holders.map((n) => n.id).join(", ")}: use its id, or name the node in the X-ForgeVM-Node header`);
    return true;
  }
  const node = holders[0];
  await relay(req, res, node.url, node.id).catch((e: Error) => c.problem(res, "UNAVAILABLE", `node ${node.id} cannot be reached: ${e.message}`, 502));
  return true;
}
