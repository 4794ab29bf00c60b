// E2B's template builds over our Dockerfile builder: what the e2b SDK's `Template` builder
// (`Template().fromTemplate("base").aptInstall([...])`, then `Template.build` or
// `Template.buildInBackground`) and `Template.exists` call. A build is asked for
// (`POST /v3/templates`), its COPY sources are uploaded by content hash (`GET
// /templates/{id}/files/{hash}` hands out a URL with a token of its own), it is started with its
// steps (`POST /v2/templates/{id}/builds/{buildID}`), and polled for status and log
// (`GET /templates/{id}/builds/{buildID}/status`). The steps become a Dockerfile (templateDockerfile)
// built into the image `forgevm/e2b-<name>:<tag>`, which `Sandbox.create("<name>")` spawns
// (templates.ts). Build steps have the network, as E2B's do.
//
// Builds are kept in memory for an hour after they end, as our own build jobs are; uploaded
// files stay under the data directory (e2b-template-files/), keyed by their hash, for the next
// build that names them.
import { randomUUID } from "node:crypto";
import { MEMORY_MB, VCPUS } from "../../schemas/bounds.js";
import { createWriteStream } from "node:fs";
import { mkdir, mkdtemp, rename, rm, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { pipeline } from "node:stream/promises";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { Type, type Static } from "typebox";
import { CODE_IMAGE, type Forge } from "../../core/forge.js";
import { ForgevmError, badRequest, notFound } from "../../http/errors.js";
import { run } from "../../util/process.js";
import { BASE_TEMPLATE, CODE_INTERPRETER_TEMPLATE, templateImage } from "./templates.js";
import { requestOrigin } from "../../http/request-origin.js";

/** Where the e2b SDK's file uploads go (with their token in the query). */
export const TEMPLATE_FILES_PREFIX = "/_e2b/template-files/";
const UPLOAD_PURPOSE = "e2b-template-file";
const MAX_UPLOAD = 1024 * 1024 * 1024;
const KEEP_MS = 60 * 60_000;
const NAME = /^[a-z0-9][a-z0-9_-]{0,62}$/;
const TAG = /^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$/;
const HASH = /^[a-f0-9]{64}$/;

/** `name[:tag]` split and checked; a 400 naming the field otherwise. */
function parseName(field: string, value: string): { name: string; tag?: string } {
  const [name, tag, ...rest] = value.split(":");
  if (rest.length || !NAME.test(name) || (tag !== undefined && !TAG.test(tag))) {
    throw badRequest(`${field}: "${value.slice(0, 80)}" is not a template name: lower-case letters, digits, '-' and '_' (up to 63), then an optional :tag`);
  }
  return { name, tag };
}

/** A build step as the SDK serializes it. */
interface Step {
  type: string;
  args?: string[];
  force?: boolean;
  filesHash?: string;
}

/** What `POST /v2/templates/{id}/builds/{buildID}` carries. */
export interface TemplateSpec {
  fromImage?: string;
  fromTemplate?: string;
  fromImageRegistry?: unknown;
  startCmd?: string;
  readyCmd?: string;
  steps?: Step[];
  force?: boolean;
}

/** A JSON string, which a Dockerfile reads as one exec-form argument. */
const q = (s: string) => JSON.stringify(s);

/**
 * The Dockerfile a template's steps mean, and the files hashes its COPY steps read (unpacked
 * under `files/<hash>/` of the context). `base` is the image of fromTemplate; `parentIsOurs` says
 * it is a template built here, not a built-in one.
 */
export function templateDockerfile(spec: TemplateSpec, base: string, parentIsOurs = false): { dockerfile: string; hashes: string[]; notes: string[] } {
  if (spec.fromImageRegistry !== undefined)
    throw badRequest(
      "fromImageRegistry: registry credentials in a template are not supported here; log in to the registry on the server (forgevm login) and build from the image by name",
    );
  const lines = [`FROM ${base}`];
  // E2B's defaults, unlike Docker's: steps run as `user` in /home/user (made when the image lacks
  // it), and the last user and directory set are the sandbox's. A template built on one of ours
  // keeps its parent's directory; its user is taken to be `user` (a step run as another user
  // switches back to it after).
  if (spec.fromImage) lines.push("USER root", `RUN ["/bin/sh", "-c", "id -u user >/dev/null 2>&1 || useradd -m -s /bin/sh user 2>/dev/null || adduser -D user"]`);
  if (!parentIsOurs) lines.push("USER user", "WORKDIR /home/user");
  const hashes: string[] = [];
  const notes: string[] = [];
  let user = "user";
  const as = (u: string | undefined, body: () => void) => {
    if (u && u !== user) lines.push(`USER ${u}`);
    body();
    if (u && u !== user) lines.push(`USER ${user}`);
  };
  for (const [i, s] of (spec.steps ?? []).entries()) {
    const args = Array.isArray(s.args) ? s.args.map(String) : [];
    const bad = (why: string) => badRequest(`steps[${i}] (${s.type}): ${why}`);
    if (args.some((a) => a.includes("\n") && s.type !== "RUN")) throw bad("an argument holds a newline");
    switch (s.type) {
      case "RUN":
        if (!args[0]) throw bad("the command is missing");
        // A shell of its own for each, as E2B runs them; newlines stay inside the JSON string.
        as(args[1], () => lines.push(`RUN ["/bin/sh", "-c", ${q(args[0])}]`));
        break;
      case "COPY": {
        const [src, dest, owner, mode] = args;
        if (!src || !dest) throw bad("source and destination are needed");
        if (!s.filesHash || !HASH.test(s.filesHash)) throw bad("filesHash is missing or not a sha256 hex digest");
        if (src.split("/").includes("..")) throw bad(`source "${src}" leaves the build context`);
        hashes.push(s.filesHash);
        // Owned by the step's user unless it says otherwise, so that user can change what it copied.
        const flags = [`--chown=${owner || user}`, mode ? `--chmod=${mode}` : ""].filter(Boolean).join(" ");
        lines.push(`COPY ${flags ? `${flags} ` : ""}[${q(`files/${s.filesHash}/${src.replace(/^\/+/, "")}`)}, ${q(dest)}]`);
        break;
      }
      case "ENV": {
        if (args.length === 0 || args.length % 2) throw bad("ENV takes name and value pairs");
        for (let k = 0; k < args.length; k += 2) {
          if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(args[k])) throw bad(`"${args[k].slice(0, 40)}" is not an environment variable name`);
          lines.push(`ENV ${args[k]}=${q(args[k + 1])}`);
        }
        break;
      }
      case "WORKDIR":
        if (!args[0]) throw bad("the directory is missing");
        lines.push(`WORKDIR ${args[0]}`);
        break;
      case "USER":
        if (!/^[A-Za-z0-9_][A-Za-z0-9._-]{0,31}$/.test(args[0] ?? "")) throw bad("a user name is needed");
        user = args[0];
        lines.push(`USER ${user}`);
        break;
      default:
        throw bad(`steps of type "${String(s.type).slice(0, 20)}" are not supported (RUN, COPY, ENV, WORKDIR and USER are)`);
    }
  }
  if (spec.startCmd) lines.push(`CMD ["/bin/sh", "-c", ${q(spec.startCmd)}]`);
  if (spec.readyCmd) notes.push("readyCmd is not waited for here: a sandbox answers as soon as it has booted");
  return { dockerfile: `${lines.join("\n")}\n`, hashes, notes };
}

interface LogEntry {
  timestamp: string;
  level: "debug" | "info" | "warn" | "error";
  message: string;
}

interface Build {
  templateID: string;
  buildID: string;
  image: string;
  status: "waiting" | "building" | "ready" | "error";
  logEntries: LogEntry[];
  reason?: { message: string; step?: string };
  endedAt?: number;
}

const Create = Type.Object(
  {
    name: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })),
    alias: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })),
    tags: Type.Optional(Type.Array(Type.String({ minLength: 1, maxLength: 128 }), { maxItems: 16 })),
    cpuCount: Type.Optional(Type.Integer(VCPUS)),
    memoryMB: Type.Optional(Type.Integer(MEMORY_MB)),
  },
  { additionalProperties: true },
);
const BuildParams = Type.Object({ templateID: Type.String({ minLength: 1, maxLength: 200 }), buildID: Type.String({ minLength: 1, maxLength: 64 }) });
const FileParams = Type.Object({ templateID: Type.String({ minLength: 1, maxLength: 200 }), hash: Type.String({ minLength: 1, maxLength: 64 }) });
const StatusQuery = Type.Object({ logsOffset: Type.Optional(Type.String({ pattern: "^[0-9]{1,9}$" })), level: Type.Optional(Type.String()) }, { additionalProperties: true });
const Spec = Type.Object(
  {
    fromImage: Type.Optional(Type.String({ minLength: 1, maxLength: 512 })),
    fromTemplate: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })),
    startCmd: Type.Optional(Type.String({ maxLength: 65536 })),
    readyCmd: Type.Optional(Type.String({ maxLength: 65536 })),
    force: Type.Optional(Type.Boolean()),
    steps: Type.Optional(
      Type.Array(
        Type.Object(
          {
            type: Type.String({ minLength: 1, maxLength: 20 }),
            args: Type.Optional(Type.Array(Type.String({ maxLength: 1048576 }), { maxItems: 4096 })),
            force: Type.Optional(Type.Boolean()),
            filesHash: Type.Optional(Type.String({ maxLength: 64 })),
          },
          { additionalProperties: true },
        ),
        { maxItems: 1000 },
      ),
    ),
  },
  { additionalProperties: true },
);

export async function templateBuildRoutes(app: FastifyInstance, { forge }: { forge: Forge }): Promise<void> {
  const builds = new Map<string, Build>();
  // Read when a call needs it: the app is also built without a data directory (scripts/contract-docs.ts).
  const filesDir = () => join(forge.paths.dataDir, "e2b-template-files");
  const running = new Set<AbortController>();
  app.addHook("onClose", async () => {
    for (const a of running) a.abort();
  });

  const expire = () => {
    const now = Date.now();
    for (const [id, b] of builds) if (b.endedAt && now - b.endedAt > KEEP_MS) builds.delete(id);
  };
  const buildOf = (templateID: string, buildID: string): Build => {
    const b = builds.get(buildID);
    if (!b || b.templateID !== templateID) throw notFound(`build ${buildID} of template ${templateID} not found (builds are kept for an hour after they end)`);
    return b;
  };
  const imageNames = async () => new Set((await forge.images.list()).map((i) => i.name));

  /** The image a template name stands for, or null. */
  const imageOfTemplate = async (id: string): Promise<string | null> => {
    if (id === BASE_TEMPLATE) return forge.defaults.image;
    if (id === CODE_INTERPRETER_TEMPLATE) return CODE_IMAGE;
    const [name, tag] = id.split(":");
    const img = templateImage(name, tag);
    return (await imageNames()).has(img) ? img : null;
  };

  // Template.exists: a name is taken by a build of ours, a built-in template or a ForgeVM template.
  app.get("/templates/aliases/:alias", { schema: { params: Type.Object({ alias: Type.String({ minLength: 1, maxLength: 200 }) }), hide: true } }, async (req, reply) => {
    const { alias } = req.params as { alias: string };
    const known = (await imageOfTemplate(alias)) !== null || forge.templates.list().some((t) => t.name === alias);
    if (!known) return reply.status(404).send({ code: 404, message: `template "${alias.slice(0, 80)}" not found` });
    return { templateID: alias, public: false };
  });

  app.post("/v3/templates", { schema: { body: Create, hide: true } }, async (req: FastifyRequest<{ Body: Static<typeof Create> }>, reply) => {
    expire();
    const given = req.body.name ?? req.body.alias;
    if (!given) throw badRequest("name is required");
    const { name, tag } = parseName("name", given);
    for (const t of req.body.tags ?? []) if (!TAG.test(t)) throw badRequest(`tags: "${t.slice(0, 40)}" is not a tag`);
    const buildID = randomUUID();
    const image = templateImage(name, tag ?? req.body.tags?.[0]);
    builds.set(buildID, { templateID: name, buildID, image, status: "waiting", logEntries: [] });
    return reply.status(202).send({ templateID: name, buildID, public: false, aliases: [name], names: [name], tags: req.body.tags ?? (tag ? [tag] : []) });
  });

  app.get("/templates/:templateID/files/:hash", { schema: { params: FileParams, hide: true } }, async (req: FastifyRequest<{ Params: Static<typeof FileParams> }>) => {
    const { hash } = req.params;
    if (!HASH.test(hash)) throw badRequest("hash: a sha256 hex digest is needed");
    const present = await stat(join(filesDir(), `${hash}.tar`)).then(
      () => true,
      () => false,
    );
    const token = forge.sandboxes.accessToken(hash, UPLOAD_PURPOSE);
    return { present, url: `${requestOrigin(req)}${TEMPLATE_FILES_PREFIX}${hash}?token=${token}` };
  });

  // The upload itself carries its token, not the API key (the SDK sends no other header).
  await app.register(async (uploads) => {
    uploads.removeAllContentTypeParsers();
    uploads.addContentTypeParser("*", (_req, _payload, done) => done(null));
    uploads.put(`${TEMPLATE_FILES_PREFIX}:hash`, { schema: { hide: true }, bodyLimit: MAX_UPLOAD }, async (req, reply: FastifyReply) => {
      const { hash } = req.params as { hash: string };
      const token = new URL(req.url, "http://x").searchParams.get("token") ?? "";
      if (!HASH.test(hash) || !forge.sandboxes.checkAccessToken(hash, UPLOAD_PURPOSE, token)) {
        reply.header("connection", "close");
        throw new ForgevmError("UNAUTHORIZED", "this upload URL is not valid: ask GET /templates/{id}/files/{hash} for one");
      }
      const length = Number(req.headers["content-length"] ?? Number.NaN);
      if (length > MAX_UPLOAD) throw new ForgevmError("PAYLOAD_TOO_LARGE", `a template's files may be up to ${MAX_UPLOAD / 1048576} MiB`);
      await mkdir(filesDir(), { recursive: true });
      const part = join(filesDir(), `${hash}.${randomUUID()}.part`);
      let seen = 0;
      try {
        await pipeline(
          req.raw,
          async function* (source: AsyncIterable<Buffer>) {
            for await (const chunk of source) {
              seen += chunk.length;
              if (seen > MAX_UPLOAD) throw new ForgevmError("PAYLOAD_TOO_LARGE", `a template's files may be up to ${MAX_UPLOAD / 1048576} MiB`);
              yield chunk;
            }
          },
          createWriteStream(part),
        );
        await rename(part, join(filesDir(), `${hash}.tar`));
      } catch (e) {
        await rm(part, { force: true });
        throw e;
      }
      return reply.status(201).send();
    });
  });

  app.post(
    "/v2/templates/:templateID/builds/:buildID",
    { schema: { params: BuildParams, body: Spec, hide: true } },
    async (req: FastifyRequest<{ Params: Static<typeof BuildParams>; Body: Static<typeof Spec> }>, reply) => {
      const b = buildOf(req.params.templateID, req.params.buildID);
      if (b.status !== "waiting") throw new ForgevmError("CONFLICT", `build ${b.buildID} has already started`);
      const spec = req.body as TemplateSpec;
      if (!spec.fromImage === !spec.fromTemplate) throw badRequest("exactly one of fromImage and fromTemplate is needed");
      let base = spec.fromImage;
      if (spec.fromTemplate) {
        base = (await imageOfTemplate(spec.fromTemplate)) ?? undefined;
        if (!base) throw badRequest(`fromTemplate: template "${spec.fromTemplate.slice(0, 80)}" not found (build it first, or use "base")`);
      }
      const ours = !!spec.fromTemplate && spec.fromTemplate !== BASE_TEMPLATE && spec.fromTemplate !== CODE_INTERPRETER_TEMPLATE;
      const { dockerfile, hashes, notes } = templateDockerfile(spec, base!, ours);
      for (const h of hashes) {
        if (!(await stat(join(filesDir(), `${h}.tar`)).catch(() => null))) throw badRequest(`steps: the files of hash ${h} were never uploaded`);
      }
      b.status = "building";
      const log = (message: string, level: LogEntry["level"] = "info") => b.logEntries.push({ timestamp: new Date().toISOString(), level, message });
      for (const n of notes) log(n, "warn");
      const abort = new AbortController();
      running.add(abort);
      let steps: { instruction: string }[] = [];
      void (async () => {
        const dir = await mkdtemp(join(forge.paths.dataDir, ".e2b-template-"));
        try {
          await writeFile(join(dir, "Dockerfile"), dockerfile);
          for (const h of hashes) {
            await mkdir(join(dir, "files", h), { recursive: true });
            await run("tar", ["-xf", join(filesDir(), `${h}.tar`), "-C", join(dir, "files", h), "--no-same-owner", "--no-same-permissions"]);
          }
          await forge.builds.run(
            dir,
            { tag: b.image, network: "full", noCache: !!spec.force || (spec.steps ?? []).some((s) => s.force) },
            {
              steps: (list) => (steps = list),
              step: (i, patch) => {
                // The builder logs each step as it starts; a cached one says so only here.
                if (patch.status === "cached" && steps[i]) log(`CACHED ${steps[i].instruction}`);
              },
              log: (line) => log(line),
            },
            abort.signal,
          );
          b.status = "ready";
          log(`Template ${b.templateID} is ready (image ${b.image})`);
        } catch (e) {
          b.status = "error";
          b.reason = { message: (e as Error).message.slice(0, 2000) };
          log((e as Error).message.slice(0, 2000), "error");
        } finally {
          b.endedAt = Date.now();
          running.delete(abort);
          await rm(dir, { recursive: true, force: true });
        }
      })();
      return reply.status(202).send();
    },
  );

  app.get(
    "/templates/:templateID/builds/:buildID/status",
    { schema: { params: BuildParams, querystring: StatusQuery, hide: true } },
    async (req: FastifyRequest<{ Params: Static<typeof BuildParams>; Querystring: Static<typeof StatusQuery> }>) => {
      const b = buildOf(req.params.templateID, req.params.buildID);
      const from = Number(req.query.logsOffset ?? 0);
      const entries = b.logEntries.slice(from);
      return {
        templateID: b.templateID,
        buildID: b.buildID,
        status: b.status,
        logEntries: entries,
        logs: entries.map((e) => `${e.timestamp} ${e.message}`),
        ...(b.reason ? { reason: { ...b.reason, logEntries: b.logEntries.filter((e) => e.level === "error") } } : {}),
      };
    },
  );
}
