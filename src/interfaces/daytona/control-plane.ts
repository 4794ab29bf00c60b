// Daytona's control plane (`/sandbox…` under the Daytona prefix) on our core: create (from an
// image or template name, a one-line `FROM`, or a declarative image built by our Dockerfile
// builder), get by id or name, list with the label filter and a cursor, delete, start, stop,
// labels, the auto-* intervals, and the URLs of the toolbox and of previews. Create and start
// answer once the sandbox runs (`started`), so the SDK never waits on a state.
import { createHash } from "node:crypto";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { Type, type Static } from "typebox";
import type { Forge, SpawnOptions } from "../../core/forge.js";
import type { SandboxRow } from "../../core/types.js";
import { ForgevmError, badRequest, notFound } from "../../http/errors.js";
import { MAX_TTL_MS, noneIfZero } from "../../schemas/durations.js";
import { DISK_MB, MEMORY_MB, VCPUS } from "../../schemas/bounds.js";
import { StringMap } from "../../schemas/fields.js";
import { PREVIEW_TOKEN_QUERY, previewToken } from "./preview.js";
import { SIGNED_DEFAULT_S, SIGNED_MAX_S, type SignedPreviews } from "./signed-preview.js";
import { DEFAULT_AUTO_STOP_MIN, EXTRA, baseUrl, extraOf, labelsOf, sandboxDto, stateOf } from "./views.js";

/** Who the toolbox runs as unless create names a user, and where that user lives. */
export const DEFAULT_USER = "daytona";

/** The longest interval in minutes, as REST's longest TTL: a year. */
const MAX_MINUTES = MAX_TTL_MS / 60_000;

/** An interval route's minutes: from `min` to a year, else a 400 naming `key`. */
function minutesOf(key: string, raw: string, min: number, zero: string): number {
  const n = Number(raw);
  if (n < min || n > MAX_MINUTES) throw badRequest(`${key} must be ${min < 0 ? "-1 (never), " : ""}0 (${zero}) or up to ${MAX_MINUTES} minutes (a year); got ${raw}`);
  return n;
}

const homeOf = (user: string) => (user === "root" ? "/root" : `/home/${user}`);

const CreateBody = Type.Object(
  {
    name: Type.Optional(Type.String({ minLength: 1, maxLength: 63 })),
    snapshot: Type.Optional(Type.String({ minLength: 1 })),
    buildInfo: Type.Optional(
      Type.Object({ dockerfileContent: Type.String({ minLength: 1 }), contextHashes: Type.Optional(Type.Array(Type.String())) }, { additionalProperties: true }),
    ),
    user: Type.Optional(Type.String({ minLength: 1, maxLength: 32, pattern: "^[a-z_][a-z0-9_-]*$" })),
    env: Type.Optional(StringMap),
    labels: Type.Optional(StringMap),
    public: Type.Optional(Type.Boolean()),
    target: Type.Optional(Type.String()),
    cpu: Type.Optional(Type.Integer(VCPUS)),
    gpu: Type.Optional(Type.Integer({ minimum: 0 })),
    // Daytona counts memory and disk in GiB: the same bounds as every interface's MiB.
    memory: Type.Optional(Type.Number({ minimum: MEMORY_MB.minimum / 1024, maximum: MEMORY_MB.maximum / 1024 })),
    disk: Type.Optional(Type.Number({ minimum: DISK_MB.minimum / 1024, maximum: DISK_MB.maximum / 1024 })),
    autoStopInterval: Type.Optional(Type.Integer({ minimum: 0, maximum: MAX_MINUTES })),
    autoPauseInterval: Type.Optional(Type.Integer({ minimum: 0, maximum: MAX_MINUTES })),
    autoArchiveInterval: Type.Optional(Type.Integer({ minimum: 0, maximum: MAX_MINUTES })),
    autoDeleteInterval: Type.Optional(Type.Integer({ minimum: -1, maximum: MAX_MINUTES })),
    ttlMinutes: Type.Optional(Type.Integer({ minimum: 0, maximum: MAX_MINUTES })),
    volumes: Type.Optional(Type.Array(Type.Object({ volumeId: Type.String(), mountPath: Type.String() }, { additionalProperties: true }))),
    networkBlockAll: Type.Optional(Type.Boolean()),
    networkAllowList: Type.Optional(Type.String()),
    domainAllowList: Type.Optional(Type.String()),
  },
  { additionalProperties: true },
);
const Id = Type.Object({ id: Type.String({ minLength: 1 }) });
const Interval = Type.Object({ id: Type.String({ minLength: 1 }), minutes: Type.String({ pattern: "^-?[0-9]{1,9}$" }) });
const PortParams = Type.Object({ id: Type.String({ minLength: 1 }), port: Type.String({ pattern: "^[0-9]{1,5}$" }) });
const SignedQuery = Type.Object({ expiresInSeconds: Type.Optional(Type.String({ pattern: "^[0-9]{1,9}$" })) }, { additionalProperties: true });
const TokenParams = Type.Object({ id: Type.String({ minLength: 1 }), port: Type.String({ pattern: "^[0-9]{1,5}$" }), token: Type.String({ minLength: 1, maxLength: 256 }) });
const LabelsBody = Type.Object({ labels: StringMap }, { additionalProperties: true });
const ListQuery = Type.Object(
  {
    labels: Type.Optional(Type.String()),
    cursor: Type.Optional(Type.String({ pattern: "^[0-9]{1,9}$" })),
    limit: Type.Optional(Type.String({ pattern: "^[0-9]{1,4}$" })),
    id: Type.Optional(Type.String()),
    name: Type.Optional(Type.String()),
    states: Type.Optional(Type.Union([Type.String(), Type.Array(Type.String())])),
  },
  { additionalProperties: true },
);
const PagedQuery = Type.Object(
  {
    labels: Type.Optional(Type.String()),
    page: Type.Optional(Type.String({ pattern: "^[0-9]{1,7}$" })),
    limit: Type.Optional(Type.String({ pattern: "^[0-9]{1,4}$" })),
    states: Type.Optional(Type.Union([Type.String(), Type.Array(Type.String())])),
  },
  { additionalProperties: true },
);
/** Fields of a create we cannot honour: refused by name rather than ignored. */
const REFUSED = ["outboundProxyUrl", "secrets"] as const;

/** A sandbox the caller may see through Daytona (404, Daytona's way, when it is unknown or gone). */
function find(forge: Forge, idOrName: string): SandboxRow {
  let row: SandboxRow | null;
  try {
    row = forge.sandboxes.get(idOrName);
  } catch {
    row = null;
  }
  if (!row || row.state === "destroyed" || row.state === "error") throw notFound(`Sandbox with ID or name ${idOrName} not found`);
  return row;
}

/** The image a create names: a template or image by name, a one-line FROM, or a Dockerfile built here. */
async function imageOf(forge: Forge, b: Static<typeof CreateBody>): Promise<{ image?: string; template?: string }> {
  const named = async (ref: string) => {
    if (forge.templates.list().some((t) => t.name === ref)) return { template: ref };
    if ((await forge.images.list()).some((i) => i.name === ref)) return { image: ref };
    // A reference that names a registry or a tag is pulled, as our spawn does.
    if (/[/:.@]/.test(ref)) return { image: ref };
    throw badRequest(`Snapshot ${ref} not found: name a ForgeVM template or image (forgevm images)`);
  };
  if (b.snapshot && b.buildInfo) throw badRequest("snapshot and buildInfo (image) cannot both be given");
  if (b.snapshot) return named(b.snapshot);
  if (!b.buildInfo) return { image: forge.defaults.image };
  const dockerfile = b.buildInfo.dockerfileContent;
  const from = /^\s*FROM\s+(\S+)\s*$/i.exec(dockerfile.trim());
  if (from && !dockerfile.trim().includes("\n")) return named(from[1]);
  if (b.buildInfo.contextHashes?.length) {
    throw new ForgevmError(
      "BAD_REQUEST",
      "buildInfo.contextHashes: images with local files (addLocalFile, addLocalDir, COPY) need object storage this server does not offer; build the image with `forgevm build` and create from it by name",
    );
  }
  // The same Dockerfile makes the same image: built once, named by its content.
  const tag = `forgevm/daytona-build:${createHash("sha256").update(dockerfile).digest("hex").slice(0, 16)}`;
  if ((await forge.images.list()).some((i) => i.name === tag)) return { image: tag };
  const dir = await mkdtemp(join(tmpdir(), "forgevm-daytona-build-"));
  try {
    await writeFile(join(dir, "Dockerfile"), dockerfile);
    await forge.builds.run(dir, { tag });
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
  return { image: tag };
}

/** The network a create asks for. */
function networkOf(b: Static<typeof CreateBody>): Pick<SpawnOptions, "network" | "allow"> {
  if (b.networkBlockAll) return { network: "none" };
  const allow = [b.networkAllowList, b.domainAllowList]
    .filter((x): x is string => !!x)
    .flatMap((x) => x.split(","))
    .map((x) => x.trim())
    .filter(Boolean);
  return allow.length ? { network: "allowlist", allow } : {};
}

export async function controlPlaneRoutes(
  app: FastifyInstance,
  { forge, urlBase, previewDomain, signed }: { forge: Forge; urlBase: string; previewDomain?: string; signed: SignedPreviews },
): Promise<void> {
  const dto = (req: FastifyRequest, row: SandboxRow) => sandboxDto(row, baseUrl(req, urlBase));

  app.post("/sandbox", { schema: { body: CreateBody, hide: true } }, async (req: FastifyRequest<{ Body: Static<typeof CreateBody> }>, reply: FastifyReply) => {
    const b = req.body;
    for (const f of REFUSED) if ((b as Record<string, unknown>)[f] !== undefined) throw badRequest(`${f} is not supported by this server`);
    if (b.volumes?.length) throw badRequest('volumes: Daytona volumes are not supported yet; mount ForgeVM volumes through our REST API (volumes: ["NAME:/path"])');
    if (b.labels) for (const k of Object.keys(b.labels)) if (k.startsWith(EXTRA)) throw badRequest(`labels.${k}: labels starting with "${EXTRA}" are this server's own`);
    const user = b.user ?? DEFAULT_USER;
    const autoStop = b.autoStopInterval ?? DEFAULT_AUTO_STOP_MIN;
    const metadata: Record<string, string> = { ...b.labels };
    if (b.target !== undefined) metadata[`${EXTRA}target`] = b.target;
    if (b.public) metadata[`${EXTRA}public`] = "true";
    if (b.autoArchiveInterval !== undefined) metadata[`${EXTRA}autoArchiveInterval`] = String(b.autoArchiveInterval);
    if (b.autoDeleteInterval !== undefined) metadata[`${EXTRA}autoDeleteInterval`] = String(b.autoDeleteInterval);
    const sb = await forge.sandboxes.spawn({
      ...(await imageOf(forge, b)),
      name: b.name,
      env: b.env,
      metadata,
      // A Daytona sandbox lives until it is deleted; auto-stop is what frees its memory.
      ttlMs: noneIfZero((b.ttlMinutes ?? 0) * 60_000),
      vcpus: b.cpu,
      memoryMb: b.memory !== undefined ? Math.round(b.memory * 1024) : undefined,
      diskMb: b.disk !== undefined ? Math.round(b.disk * 1024) : undefined,
      user,
      ...networkOf(b),
      ...(b.autoPauseInterval ? { idle: { afterMs: b.autoPauseInterval * 60_000, action: "pause" as const } } : autoStop > 0 ? { idleStopMs: autoStop * 60_000 } : {}),
    });
    await forge.sandboxes.withAccount(sb, { name: user, home: homeOf(user) }, "daytona");
    return reply.status(200).send(dto(req, forge.sandboxes.get(sb.id)));
  });

  /** The sandboxes a list asks for: by labels (JSON), states, id and name. */
  const listed = (q: { labels?: string; states?: string | string[]; id?: string; name?: string }) => {
    let labels: Record<string, unknown> = {};
    if (q.labels) {
      try {
        labels = JSON.parse(q.labels);
      } catch {
        throw badRequest(`labels: not JSON (${q.labels.slice(0, 60)}): send a JSON object of label values`);
      }
      if (typeof labels !== "object" || labels === null || Array.isArray(labels)) throw badRequest("labels must be a JSON object");
    }
    const states = q.states === undefined ? null : (Array.isArray(q.states) ? q.states : [q.states]).flatMap((s) => s.split(","));
    return forge.sandboxes
      .list(undefined, ["creating", "running", "paused", "stopped", "created"])
      .filter((r) => Object.entries(labels).every(([k, v]) => labelsOf(r)[k] === v))
      .filter((r) => !states || states.includes(stateOf(r)))
      .filter((r) => !q.id || r.id === q.id)
      .filter((r) => !q.name || (r.name ?? r.id) === q.name);
  };

  app.get("/sandbox", { schema: { querystring: ListQuery, hide: true } }, async (req: FastifyRequest<{ Querystring: Static<typeof ListQuery> }>) => {
    const q = req.query;
    const rows = listed(q);
    const start = Number(q.cursor ?? 0);
    const limit = Math.min(Math.max(Number(q.limit ?? 100), 1), 1000);
    const page = rows.slice(start, start + limit);
    return { items: page.map((r) => dto(req, r)), nextCursor: start + limit < rows.length ? String(start + limit) : null };
  });

  // The list of the SDKs before 0.16x (Mastra and LangChain pin 0.143): pages numbered from 1.
  app.get("/sandbox/paginated", { schema: { querystring: PagedQuery, hide: true } }, async (req: FastifyRequest<{ Querystring: Static<typeof PagedQuery> }>) => {
    const q = req.query;
    const rows = listed(q);
    const limit = Math.min(Math.max(Number(q.limit ?? 100), 1), 200);
    const page = Math.max(Number(q.page ?? 1), 1);
    const items = rows.slice((page - 1) * limit, page * limit);
    return { items: items.map((r) => dto(req, r)), total: rows.length, page, totalPages: Math.max(1, Math.ceil(rows.length / limit)) };
  });

  app.get("/sandbox/:id", { schema: { params: Id, hide: true } }, async (req: FastifyRequest<{ Params: Static<typeof Id> }>) => dto(req, find(forge, req.params.id)));

  app.delete("/sandbox/:id", { schema: { params: Id, hide: true } }, async (req: FastifyRequest<{ Params: Static<typeof Id> }>) => {
    const row = find(forge, req.params.id);
    await forge.sandboxes.destroy(row.id, "daytona");
    return dto(req, forge.sandboxes.get(row.id));
  });

  app.post("/sandbox/:id/start", { schema: { params: Id, hide: true } }, async (req: FastifyRequest<{ Params: Static<typeof Id> }>) => {
    const row = find(forge, req.params.id);
    if (row.state === "paused") await forge.sandboxes.resume(row.id);
    else if (row.state === "stopped" || row.state === "created") await forge.sandboxes.start(row.id);
    return dto(req, forge.sandboxes.get(row.id));
  });

  app.post("/sandbox/:id/stop", { schema: { params: Id, hide: true } }, async (req: FastifyRequest<{ Params: Static<typeof Id> }>) => {
    const row = find(forge, req.params.id);
    // autoDeleteInterval 0 (the SDK's `ephemeral`) is deleted when it stops.
    if (extraOf(row, "autoDeleteInterval") === "0") {
      await forge.sandboxes.destroy(row.id, "daytona", "auto-delete");
    } else if (row.state === "paused") {
      await forge.sandboxes.resume(row.id);
      await forge.sandboxes.stop(row.id);
    } else if (row.state === "running") {
      await forge.sandboxes.stop(row.id);
    }
    return dto(req, forge.sandboxes.get(row.id));
  });

  app.put(
    "/sandbox/:id/labels",
    { schema: { params: Id, body: LabelsBody, hide: true } },
    async (req: FastifyRequest<{ Params: Static<typeof Id>; Body: Static<typeof LabelsBody> }>) => {
      const row = find(forge, req.params.id);
      for (const k of Object.keys(req.body.labels)) if (k.startsWith(EXTRA)) throw badRequest(`labels.${k}: labels starting with "${EXTRA}" are this server's own`);
      const own = Object.fromEntries(Object.entries(row.metadata ?? {}).filter(([k]) => k.startsWith(EXTRA)));
      const updated = forge.sandboxes.setMetadata(row.id, { ...own, ...req.body.labels });
      return { labels: labelsOf(updated) };
    },
  );

  // The auto-* intervals, in minutes: auto-stop is our idle stop, auto-pause our idle pause; archive and delete are kept and shown.
  for (const [route, key, action] of [
    ["autostop", "autoStopInterval", "stop"],
    ["autopause", "autoPauseInterval", "pause"],
  ] as const) {
    app.post(`/sandbox/:id/${route}/:minutes`, { schema: { params: Interval, hide: true } }, async (req: FastifyRequest<{ Params: Static<typeof Interval> }>) => {
      const row = find(forge, req.params.id);
      const n = minutesOf(key, req.params.minutes, 0, "off");
      forge.sandboxes.setIdle(row.id, n > 0 ? { ms: n * 60_000, action } : null);
      return {};
    });
  }
  for (const [route, key, min] of [
    ["autoarchive", "autoArchiveInterval", 0],
    ["autodelete", "autoDeleteInterval", -1],
  ] as const) {
    app.post(`/sandbox/:id/${route}/:minutes`, { schema: { params: Interval, hide: true } }, async (req: FastifyRequest<{ Params: Static<typeof Interval> }>) => {
      const row = find(forge, req.params.id);
      const n = minutesOf(key, req.params.minutes, min, key === "autoDeleteInterval" ? "when stopped" : "at once");
      forge.sandboxes.setMetadata(row.id, { ...row.metadata, [`${EXTRA}${key}`]: String(n) });
      return {};
    });
  }
  app.post("/sandbox/:id/ttl/:minutes", { schema: { params: Interval, hide: true } }, async (req: FastifyRequest<{ Params: Static<typeof Interval> }>) => {
    const row = find(forge, req.params.id);
    const n = minutesOf("ttl", req.params.minutes, 0, "none");
    forge.sandboxes.extend(row.id, noneIfZero(Math.max(0, n) * 60_000));
    return {};
  });
  app.post("/sandbox/:id/last-activity", { schema: { params: Id, hide: true } }, async (req: FastifyRequest<{ Params: Static<typeof Id> }>) => {
    find(forge, req.params.id);
    return {};
  });

  app.get("/sandbox/:id/toolbox-proxy-url", { schema: { params: Id, hide: true } }, async (req: FastifyRequest<{ Params: Static<typeof Id> }>) => {
    find(forge, req.params.id);
    return { url: `${baseUrl(req, urlBase)}/toolbox` };
  });

  app.get("/sandbox/:id/ports/:port/preview-url", { schema: { params: PortParams, hide: true } }, async (req: FastifyRequest<{ Params: Static<typeof PortParams> }>) => {
    const row = find(forge, req.params.id);
    const port = Number(req.params.port);
    if (port < 1 || port > 65535) throw badRequest(`port must be 1-65535, got ${port}`);
    // Under a preview domain (wildcard DNS pointing here), the form Daytona's own URLs have; else a path on this server.
    const scheme = baseUrl(req, urlBase).split(":")[0];
    const url = previewDomain ? `${scheme}://${port}-${row.id}.${previewDomain}` : `${baseUrl(req, urlBase)}/preview/${row.id}/${port}`;
    return { sandboxId: row.id, url, token: previewToken(forge, row.id) };
  });

  app.get(
    "/sandbox/:id/ports/:port/signed-preview-url",
    { schema: { params: PortParams, querystring: SignedQuery, hide: true } },
    async (req: FastifyRequest<{ Params: Static<typeof PortParams>; Querystring: Static<typeof SignedQuery> }>) => {
      const row = find(forge, req.params.id);
      const port = Number(req.params.port);
      if (port < 1 || port > 65535) throw badRequest(`port must be 1-65535, got ${port}`);
      const seconds = req.query.expiresInSeconds === undefined ? SIGNED_DEFAULT_S : Number(req.query.expiresInSeconds);
      if (seconds < 1 || seconds > SIGNED_MAX_S) throw badRequest(`expiresInSeconds must be 1-${SIGNED_MAX_S}, got ${seconds}`);
      const { token, listenPort } = await signed.sign(row.id, port, seconds);
      const base = new URL(baseUrl(req, ""));
      base.port = String(listenPort);
      return { sandboxId: row.id, port, token, url: `${base.origin}/?${PREVIEW_TOKEN_QUERY}=${token}` };
    },
  );
  app.post(
    "/sandbox/:id/ports/:port/signed-preview-url/:token/expire",
    { schema: { params: TokenParams, hide: true } },
    async (req: FastifyRequest<{ Params: Static<typeof TokenParams> }>) => {
      const row = find(forge, req.params.id);
      if (!signed.expire(row.id, Number(req.params.port), req.params.token)) throw notFound(`no signed preview URL of port ${req.params.port} has that token (or it has expired)`);
      return {};
    },
  );

  // Images with local files go through object storage this server does not offer.
  app.get("/object-storage/push-access", { schema: { hide: true } }, async (_req, reply) =>
    reply.status(501).send({
      statusCode: 501,
      error: "Not Implemented",
      message:
        "images with local files (addLocalFile, addLocalDir, COPY) need object storage this server does not offer; build with `forgevm build` and create from the image by name",
    }),
  );
}
