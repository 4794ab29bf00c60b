// E2B's control plane (api.e2b.app) on our core: create, connect, list, get, set timeout, kill,
// metrics, network. Both the v2 routes (e2b ≥ 2.51) and the v1 ones (≤ 2.50) are served by
// the same handlers. Errors are E2B's {code, message} with the HTTP status as the code.
import { capMessage } from "../../http/error-body.js";
import { StringMap } from "../../schemas/fields.js";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { Type, type Static } from "typebox";
import { toApiError } from "../../core/error-map.js";
import { ForgevmError, badRequest, sandboxGone } from "../../http/errors.js";
import { MAX_FORK, type Forge, type SpawnOptions } from "../../core/forge.js";
import type { SandboxRow } from "../../core/types.js";
import { templateBuildRoutes } from "./template-builds.js";
import { CODE_INTERPRETER_TEMPLATE, MCP_GATEWAY_TEMPLATE, spawnTarget, templateIdOf } from "./templates.js";
import { checkMcp } from "./mcp.js";
import { detailView, e2bState, listedView, sandboxView } from "./views.js";
import { DEFAULT_USER, DEFAULT_HOME } from "./envd/context.js";
import { ignore } from "../../util/ignore.js";
import { secretRoutes } from "./secrets.js";
import { snapshotFor, snapshotRoutes } from "./snapshots.js";
import { teamRoutes } from "./teams.js";
import { logRoutes } from "./logs.js";
import { volumeMountsOf, volumeRoutes } from "./volumes.js";
import { networkOf, networkUpdateOf, portAccessOf, refuseUnsupported } from "./network.js";
import { hasNic } from "../../core/network.js";
import { domainFor } from "./ports.js";

/** E2B's default sandbox lifetime when create leaves `timeout` out, in seconds. */
const DEFAULT_TIMEOUT_S = 300;
/** The least a sandbox lives after an auto-resume. */
const AUTO_RESUME_MIN_S = 300;
const MAX_TIMEOUT_S = 7 * 24 * 3600;

const NewSandbox = Type.Object(
  {
    templateID: Type.String({ minLength: 1 }),
    timeout: Type.Optional(Type.Integer({ minimum: 0, maximum: MAX_TIMEOUT_S })),
    metadata: Type.Optional(StringMap),
    envVars: Type.Optional(StringMap),
    allow_internet_access: Type.Optional(Type.Boolean()),
    network: Type.Optional(
      Type.Object(
        {
          allowOut: Type.Optional(Type.Array(Type.String())),
          denyOut: Type.Optional(Type.Array(Type.String())),
        },
        { additionalProperties: true },
      ),
    ),
    autoPause: Type.Optional(Type.Boolean()),
    autoResume: Type.Optional(Type.Object({ enabled: Type.Boolean() }, { additionalProperties: true })),
    autoPauseMemory: Type.Optional(Type.Boolean()),
    secure: Type.Optional(Type.Boolean()),
  },
  { additionalProperties: true },
);
const PauseBody = Type.Object({ memory: Type.Optional(Type.Boolean()) }, { additionalProperties: true });
/** `memory: false` is connect({onResume: "reboot"}): a paused sandbox boots cold over its disk, its memory image ignored. */
const ConnectBody = Type.Object(
  { timeout: Type.Optional(Type.Integer({ minimum: 0, maximum: MAX_TIMEOUT_S })), memory: Type.Optional(Type.Boolean()) },
  { additionalProperties: true },
);
const ForkBody = Type.Object(
  { timeout: Type.Optional(Type.Integer({ minimum: 0, maximum: MAX_TIMEOUT_S })), count: Type.Optional(Type.Integer({ minimum: 1, maximum: MAX_FORK })) },
  { additionalProperties: true },
);
const TimeoutBody = Type.Object({ timeout: Type.Integer({ minimum: 0, maximum: MAX_TIMEOUT_S }) });
const Id = Type.Object({ sandboxID: Type.String() });
const ListQuery = Type.Object(
  {
    metadata: Type.Optional(Type.String()),
    state: Type.Optional(Type.String()),
    limit: Type.Optional(Type.String({ pattern: "^[0-9]{1,6}$" })),
    nextToken: Type.Optional(Type.String()),
    template: Type.Optional(Type.String()),
    startedAfter: Type.Optional(Type.String()),
    order: Type.Optional(Type.Union([Type.Literal("asc"), Type.Literal("desc")])),
  },
  { additionalProperties: true },
);
const NetworkBody = Type.Object({ allowOut: Type.Optional(Type.Array(Type.String())), denyOut: Type.Optional(Type.Array(Type.String())) }, { additionalProperties: true });

/**
 * A sandbox made from a snapshot: its memory and disk as they were, processes running. It keeps
 * the snapshot's network unless the create asks for another mode or allowlist; egress rules, a
 * deny list and port settings are set on it once it runs.
 */
async function fromSnapshot(forge: Forge, snapshotId: string, b: Static<typeof NewSandbox>, network: ReturnType<typeof networkOf>) {
  if ((b as Record<string, unknown>).volumeMounts !== undefined) throw badRequest("volumeMounts cannot be given to a sandbox made from a snapshot: its disks come with it");
  if (portAccessOf(b.network)) throw badRequest("network.allowPublicTraffic and network.maskRequestHost cannot be set on a sandbox made from a snapshot: they come with it");
  const [sb] = await forge.snapshots.restore(snapshotId, {
    ttlMs: (b.timeout ?? DEFAULT_TIMEOUT_S) * 1000,
    metadata: b.metadata,
    env: b.envVars,
    lifecycle: lifecycleOf(b),
    ...(network.network !== undefined ? { network: network.network, allow: network.allow } : {}),
  });
  try {
    if (network.deny || network.egressRules) await forge.network.setEgress(sb.id, { deny: network.deny, rules: network.egressRules });
  } catch (e) {
    await forge.sandboxes.destroy(sb.id, "e2b", "failed").catch(ignore("the sandbox may be gone already; the create's error is the one reported"));
    throw e;
  }
  return sb;
}

/** E2B's lifecycle fields as our own, checked as E2B's server checks them (docs/e2b.md). */
function lifecycleOf(b: Static<typeof NewSandbox>): SpawnOptions["lifecycle"] {
  if (b.autoPauseMemory === false && !b.autoPause) throw badRequest("autoPauseMemory: false needs autoPause: true");
  if (b.autoPauseMemory === false && b.autoResume?.enabled) throw badRequest("autoPauseMemory: false cannot be auto-resumed (a filesystem-only pause boots cold)");
  if (!b.autoPause && !b.autoResume?.enabled) return undefined;
  // After an auto-resume it lives as long as it was created to, and 5 minutes at least (E2B's rule).
  const resumeTtlMs = Math.max(b.timeout ?? DEFAULT_TIMEOUT_S, AUTO_RESUME_MIN_S) * 1000;
  return { onExpiry: b.autoPause ? "pause" : "destroy", autoResume: !!b.autoResume?.enabled, resumeTtlMs, ...(b.autoPauseMemory === false ? { pauseMemory: false } : {}) };
}

/** E2B's error body. */
function e2bError(reply: FastifyReply, err: unknown): FastifyReply {
  const e = toApiError(err);
  return reply
    .status(e.status)
    .type("application/json")
    .send({ code: e.status, message: capMessage(e.message) });
}

/** A sandbox that is running, or paused when `paused` allows it (404 otherwise, which the SDKs read as "not found"). */
function running(forge: Forge, id: string, paused = false): SandboxRow {
  const row = forge.sandboxes.get(id);
  if (row.state !== "running" && row.state !== "creating" && !(paused && row.state === "paused")) throw sandboxGone(id, `sandbox ${id} is ${row.state}`);
  return row;
}

/** Parses E2B's metadata filter: `k=v&k2=v2`, each key and value URL-encoded once more. */
function metadataFilter(q: string | undefined): [string, string][] {
  if (!q) return [];
  return [...new URLSearchParams(q)].map(([k, v]) => {
    try {
      return [decodeURIComponent(k), decodeURIComponent(v)] as [string, string];
    } catch {
      throw badRequest(`metadata: "${k}=${v}" is not URL-encoded`);
    }
  });
}

export async function controlPlaneRoutes(app: FastifyInstance, { forge, domain, apiKey }: { forge: Forge; domain?: string; apiKey?: string }): Promise<void> {
  app.setErrorHandler((err, _req, reply) => e2bError(reply, err));
  await app.register(secretRoutes, { forge });
  await app.register(snapshotRoutes, { forge });
  await app.register(teamRoutes, { forge, apiKey });
  await app.register(logRoutes, { forge });
  await app.register(volumeRoutes, { forge });
  await app.register(templateBuildRoutes, { forge });

  const create = async (req: FastifyRequest<{ Body: Static<typeof NewSandbox> }>, reply: FastifyReply) => {
    const b = req.body;
    const mcp = checkMcp((b as Record<string, unknown>).mcp);
    const volumes = await volumeMountsOf(forge, (b as Record<string, unknown>).volumeMounts);
    refuseUnsupported(b, b.network, "network.");
    const network = networkOf(b.network, b.allow_internet_access);
    if (network.egressRules) forge.network.checkRules(network.egressRules, "network.rules");
    const snapshot = snapshotFor(forge, b.templateID);
    const sb = snapshot
      ? await fromSnapshot(forge, snapshot.id, b, network)
      : await forge.sandboxes.spawn({
          ...(await spawnTarget(forge, b.templateID)),
          env: b.envVars,
          metadata: b.metadata,
          ttlMs: (b.timeout ?? DEFAULT_TIMEOUT_S) * 1000,
          lifecycle: lifecycleOf(b),
          ...network,
          portAccess: portAccessOf(b.network),
          volumes,
        });
    // The SDK runs commands as `user` unless told otherwise: it exists before create answers.
    await forge.sandboxes.withAccount(sb, { name: DEFAULT_USER, home: DEFAULT_HOME }, "e2b");
    try {
      // The SDK runs `mcp-gateway --config …` itself as soon as create answers.
      if (mcp || b.templateID === MCP_GATEWAY_TEMPLATE) await sb.installMcpGateway();
    } catch (e) {
      await forge.sandboxes.destroy(sb.id, "e2b", "failed").catch(ignore("the sandbox may be gone already; the create's error is the one reported"));
      throw new ForgevmError("BAD_REQUEST", `template "${b.templateID}": ${(e as Error).message}`);
    }
    if (b.templateID === CODE_INTERPRETER_TEMPLATE) {
      // As E2B's does, the sandbox answers create with its Python context ready for runCode.
      await sb.code.prepare("python", DEFAULT_USER, DEFAULT_HOME).catch(ignore("a warm-up: the first run starts the kernel itself if this failed"));
    }
    return reply.status(201).send(sandboxView(forge, forge.sandboxes.get(sb.id), domainFor(req, domain)));
  };
  app.post("/v2/sandboxes", { schema: { body: NewSandbox, hide: true } }, create);
  app.post("/sandboxes", { schema: { body: NewSandbox, hide: true } }, create);

  const connect = async (req: FastifyRequest<{ Params: Static<typeof Id>; Body: Static<typeof ConnectBody> | undefined }>, reply: FastifyReply) => {
    const id = req.params.sandboxID;
    const row = running(forge, id, true);
    const timeout = req.body?.timeout;
    if (row.state === "paused") {
      // Resuming restores the machine as it was paused, processes included; a reboot boots it cold over its disk.
      await forge.sandboxes.resume(id, (timeout ?? DEFAULT_TIMEOUT_S) * 1000, { reboot: req.body?.memory === false });
      return reply.status(201).send(sandboxView(forge, forge.sandboxes.get(id), domainFor(req, domain)));
    }
    // Connecting never shortens a sandbox's life.
    if (timeout !== undefined && Date.parse(row.expires_at) < Date.now() + timeout * 1000) forge.sandboxes.extend(id, timeout * 1000);
    return reply.status(200).send(sandboxView(forge, forge.sandboxes.get(id), domainFor(req, domain)));
  };
  app.post("/v2/sandboxes/:sandboxID/connect", { schema: { params: Id, body: ConnectBody, hide: true } }, connect);
  app.post("/sandboxes/:sandboxID/connect", { schema: { params: Id, body: ConnectBody, hide: true } }, connect);

  const list = async (req: FastifyRequest<{ Querystring: Static<typeof ListQuery> }>, reply: FastifyReply) => {
    const q = req.query;
    const states = (q.state ?? "running,paused").split(",").filter(Boolean);
    for (const s of states) if (s !== "running" && s !== "paused") throw badRequest(`state: "${s}" is not one of running, paused`);
    const meta = metadataFilter(q.metadata);
    const limit = Math.min(Math.max(Number(q.limit ?? 100), 1), 1000);
    const after = q.startedAfter === undefined ? null : Date.parse(q.startedAfter);
    if (after !== null && Number.isNaN(after)) throw badRequest(`startedAfter: "${q.startedAfter}" is not a date and time (RFC 3339)`);
    let rows = forge.sandboxes
      .list(undefined, ["creating", "running", "paused"])
      .filter((r) => states.includes(e2bState(r)))
      .filter((r) => meta.every(([k, v]) => r.metadata?.[k] === v))
      .filter((r) => !q.template || templateIdOf(forge, r) === q.template)
      .filter((r) => after === null || Date.parse(r.created_at) > after);
    // Newest first unless asked otherwise; the token is the last id of the page before.
    if (q.order === "asc") rows.reverse();
    if (q.nextToken) {
      const at = rows.findIndex((r) => r.id === q.nextToken);
      if (at < 0) throw badRequest("nextToken: no such position (the sandbox it points at is gone); list again from the start");
      rows = rows.slice(at + 1);
    }
    const page = rows.slice(0, limit);
    if (rows.length > limit) reply.header("x-next-token", page[page.length - 1].id);
    return reply.send(page.map((r) => listedView(forge, r)));
  };
  app.get("/v2/sandboxes", { schema: { querystring: ListQuery, hide: true } }, list);
  app.get("/sandboxes", { schema: { querystring: ListQuery, hide: true } }, list);

  app.get("/sandboxes/:sandboxID", { schema: { params: Id, hide: true } }, async (req: FastifyRequest<{ Params: Static<typeof Id> }>) => {
    return detailView(forge, running(forge, req.params.sandboxID, true), domainFor(req, domain));
  });

  app.delete("/sandboxes/:sandboxID", { schema: { params: Id, hide: true } }, async (req: FastifyRequest<{ Params: Static<typeof Id> }>, reply) => {
    running(forge, req.params.sandboxID, true);
    await forge.sandboxes.destroy(req.params.sandboxID, "e2b");
    return reply.status(204).send();
  });

  app.post(
    "/sandboxes/:sandboxID/timeout",
    { schema: { params: Id, body: TimeoutBody, hide: true } },
    async (req: FastifyRequest<{ Params: Static<typeof Id>; Body: Static<typeof TimeoutBody> }>, reply) => {
      running(forge, req.params.sandboxID);
      forge.sandboxes.extend(req.params.sandboxID, req.body.timeout * 1000);
      return reply.status(204).send();
    },
  );

  app.post(
    "/sandboxes/:sandboxID/pause",
    { schema: { params: Id, body: Type.Optional(PauseBody), hide: true } },
    async (req: FastifyRequest<{ Params: Static<typeof Id>; Body: Static<typeof PauseBody> | undefined }>, reply) => {
      const row = running(forge, req.params.sandboxID, true);
      // E2B's answer for a sandbox that is paused already: the SDK's pause() returns false.
      if (row.state === "paused") throw new ForgevmError("CONFLICT", `sandbox ${row.id} is already paused`);
      // pause({keepMemory: false}) sends memory: false: the disk only, resumed (by connect) with a cold boot.
      await forge.sandboxes.pause(row.id, { memory: req.body?.memory });
      return reply.status(204).send();
    },
  );

  app.post(
    "/sandboxes/:sandboxID/fork",
    { schema: { params: Id, body: ForkBody, hide: true } },
    async (req: FastifyRequest<{ Params: Static<typeof Id>; Body: Static<typeof ForkBody> | undefined }>, reply) => {
      running(forge, req.params.sandboxID);
      const timeout = req.body?.timeout;
      // One snapshot, all copies at once: they start together or not at all, so no entry carries an error.
      const r = await forge.snapshots.fork(req.params.sandboxID, { count: req.body?.count ?? 1, ttlMs: timeout !== undefined ? timeout * 1000 : undefined });
      return reply.status(201).send(r.sandboxes.map((sb) => ({ sandbox: sandboxView(forge, forge.sandboxes.get(sb.id), domainFor(req, domain)) })));
    },
  );

  app.get("/sandboxes/:sandboxID/metrics", { schema: { params: Id, hide: true } }, async (req: FastifyRequest<{ Params: Static<typeof Id> }>) => {
    const row = running(forge, req.params.sandboxID);
    const m = await forge.sandboxes.running(row.id).metrics();
    const c = m.cpu;
    const busy = c.user + c.nice + c.system + c.irq + c.softirq + c.steal;
    const now = new Date();
    return [
      {
        timestamp: now.toISOString(),
        timestampUnix: Math.floor(now.getTime() / 1000),
        cpuCount: c.count,
        cpuUsedPct: busy + c.idle + c.iowait > 0 ? Math.round((busy / (busy + c.idle + c.iowait)) * 10000) / 100 : 0,
        memUsed: m.memory.total - m.memory.available,
        memTotal: m.memory.total,
        memCache: Math.max(0, m.memory.available - m.memory.free),
        diskUsed: m.disk.used,
        diskTotal: m.disk.total,
      },
    ];
  });

  app.put(
    "/sandboxes/:sandboxID/network",
    { schema: { params: Id, body: NetworkBody, hide: true } },
    async (req: FastifyRequest<{ Params: Static<typeof Id>; Body: Static<typeof NetworkBody> }>, reply) => {
      refuseUnsupported(req.body, req.body, "");
      const row = running(forge, req.params.sandboxID);
      const change = networkUpdateOf(req.body, hasNic(row.network));
      if (change.rules) forge.network.checkRules(change.rules, "rules");
      await forge.network.setEgress(row.id, change);
      return reply.status(204).send();
    },
  );
}
