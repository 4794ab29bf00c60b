// Templates on a front. The cluster's templates live in the catalogue and every node mirrors them
// into its own store; a front sends each write to one node, which validates and applies it as it
// would any, and records it in the catalogue only when that node took it, so a template the
// catalogue holds is one a node accepted. Reads go to the same node. A template's spawn is placed
// like any new sandbox, by the template's memory and image.
import type { IncomingMessage, ServerResponse } from "node:http";
import type { ClusterDirectory } from "../core/cluster/directory.js";
import type { ErrorCode } from "../http/errors.js";
import { ask, notDelivered, readBody, relay } from "./proxy.js";

const TEMPLATES = /^\/api\/v1\/templates(?:\/([^/]+))?(\/spawn)?$/;

/** What a front needs from its caller to answer template requests. */
export interface TemplateContext {
  dir: ClusterDirectory;
  problem(res: ServerResponse, code: ErrorCode, message: string): void;
  /** Places a new sandbox (by the body's memory, vCPUs and image, else the template's) and relays the request that makes it. */
  create(req: IncomingMessage, res: ServerResponse, body: Buffer, template: Record<string, unknown>): Promise<void>;
}

/** Answers a request under /api/v1/templates; false when the path is not one. */
export async function handleTemplates(req: IncomingMessage, res: ServerResponse, path: string, c: TemplateContext): Promise<boolean> {
  const m = TEMPLATES.exec(path);
  if (!m) return false;
  const name = m[1] ? decodeURIComponent(m[1]) : null;
  if (name && m[2]) {
    if (req.method !== "POST") {
      c.problem(res, "METHOD_NOT_ALLOWED", `${req.method} ${path}: only POST spawns a template`);
      return true;
    }
    const t = await c.dir.template(name);
    if (!t || t.deleted || !t.body) {
      c.problem(res, "NOT_FOUND", `template "${name}" not found`);
      return true;
    }
    await c.create(req, res, await readBody(req), t.body);
    return true;
  }
  const body = req.method === "GET" || req.method === "DELETE" ? Buffer.alloc(0) : await readBody(req);
  // The first up node by id takes template writes and reads.
  for (const node of await c.dir.upNodes()) {
    let answer: Awaited<ReturnType<typeof ask>>;
    try {
      if (req.method === "GET") {
        await relay(req, res, node.url, node.id);
        return true;
      }
      answer = await ask(req, node.url, node.id, body);
    } catch (e) {
      if (notDelivered(e)) continue;
      throw e;
    }
    if (answer.status < 300) await record(c.dir, req.method ?? "", name, body);
    res.writeHead(answer.status, { "content-type": answer.type, "content-length": answer.body.length });
    res.end(answer.body);
    return true;
  }
  c.problem(res, "UNAVAILABLE", "no node is up to take templates");
  return true;
}

/** The catalogue's copy of a write a node accepted. */
async function record(dir: ClusterDirectory, method: string, name: string | null, body: Buffer): Promise<void> {
  if (method === "DELETE" && name) return dir.putTemplate(name, null);
  const parsed = JSON.parse(body.toString() || "{}") as Record<string, unknown>;
  const named = name ?? (typeof parsed.name === "string" ? parsed.name : null);
  if (named && (method === "POST" || method === "PUT")) await dir.putTemplate(named, { ...parsed, name: named });
}
