// Daytona's preview URLs, path-based so that they work without wildcard DNS:
// `<prefix>/preview/<id>/<port>/<path>` reaches that port in the guest, through its agent, the
// way E2B's port traffic does. Private unless the sandbox was made `public`: the request carries
// the sandbox's preview token (`X-Daytona-Preview-Token`, or the `DAYTONA_SANDBOX_AUTH_KEY` query
// parameter) or the API key as a bearer token; neither is passed on to the guest.
import type { Duplex } from "node:stream";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { keyMatches } from "../../http/api-key.js";
import type { Forge } from "../../core/forge.js";
import { forwardRequest } from "../../http/forward.js";
import { ignore } from "../../util/ignore.js";
import { extraOf } from "./views.js";

export const PREVIEW_TOKEN_HEADER = "x-daytona-preview-token";
export const PREVIEW_TOKEN_QUERY = "DAYTONA_SANDBOX_AUTH_KEY";
const PURPOSE = "daytona-preview";

/** A sandbox's preview token (derived from its id with the server's secret; the same for every port). */
export function previewToken(forge: Forge, id: string): string {
  return forge.sandboxes.accessToken(id, PURPOSE);
}

/** Whether a request may reach a sandbox's preview, or its toolbox by the preview token. */
export function hasPreviewToken(forge: Forge, id: string, req: FastifyRequest): boolean {
  const header = req.headers[PREVIEW_TOKEN_HEADER];
  const query = new URL(req.url, "http://x").searchParams.get(PREVIEW_TOKEN_QUERY);
  return [header, query].some((t) => typeof t === "string" && forge.sandboxes.checkAccessToken(id, PURPOSE, t));
}

/** An answer of the preview itself; the connection closes, so a body sent with the request is never read. */
const answer = (reply: FastifyReply, status: number, message: string) =>
  reply
    .status(status)
    .header("connection", "close")
    .type("application/json")
    .send({ statusCode: status, error: status === 401 ? "Unauthorized" : "Bad Gateway", message });

export async function previewRoutes(app: FastifyInstance, { forge, apiKey }: { forge: Forge; apiKey?: string }): Promise<void> {
  // The body is the guest server's to read: passed on as it arrives, never parsed here.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser("*", (_req, _payload, done) => done(null));
  const handler = async (req: FastifyRequest, reply: FastifyReply) => {
    const { id, port: portText } = req.params as { id: string; port: string };
    const port = Number(portText);
    if (!/^[0-9]{1,5}$/.test(portText) || port < 1 || port > 65535) return answer(reply, 400, `port must be 1-65535, got "${portText}"`);
    let row: ReturnType<Forge["sandboxes"]["get"]> | null = null;
    try {
      row = forge.sandboxes.get(id);
    } catch {
      row = null;
    }
    const bearer = /^Bearer\s+(.+)$/i.exec(String(req.headers.authorization ?? ""))?.[1];
    const byKey = !!bearer && !!apiKey && keyMatches(bearer, apiKey);
    // The token first (it is derived from the id): an unknown sandbox and a wrong token look the same.
    if (!byKey && !hasPreviewToken(forge, id, req) && !(row && extraOf(row, "public") === "true")) {
      return answer(reply, 401, `this preview is private: send the token of getPreviewLink(${port}) in ${PREVIEW_TOKEN_HEADER}`);
    }
    if (!row || row.state === "destroyed") return answer(reply, 502, `sandbox ${id} not found`);
    await forge.sandboxes.wake(row.id, "preview").catch(ignore("a sandbox that cannot wake is answered as unreachable below"));
    let conn: Duplex | null;
    try {
      conn = await forge.network.openPort(row.id, port);
    } catch {
      return answer(reply, 502, `sandbox ${id} is not running: start it`);
    }
    if (!conn) return answer(reply, 502, `port ${port} of sandbox ${id} is closed: nothing listens on it (a server must listen on 0.0.0.0 or 127.0.0.1)`);
    // The path as the client sent it (still encoded), after /preview/<id>/<port>, without the token.
    const marker = `/preview/${id}/${portText}`;
    const after = req.url.slice(req.url.indexOf(marker) + marker.length);
    const q = after.indexOf("?");
    const path = (q < 0 ? after : after.slice(0, q)) || "/";
    const search = new URLSearchParams(q < 0 ? "" : after.slice(q + 1));
    search.delete(PREVIEW_TOKEN_QUERY);
    const query = search.toString();
    forwardRequest(req, reply, conn, `${path.startsWith("/") ? path : `/${path}`}${query ? `?${query}` : ""}`, `localhost:${port}`, [PREVIEW_TOKEN_HEADER, "authorization"]);
  };
  app.all("/preview/:id/:port", { schema: { hide: true } }, handler);
  app.all("/preview/:id/:port/*", { schema: { hide: true } }, handler);
}
