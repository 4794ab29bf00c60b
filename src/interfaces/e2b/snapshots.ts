// E2B's snapshots on ours (core/snapshots): createSnapshot, listSnapshots, deleteSnapshot, and
// Sandbox.create(snapshotId) restoring memory and disk. A named snapshot is a template of the
// team's, `<team>/<name>:<tag>` (tag "default" unless given), kept here as our snapshot named
// `<name>:<tag>`; taking it again replaces it, as a new build of E2B's does. An unnamed one is
// `<our snapshot id>:default`, with no names. Every snapshot of a sandbox this server has shows
// up, so ones taken through our REST API or CLI can be restored through the SDK too.
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { Type, type Static } from "typebox";
import type { Forge } from "../../core/forge.js";
import type { SnapshotRow } from "../../core/types.js";
import { badRequest } from "../../http/errors.js";
import { TEAM_SLUG } from "./teams.js";

const DEFAULT_TAG = "default";
const PART = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$/;

const Id = Type.Object({ sandboxID: Type.String({ minLength: 1, maxLength: 128 }) });
const Body = Type.Object({ name: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })) }, { additionalProperties: true });
const ListQuery = Type.Object(
  {
    sandboxID: Type.Optional(Type.String({ maxLength: 128 })),
    name: Type.Optional(Type.String({ maxLength: 200 })),
    limit: Type.Optional(Type.String({ pattern: "^[0-9]{1,4}$" })),
    nextToken: Type.Optional(Type.String({ maxLength: 64 })),
  },
  { additionalProperties: true },
);
const TemplateParam = Type.Object({ templateID: Type.String({ minLength: 1, maxLength: 300 }) });

/** A snapshot reference split: the template (a name, or our snapshot's id) and the tag; `team` when the slug was given. */
interface Ref {
  template: string;
  tag: string | null;
  team: boolean;
}

/** Parses `[slug/]name[:tag]`; null when it cannot name a snapshot (another team's slug, or not the shape). */
function parseRef(s: string): Ref | null {
  let rest = s;
  let team = false;
  const slash = rest.indexOf("/");
  if (slash >= 0) {
    if (rest.slice(0, slash) !== TEAM_SLUG) return null;
    rest = rest.slice(slash + 1);
    team = true;
  }
  const colon = rest.indexOf(":");
  const template = colon >= 0 ? rest.slice(0, colon) : rest;
  const tag = colon >= 0 ? rest.slice(colon + 1) : null;
  if (!PART.test(template) || (tag !== null && !PART.test(tag))) return null;
  return { template, tag, team };
}

/** E2B's name of one of our snapshots: its id and its names. */
function e2bId(row: SnapshotRow): { snapshotID: string; names: string[] } {
  if (!row.name) return { snapshotID: `${row.id}:${DEFAULT_TAG}`, names: [] };
  const colon = row.name.indexOf(":");
  const template = colon >= 0 ? row.name.slice(0, colon) : row.name;
  const tag = colon >= 0 ? row.name.slice(colon + 1) : DEFAULT_TAG;
  return { snapshotID: `${TEAM_SLUG}/${template}:${tag}`, names: [`${TEAM_SLUG}/${template}`] };
}

/** Snapshots a person can restore (not bases, forks or pauses), newest first. */
function userSnapshots(forge: Forge): SnapshotRow[] {
  return forge.snapshots.list().filter((r) => r.kind === "sandbox");
}

/** The snapshots a reference names: one tag, or with none every tag of the template. */
function matching(forge: Forge, ref: Ref): SnapshotRow[] {
  return userSnapshots(forge).filter((r) => {
    if (!r.name) return !ref.team && r.id === ref.template && (ref.tag === null || ref.tag === DEFAULT_TAG);
    const { snapshotID } = e2bId(r);
    const [template, tag] = snapshotID.slice(TEAM_SLUG.length + 1).split(":");
    return template === ref.template && (ref.tag === null || ref.tag === tag);
  });
}

/** The snapshot a templateID names, if it names one (`id`, `id:tag`, `slug/name[:tag]`): the default tag when none is given. */
export function snapshotFor(forge: Forge, templateID: string): SnapshotRow | null {
  const ref = parseRef(templateID);
  if (!ref) return null;
  return matching(forge, { ...ref, tag: ref.tag ?? DEFAULT_TAG })[0] ?? null;
}

/** Our snapshot name for E2B's `name` (`[slug/]name[:tag]`); a 400 naming the field when it is not one. */
function nameOf(given: string): string {
  const ref = parseRef(given);
  if (!ref) {
    const slash = given.indexOf("/");
    if (slash >= 0 && given.slice(0, slash) !== TEAM_SLUG) throw badRequest(`name: "${given.slice(0, slash)}" is not your team (yours is "${TEAM_SLUG}")`);
    throw badRequest(`name: "${given.slice(0, 100)}" is not a snapshot name ([${TEAM_SLUG}/]name[:tag], letters, digits, ".", "_" and "-")`);
  }
  if (/^snap-[0-9a-f]+$/.test(ref.template)) throw badRequest(`name: "${ref.template}" looks like a snapshot id; choose another name`);
  return `${ref.template}:${ref.tag ?? DEFAULT_TAG}`;
}

export async function snapshotRoutes(app: FastifyInstance, { forge }: { forge: Forge }): Promise<void> {
  app.post(
    "/sandboxes/:sandboxID/snapshots",
    { schema: { params: Id, body: Body, hide: true } },
    async (req: FastifyRequest<{ Params: Static<typeof Id>; Body: Static<typeof Body> }>, reply: FastifyReply) => {
      const name = req.body?.name !== undefined ? nameOf(req.body.name) : undefined;
      const row = await forge.snapshots.take(req.params.sandboxID, name, { replace: true });
      return reply.status(201).send(e2bId(row));
    },
  );

  app.get("/snapshots", { schema: { querystring: ListQuery, hide: true } }, async (req: FastifyRequest<{ Querystring: Static<typeof ListQuery> }>, reply: FastifyReply) => {
    const q = req.query;
    let rows = userSnapshots(forge);
    if (q.sandboxID) rows = rows.filter((r) => r.source_id === q.sandboxID);
    if (q.name !== undefined) {
      const ref = parseRef(q.name);
      const named = new Set(ref ? matching(forge, ref).map((r) => r.id) : []);
      rows = rows.filter((r) => named.has(r.id));
    }
    const limit = Math.min(Math.max(Number(q.limit ?? 100), 1), 100);
    const from = q.nextToken ? rows.findIndex((r) => r.id === q.nextToken) + 1 : 0;
    const page = rows.slice(from, from + limit);
    if (from + limit < rows.length) reply.header("x-next-token", page[page.length - 1].id);
    return reply.send(page.map(e2bId));
  });

  // The SDK's deleteSnapshot: the whole template, every tag of it, refused while a sandbox made from it lives.
  app.delete("/templates/:templateID", { schema: { params: TemplateParam, hide: true } }, async (req: FastifyRequest<{ Params: Static<typeof TemplateParam> }>, reply) => {
    const ref = parseRef(req.params.templateID);
    const rows = ref ? matching(forge, { ...ref, tag: null }) : [];
    if (!rows.length) return reply.status(404).send({ code: 404, message: `template "${req.params.templateID}" not found` });
    const users = rows.flatMap((r) => forge.snapshots.usedBy(r.id));
    if (users.length) {
      throw badRequest(`cannot delete template "${req.params.templateID}" because there are running sandboxes using it (${users.join(", ")})`);
    }
    for (const r of rows) await forge.snapshots.remove(r.id);
    return reply.status(204).send();
  });
}
