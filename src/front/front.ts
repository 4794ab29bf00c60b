// `forgevm serve --role front`: the address users and SDKs talk to in a cluster. It answers what
// is about the cluster itself (health, /cluster/nodes, the sandbox list of every node, every
// node's events, templates, where a new sandbox goes) and relays everything about one sandbox to
// the node that owns it, found in the catalogue by the sandbox's id (in the path, or E2B's
// E2b-Sandbox-Id header): REST, NDJSON streams, SSE, WebSockets, E2B's control plane and envd.
// A request about one snapshot goes to the node that holds it; an MCP session to the node it was
// placed on.
// What belongs to one node (its images, snapshots, volumes, builds) goes to the node named in the
// X-ForgeVM-Node header. It keeps nothing; any number may run.
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { Duplex } from "node:stream";
import type { Config } from "../config/config.js";
import { ClusterDirectory, type NodeRow } from "../core/cluster/directory.js";
import { parseDuration } from "../schemas/durations.js";
import { ERRORS, type ErrorCode } from "../http/errors.js";
import { streamClusterEvents } from "./events.js";
import { MCP_PATH } from "../interfaces/mcp/http.js";
import { asOperator, type Caller, callerOf, handleKeys, KeyedConnections } from "./keys.js";
import { relayMcp } from "./mcp.js";
import { nodeAuth, notDelivered, readBody, relay, relayUpgrade } from "./proxy.js";
import { handleSnapshots } from "./snapshots.js";
import { handleTemplates } from "./templates.js";
import { ignore } from "../util/ignore.js";

export interface RunningFront {
  url: string;
  close(): Promise<void>;
}

/** The header that sends a request to one node by its id, for what belongs to a node rather than to a sandbox. */
export const NODE_HEADER = "x-forgevm-node";
const SANDBOX_PATH = /^\/(?:api\/v1\/|v2\/)?sandboxes\/(sb-[0-9a-f]{8})(?:[/?]|$)/;
/** Memory a spawn that names none is placed for. */
const DEFAULT_PLACE_MB = 512;

function send(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { "content-type": "application/json; charset=utf-8", "content-length": Buffer.byteLength(text) });
  res.end(text);
}

/** An error answer with a code of the one table every interface uses; 502 for a node that gave no answer. */
const problem = (res: ServerResponse, code: ErrorCode, message: string, status: number = ERRORS[code].status) =>
  send(res, status, { code, message, retryable: ERRORS[code].retryable });

/** Starts a front from a validated config (role "front"); resolves once it listens. */
export async function startFront(cfg: Config, version: string): Promise<RunningFront> {
  if (!cfg.cluster.database) throw new Error("a front needs cluster.database (--database postgres://…)");
  const dir = await ClusterDirectory.open(cfg.cluster.database, parseDuration(cfg.cluster.node_timeout, "cluster.node_timeout"));
  const key = cfg.auth.api_key;
  const keyed = new KeyedConnections(dir.keys);
  /** Who the request is (after which a cluster key's request carries the operator's key); null: refuse. */
  const admit = async (req: IncomingMessage, socket?: Duplex): Promise<Caller> => {
    // Calls into a sandbox (E2B's envd) carry its own access token, which its node checks.
    if (typeof req.headers["e2b-sandbox-id"] === "string") return "operator";
    const caller = await callerOf(req, key, dir.keys);
    if (caller === "cluster-key") {
      keyed.track(req, socket);
      asOperator(req, key);
    }
    return caller;
  };
  const targetOf = (req: IncomingMessage): string | null => {
    const header = req.headers["e2b-sandbox-id"];
    if (typeof header === "string") return header;
    return SANDBOX_PATH.exec(req.url ?? "")?.[1] ?? null;
  };

  const lostView = (id: string, node: NodeRow) => ({ id, state: "lost", node: node.id, error: `node ${node.id} stopped answering at ${node.heartbeat_at.toISOString()}` });

  /** A request about one sandbox: to its node, or what the front can say when that node is down. */
  const toOwner = async (req: IncomingMessage, res: ServerResponse, id: string) => {
    const at = await dir.locate(id);
    if (!at) return problem(res, "NOT_FOUND", `sandbox ${id} not found on any node`);
    if (at.node.state === "down") {
      if (req.method === "GET" && /^\/api\/v1\/sandboxes\/sb-[0-9a-f]{8}$/.test((req.url ?? "").split("?")[0])) return send(res, 200, lostView(id, at.node));
      return problem(res, "UNAVAILABLE", `sandbox ${id} is lost: its node ${at.node.id} is down`);
    }
    await relay(req, res, at.node.url, at.node.id).catch((e: Error) => problem(res, "UNAVAILABLE", `node ${at.node.id} cannot be reached: ${e.message}`, 502));
  };

  /** A request for one node's own things (its images, snapshots, volumes, builds): relayed to the node it names. */
  const toNode = async (req: IncomingMessage, res: ServerResponse, nodeId: string) => {
    const node = (await dir.nodes()).find((n) => n.id === nodeId);
    if (!node) return problem(res, "NOT_FOUND", `${NODE_HEADER}: no node "${nodeId}" (GET /api/v1/cluster/nodes lists them)`);
    if (node.state === "down") return problem(res, "UNAVAILABLE", `node ${node.id} is down`);
    await relay(req, res, node.url, node.id).catch((e: Error) => problem(res, "UNAVAILABLE", `node ${node.id} cannot be reached: ${e.message}`, 502));
  };

  /**
   * A new sandbox: placed on a node with room for its memory and vCPUs (the body's, else those of
   * its template or of `fallback`, a template's body), preferring one with its image; another is
   * tried if the first never got the request.
   */
  const create = async (req: IncomingMessage, res: ServerResponse, body: Buffer, fallback: Record<string, unknown> | null = null) => {
    let parsed: Record<string, unknown> = {};
    try {
      parsed = body.length ? JSON.parse(body.toString()) : {};
    } catch {
      // the node answers a malformed body with its own 400
    }
    const template = typeof parsed.template === "string" ? ((await dir.template(parsed.template))?.body ?? null) : fallback;
    const pick = <T>(key: string, kind: "number" | "string", otherwise: T): T => {
      for (const from of [parsed, template ?? {}]) if (typeof from[key] === kind) return from[key] as T;
      return otherwise;
    };
    const memory = pick("memory_mb", "number", DEFAULT_PLACE_MB);
    const want = { memoryMb: memory, vcpus: pick("vcpus", "number", pick("cpu_cores", "number", 1)), image: pick<string | null>("image", "string", null) };
    // A retry of a create (its Idempotency-Key seen before, through any front) goes to the node
    // the first try went to, which answers with the sandbox that try made.
    const key = typeof req.headers["idempotency-key"] === "string" ? req.headers["idempotency-key"] : null;
    const toKeyNode = async (nodeId: string) => {
      const node = (await dir.nodes()).find((n) => n.id === nodeId);
      if (!node || node.state === "down") return problem(res, "UNAVAILABLE", `the create with this Idempotency-Key went to node ${nodeId}, which is down`);
      await relay(req, res, node.url, node.id, { body, fresh: true }).catch((e: Error) => problem(res, "UNAVAILABLE", `node ${node.id} cannot be reached: ${e.message}`, 502));
    };
    const bound = key ? await dir.keyNode(key) : undefined;
    if (bound) return toKeyNode(bound);
    const tried: string[] = [];
    for (;;) {
      const placed = await dir.place(want, tried);
      if (!placed) return problem(res, "UNAVAILABLE", tried.length ? `no node could be reached (tried ${tried.join(", ")})` : `no node has ${memory} MiB free`);
      const { node, reservation } = placed;
      // The room stays reserved until a heartbeat of the node taken after its answer counts the sandbox itself.
      res.once("close", () => void dir.release(reservation).catch(ignore("an unreleased reservation expires on its own")));
      if (key) {
        const holder = await dir.bindKey(key, node.id);
        if (holder !== node.id) return toKeyNode(holder); // a try through another front got there first
      }
      try {
        return await relay(req, res, node.url, node.id, { body, fresh: true });
      } catch (e) {
        // Only a request the node never got may go to another: one it got may have made a sandbox.
        if (!notDelivered(e)) return problem(res, "UNAVAILABLE", `node ${node.id} did not answer the create: ${(e as Error).message}`, 502);
        await dir.release(reservation, true).catch(ignore("an unreleased reservation expires on its own"));
        if (key) await dir.unbindKey(key, node.id).catch(ignore("the key binding is rewritten by the next request"));
        tried.push(node.id);
      }
    }
  };

  /** Every node's sandboxes, and those of down nodes as lost. */
  const list = async (req: IncomingMessage, res: ServerResponse) => {
    const nodes = await dir.nodes();
    const lists = await Promise.all(
      nodes
        .filter((n) => n.state !== "down")
        .map(async (n) => {
          const r = await fetch(new URL(req.url ?? "/", n.url), { headers: nodeAuth(req) }).catch(() => null);
          return r?.ok ? ((await r.json()) as unknown[]) : [];
        }),
    );
    const down = new Map(nodes.filter((n) => n.state === "down").map((n) => [n.id, n]));
    // (A node that went down after the lists were asked for is left to the next list.)
    const listed = lists.flat() as { id?: string }[];
    const seen = new Set(listed.map((s) => s.id));
    const lost = (await dir.lost()).flatMap((p) => {
      const node = down.get(p.node_id);
      return node && !seen.has(p.sandbox_id) ? [lostView(p.sandbox_id, node)] : [];
    });
    send(res, 200, [...listed, ...lost]);
  };

  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    const path = (req.url ?? "/").split("?")[0];
    if (path === "/api/v1/health") return send(res, 200, { status: "ok", version, role: "front" });
    const caller = await admit(req);
    if (!caller) return problem(res, "UNAUTHORIZED", "missing or wrong API key (X-API-Key)");
    if (await handleKeys(req, res, path, { keys: dir.keys, caller, operatorKey: key, send, problem })) return;
    if (path === "/api/v1/cluster/nodes" && req.method === "GET") {
      return send(
        res,
        200,
        (await dir.nodes()).map((n) => ({
          id: n.id,
          url: n.url,
          state: n.state,
          heartbeat_age_ms: n.heartbeat_age_ms,
          memory_mb: n.memory_mb,
          free_memory_mb: n.free_memory_mb,
          vcpus: n.vcpus,
          used_vcpus: n.used_vcpus,
          running: n.running,
          images: n.images,
          version: n.version,
        })),
      );
    }
    const named = req.headers[NODE_HEADER];
    if (typeof named === "string") return toNode(req, res, named);
    const id = targetOf(req);
    if (id) return toOwner(req, res, id);
    if (req.method === "POST" && (path === "/api/v1/sandboxes" || path === "/sandboxes" || path === "/v2/sandboxes")) return create(req, res, await readBody(req));
    if (req.method === "GET" && path === "/api/v1/sandboxes") return list(req, res);
    if (path === MCP_PATH) return relayMcp(req, res, dir, problem);
    if (req.method === "GET" && path === "/api/v1/events") return streamClusterEvents(req, res, dir, (m) => problem(res, "BAD_REQUEST", m));
    if (await handleTemplates(req, res, path, { dir, problem, create })) return;
    if (await handleSnapshots(req, res, path, { dir, problem, send })) return;
    problem(res, "NOT_FOUND", `${req.method} ${path} is not served by a front yet: name the node it is for in the ${NODE_HEADER} header (GET /api/v1/cluster/nodes lists them)`);
  };

  const server = createServer((req, res) => {
    handle(req, res).catch((e: Error & { code?: string }) => {
      if (res.headersSent) return res.destroy();
      if (e instanceof RangeError) return problem(res, "PAYLOAD_TOO_LARGE", e.message);
      // What is left failed in the catalogue: its address and the driver's words stay in this
      // front's log, out of answers to callers who have no business knowing where it is.
      console.error(`forgevm front: ${req.method} ${req.url?.split("?")[0]}: ${e.message}`);
      problem(res, "UNAVAILABLE", `the cluster's catalogue did not answer${e.code ? ` (${e.code})` : ""}; try again, and see the front's log if it lasts`);
    });
  });
  server.on("upgrade", (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    const refuse = (status: number, why: string) => {
      socket.end(`HTTP/1.1 ${status} ${why}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n`);
    };
    const id = targetOf(req);
    if (!id) return refuse(404, "Not Found");
    Promise.all([admit(req, socket), dir.locate(id)]).then(
      ([caller, at]) => {
        if (!caller) return refuse(401, "Unauthorized");
        if (!at) return refuse(404, "Not Found");
        if (at.node.state === "down") return refuse(503, "Service Unavailable");
        relayUpgrade(req, socket, head, at.node.url, () => refuse(502, "Bad Gateway"));
      },
      () => refuse(503, "Service Unavailable"),
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(cfg.server.port, cfg.server.host, () => resolve());
  });
  const addr = server.address() as { address: string; port: number };
  const host = addr.address.includes(":") ? `[${addr.address}]` : addr.address;
  return {
    url: `http://${host}:${addr.port}`,
    close: async () => {
      keyed.close();
      await new Promise<void>((r) => {
        server.close(() => r());
        server.closeAllConnections();
      });
      await dir.close();
    },
  };
}
