// E2B's volumes on our named volumes (core/volumes.ts): create, list, get, destroy on the control
// plane (API key), `volumeMounts` at create, and the content API under /volumecontent/{id}, which
// the SDK reaches at E2B_VOLUME_API_URL with the volume's token as a Bearer and no API key. A
// volume's id is a UUID made from its name and creation time; its token is derived from the id
// with this server's secret, like sandboxes' access tokens, so it outlives restarts.
import { capMessage } from "../../http/error-body.js";
import { createHash } from "node:crypto";
import { posix } from "node:path";
import { Readable } from "node:stream";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { Type, type Static } from "typebox";
import type { Forge } from "../../core/forge.js";
import type { VolumeEntry } from "../../core/volume-content/types.js";
import type { SandboxRow } from "../../core/types.js";
import type { VolumeInfo } from "../../core/volumes.js";
import { badRequest, ForgevmError } from "../../http/errors.js";
import { toApiError } from "../../core/error-map.js";
import { UNIX_ID } from "../../schemas/bounds.js";
import { UnixId } from "../../schemas/fields.js";

export const CONTENT_PREFIX = "/volumecontent/";
const TOKEN_PURPOSE = "e2b-volume";
const NAME = /^[a-zA-Z0-9_-]{1,63}$/;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** A volume's E2B id. */
export function volumeIdOf(v: Pick<VolumeInfo, "name" | "created_at">): string {
  const h = createHash("sha256").update(`volume:${v.name}:${v.created_at}`).digest("hex");
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-4${h.slice(13, 16)}-8${h.slice(17, 20)}-${h.slice(20, 32)}`;
}

/** The volume an E2B id names; a malformed id is a 400, an unknown one null. */
async function byId(forge: Forge, id: string): Promise<VolumeInfo | null> {
  if (!UUID.test(id)) throw badRequest(`volumeID: "${id.slice(0, 80)}" is not a volume id (a UUID)`);
  return (await forge.volumes.list()).find((v) => volumeIdOf(v) === id) ?? null;
}

function tokenOf(forge: Forge, id: string): string {
  return forge.sandboxes.accessToken(`volume:${id}`, TOKEN_PURPOSE);
}

/** E2B's `VolumeAndToken`. */
function withToken(forge: Forge, v: VolumeInfo) {
  const volumeID = volumeIdOf(v);
  return { volumeID, name: v.name, token: tokenOf(forge, volumeID) };
}

/** `volumeMounts` ([{name, path}]) as our spawn's volumes ("name:/path"); a 400 naming the mount, as E2B's server words it. */
export async function volumeMountsOf(forge: Forge, raw: unknown): Promise<string[] | undefined> {
  if (raw === undefined) return undefined;
  if (!Array.isArray(raw)) throw badRequest("volumeMounts must be a list of {name, path}");
  const known = new Set((await forge.volumes.list()).map((v) => v.name));
  const paths = new Set<string>();
  return raw.map((m, i) => {
    const bad = (why: string) => badRequest(`invalid mounts: - volume mount #${i}: ${why}`);
    if (typeof m !== "object" || m === null || typeof m.name !== "string" || typeof m.path !== "string") throw bad("needs a name and a path");
    if (!known.has(m.name)) throw bad(`volume "${m.name}" not found`);
    if (!m.path.startsWith("/") || posix.normalize(m.path) !== m.path || m.path === "/" || m.path.endsWith("/")) throw bad(`path "${m.path}" must be absolute and clean`);
    if (paths.has(m.path)) throw bad(`path "${m.path}" is used twice`);
    paths.add(m.path);
    return `${m.name}:${m.path}`;
  });
}

/** A sandbox's mounts in E2B's shape. */
export function mountsView(row: SandboxRow): { name: string; path: string }[] {
  return (row.volumes ?? []).map((m) => ({ name: m.name, path: m.path }));
}

const IdParam = Type.Object({ volumeID: Type.String({ minLength: 1, maxLength: 64 }) });
const CreateBody = Type.Object({ name: Type.String() }, { additionalProperties: true });

/** The uid and gid of the default user `user` in E2B's templates and in our built-in images. */
const E2B_USER_IDS = { uid: 1000, gid: 1000 };

/** The control plane's volume routes. */
export async function volumeRoutes(app: FastifyInstance, { forge }: { forge: Forge }): Promise<void> {
  app.post("/volumes", { schema: { body: CreateBody, hide: true } }, async (req: FastifyRequest<{ Body: Static<typeof CreateBody> }>, reply) => {
    const name = req.body.name;
    if (!NAME.test(name)) throw badRequest(`name: "${String(name).slice(0, 80)}" must be 1-63 letters, digits, "_" or "-"`);
    if ((await forge.volumes.list()).some((v) => v.name === name)) throw badRequest(`Volume with name '${name}' already exists`);
    // Usable by the sandbox's default user, as E2B's volumes are: E2B's templates, and ours, make
    // that user with uid and gid 1000, and what the content API adds goes to the directory's owner.
    return reply.status(201).send(withToken(forge, await forge.volumes.create(name, undefined, undefined, E2B_USER_IDS)));
  });

  app.get("/volumes", { schema: { hide: true } }, async () => (await forge.volumes.list()).map((v) => ({ volumeID: volumeIdOf(v), name: v.name })));

  app.get("/volumes/:volumeID", { schema: { params: IdParam, hide: true } }, async (req: FastifyRequest<{ Params: Static<typeof IdParam> }>, reply) => {
    const v = await byId(forge, req.params.volumeID);
    if (!v) return reply.status(404).send({ code: 404, message: `volume ${req.params.volumeID} not found` });
    return withToken(forge, v);
  });

  app.delete("/volumes/:volumeID", { schema: { params: IdParam, hide: true } }, async (req: FastifyRequest<{ Params: Static<typeof IdParam> }>, reply) => {
    const v = await byId(forge, req.params.volumeID);
    if (!v) return reply.status(404).send({ code: 404, message: `volume ${req.params.volumeID} not found` });
    await forge.volumes.remove(v.name);
    return reply.status(204).send();
  });
}

const PathQuery = Type.Object(
  {
    path: Type.String({ minLength: 1, maxLength: 4096 }),
    depth: Type.Optional(Type.String({ pattern: "^[0-9]{1,3}$" })),
    uid: Type.Optional(Type.String({ pattern: "^[0-9]{1,10}$" })),
    gid: Type.Optional(Type.String({ pattern: "^[0-9]{1,10}$" })),
    mode: Type.Optional(Type.String({ pattern: "^[0-9]{1,5}$" })),
    force: Type.Optional(Type.Union([Type.Literal("true"), Type.Literal("false")])),
  },
  { additionalProperties: true },
);
const MetaBody = Type.Object(
  { uid: Type.Optional(UnixId()), gid: Type.Optional(UnixId()), mode: Type.Optional(Type.Integer({ minimum: 0, maximum: 0o7777 })) },
  { additionalProperties: false },
);

type ContentRequest = FastifyRequest<{ Params: Static<typeof IdParam>; Querystring: Static<typeof PathQuery> }>;

/** uid, gid and mode from the query, numbers as the SDK sends them. */
function metaOf(q: Static<typeof PathQuery>) {
  const mode = q.mode !== undefined ? Number(q.mode) : undefined;
  if (mode !== undefined && mode > 0o7777) throw badRequest("mode must be permission bits (at most 4095)");
  const id = (field: "uid" | "gid") => {
    const v = q[field] === undefined ? undefined : Number(q[field]);
    if (v !== undefined && v > UNIX_ID.maximum) throw badRequest(`${field} must be 0-${UNIX_ID.maximum}, got ${q[field]}`);
    return v;
  };
  return { uid: id("uid"), gid: id("gid"), mode };
}

/** The content API: the volume's token (Bearer) instead of the API key; errors as {code, message} with the status. */
export async function volumeContentRoutes(app: FastifyInstance, { forge }: { forge: Forge }): Promise<void> {
  app.setErrorHandler((err, _req, reply) => {
    const e = toApiError(err);
    return reply.status(e.status).send({ code: e.code.toLowerCase(), message: capMessage(e.message) });
  });
  // The body of a file write is the file: passed on as it arrives.
  app.addContentTypeParser("application/octet-stream", (_req, _payload, done) => done(null));

  const hasVolumeToken = (req: FastifyRequest) => {
    const id = (req.params as { volumeID?: string }).volumeID ?? "";
    const bearer = /^Bearer\s+(.+)$/i.exec(String(req.headers.authorization ?? ""))?.[1];
    return !!bearer && forge.sandboxes.checkAccessToken(`volume:${id}`, TOKEN_PURPOSE, bearer);
  };
  // The token before anything else (the body, the query): same 401 for an unknown id and a wrong
  // token, and the connection closes, so a body that follows is never read.
  app.addHook("onRequest", async (req, reply) => {
    if (!hasVolumeToken(req)) {
      reply.header("connection", "close");
      throw new ForgevmError("UNAUTHORIZED", "missing or wrong volume token: send the token Volume.create or Volume.getInfo gave as Authorization: Bearer");
    }
  });

  /** The volume a content call names (its token was checked on the request). */
  const volumeOf = async (req: ContentRequest): Promise<string> => {
    const id = req.params.volumeID;
    const v = await byId(forge, id);
    if (!v) throw new ForgevmError("NOT_FOUND", `volume ${id} not found`);
    return v.name;
  };
  const schema = { params: IdParam, querystring: PathQuery, hide: true };
  const send = (reply: FastifyReply, e: VolumeEntry) => reply.send(e);

  app.get("/volumecontent/:volumeID/dir", { schema }, async (req: ContentRequest) => {
    const name = await volumeOf(req);
    const depth = Math.max(1, Math.min(Number(req.query.depth ?? 1), 32));
    return forge.volumes.files(name, false, (f) => f.list(req.query.path, depth));
  });
  app.post("/volumecontent/:volumeID/dir", { schema }, async (req: ContentRequest, reply) => {
    const name = await volumeOf(req);
    return send(reply, await forge.volumes.files(name, true, (f) => f.mkdir(req.query.path, metaOf(req.query), req.query.force === "true")));
  });
  app.get("/volumecontent/:volumeID/path", { schema }, async (req: ContentRequest, reply) => {
    const name = await volumeOf(req);
    return send(reply, await forge.volumes.files(name, false, (f) => f.stat(req.query.path)));
  });
  app.patch("/volumecontent/:volumeID/path", { schema: { ...schema, body: MetaBody } }, async (req: ContentRequest, reply) => {
    const name = await volumeOf(req);
    const body = req.body as Static<typeof MetaBody>;
    return send(reply, await forge.volumes.files(name, true, (f) => f.setMetadata(req.query.path, body)));
  });
  app.delete("/volumecontent/:volumeID/path", { schema }, async (req: ContentRequest, reply) => {
    const name = await volumeOf(req);
    await forge.volumes.files(name, true, (f) => f.remove(req.query.path));
    return reply.status(204).send();
  });
  app.get("/volumecontent/:volumeID/file", { schema }, async (req: ContentRequest, reply) => {
    const name = await volumeOf(req);
    const stream = await forge.volumes.files(name, false, (f) => f.read(req.query.path));
    return reply.type("application/octet-stream").send(stream);
  });
  app.put("/volumecontent/:volumeID/file", { schema }, async (req: ContentRequest, reply) => {
    const name = await volumeOf(req);
    const body = Readable.from(req.raw);
    return send(reply, await forge.volumes.files(name, true, (f) => f.write(req.query.path, body, metaOf(req.query), req.query.force === "true")));
  });
}
