// A desktop's live view over REST: POST starts noVNC in the guest (take over, or watch only) and
// answers a URL of noVNC's page served through this server; the page, its files and its WebSocket
// are relayed to the guest under /sandboxes/{id}/desktop/stream/{mode}/{token}/. A browser opened
// on the URL has no API key, so the path carries a token of its own: `<expiry>.<mac>`, the MAC the
// sandbox's access token for that mode and expiry (nothing stored), which every relative URL of the
// page keeps. A view-only token never reaches the interactive path.
//
// What the guest serves is the guest's: each answer goes out under a CSP `sandbox` policy, so its
// page runs in an opaque origin and never as this server's (the console's key is out of its
// reach); its requests then come with `Origin: null`, which the access check lets through to these
// paths alone (fromSandboxedPage), and its scripts load with CORS. That is why the page is noVNC's
// vnc_lite.html: its full page keeps settings in localStorage, which an opaque origin lacks.
// A paused sandbox's view is a 409: a page left open must not wake what someone paused.
import type { FastifyPluginAsyncTypebox } from "@fastify/type-provider-typebox";
import type { FastifyReply, FastifyRequest } from "fastify";
import { Type } from "typebox";
import type { Forge } from "../../../core/forge.js";
import * as desktop from "../../../core/guest/desktop/index.js";
import { badRequest, conflict, notFound } from "../../../http/errors.js";
import { forwardRequest, forwardUpgrade } from "../../../http/forward.js";
import { requestOrigin } from "../../../http/request-origin.js";
import { parseDuration } from "../../../schemas/durations.js";
import { StreamInfo, StreamRequest } from "../../../schemas/desktop.js";
import { IdParams, Status } from "../../../schemas/rest.js";

const DEFAULT_TTL_MS = 3600_000;
const MAX_TTL_MS = 24 * 3600_000;
const TOKEN = /^(\d{10,15})\.([A-Za-z0-9_-]{8,128})$/;
/** A stream path under the REST prefix: the sandbox, the mode and the token. */
const ROUTE = /^\/api\/v1\/sandboxes\/([^/?]{1,64})\/desktop\/stream\/(interactive|view)\/([^/?]{1,160})(?:[/?]|$)/;
/** What every relayed answer carries, whatever the guest sent: an opaque origin, scripts loadable from it, no cookies, no referrer. */
const FIXED = {
  "content-security-policy": "sandbox allow-scripts allow-forms allow-pointer-lock allow-downloads",
  "access-control-allow-origin": "*",
  "x-content-type-options": "nosniff",
  "referrer-policy": "no-referrer",
  "set-cookie": null,
};

const purpose = (mode: desktop.StreamMode, expiry: number) => `desktop-stream:${mode}:${expiry}`;

function streamToken(forge: Forge, id: string, mode: desktop.StreamMode, expiry: number): string {
  return `${expiry}.${forge.sandboxes.accessToken(id, purpose(mode, expiry))}`;
}

function tokenValid(forge: Forge, id: string, mode: desktop.StreamMode, token: string): boolean {
  const m = TOKEN.exec(token);
  if (!m || Number(m[1]) < Date.now()) return false;
  try {
    return forge.sandboxes.checkAccessToken(id, purpose(mode, Number(m[1])), m[2]);
  } catch {
    return false;
  }
}

/** Whether a request names a stream path with a valid token for its sandbox and mode (the REST interface admits it without the key). */
export function streamTokenAdmits(forge: Forge, req: FastifyRequest): boolean {
  const m = ROUTE.exec(req.url);
  if (!m) return false;
  let id: string;
  try {
    id = decodeURIComponent(m[1]);
  } catch {
    return false;
  }
  return tokenValid(forge, id, m[2] as desktop.StreamMode, m[3]);
}

export const desktopStreamRoutes: FastifyPluginAsyncTypebox<{ forge: Forge }> = async (app, { forge }) => {
  /** The sandbox, running: a paused one is refused rather than woken. */
  const running = async (idOrName: string) => {
    const row = forge.sandboxes.get(idOrName);
    if (row.state === "paused") throw conflict(`sandbox ${row.id} is paused: resume it (POST /sandboxes/${row.id}/resume) before opening its live view`);
    return forge.sandboxes.use(row.id, "rest");
  };

  app.post("/sandboxes/:id/desktop/stream", { schema: { tags: ["desktop"], params: IdParams, body: Type.Optional(StreamRequest), response: { 200: StreamInfo } } }, async (req) => {
    const viewOnly = req.body?.view_only ?? false;
    const ttlMs = req.body?.ttl === undefined ? DEFAULT_TTL_MS : parseDuration(req.body.ttl, "ttl");
    if (ttlMs <= 0 || ttlMs > MAX_TTL_MS) throw badRequest(`ttl must be more than 0 and at most 24h, got "${req.body?.ttl}"`);
    const sb = await running(req.params.id);
    const mode: desktop.StreamMode = viewOnly ? "view" : "interactive";
    await desktop.startStream(sb, mode);
    const expiry = Date.now() + ttlMs;
    const base = `/api/v1/sandboxes/${encodeURIComponent(sb.id)}/desktop/stream/${mode}/${streamToken(forge, sb.id, mode, expiry)}`;
    const query = new URLSearchParams({ path: `${base.slice(1)}/websockify`, scale: "true", ...(viewOnly ? { view_only: "true" } : {}) });
    return { url: `${requestOrigin(req)}${base}/vnc_lite.html?${query}`, view_only: viewOnly, expires_at: new Date(expiry).toISOString() };
  });

  app.delete("/sandboxes/:id/desktop/stream", { schema: { tags: ["desktop"], params: IdParams, response: { 200: Status("stopped") } } }, async (req) => {
    await desktop.stopStream(await forge.sandboxes.use(req.params.id, "rest"));
    return { status: "stopped" as const };
  });

  // noVNC's page, files and WebSocket; an upgrade is relayed before the WebSocket plugin would answer it itself.
  const relay = async (req: FastifyRequest, reply: FastifyReply) => {
    const { id, mode, token } = req.params as { id: string; mode: desktop.StreamMode; token: string };
    const sb = await running(id);
    // The REST interface admitted the request by its token or by the API key; a key alone names no view.
    if (!tokenValid(forge, sb.id, mode, token))
      throw notFound(`no live view at this URL: it has expired or was not made for this sandbox; ask for a new one (POST /sandboxes/${sb.id}/desktop/stream)`);
    const conn = await forge.network.openPort(sb.id, desktop.STREAM_PORT[mode]);
    if (!conn) throw conflict(`sandbox ${sb.id}'s live view is not running: start it (POST /sandboxes/${sb.id}/desktop/stream)`);
    const prefix = `/api/v1/sandboxes/${id}/desktop/stream/${mode}/${token}`;
    const path = req.url.startsWith(prefix) ? req.url.slice(prefix.length) || "/" : "/";
    if (req.ws) forwardUpgrade(req, reply, conn, path, `localhost:${desktop.STREAM_PORT[mode]}`, ["x-api-key", "cookie", "origin"]);
    else forwardRequest(req, reply, conn, path, `localhost:${desktop.STREAM_PORT[mode]}`, ["x-api-key", "cookie"], FIXED);
    return reply;
  };
  app.get(
    "/sandboxes/:id/desktop/stream/:mode/:token/*",
    {
      schema: {
        hide: true,
        params: Type.Object({
          id: IdParams.properties.id,
          mode: Type.Union([Type.Literal("interactive"), Type.Literal("view")]),
          token: Type.String({ maxLength: 160 }),
          "*": Type.String(),
        }),
      },
      preHandler: async (req, reply) => {
        if (req.ws) return relay(req, reply);
      },
    },
    relay,
  );
};
