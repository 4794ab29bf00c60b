// The REST interface: the ForgeVM API under /api/v1 (one file of routes/ per resource), its OpenAPI
// document, and the Prometheus exposition at /metrics. Its callers send the API key as X-API-Key;
// a browser's EventSource and WebSocket, which cannot set headers, send it as a query parameter
// or cookie on those two routes alone; a desktop's live view carries a token of its own in its
// path (routes/desktop-stream.ts).
import type { FastifyInstance } from "fastify";
import type { Forge } from "../../core/forge.js";
import { browserStreamKeyMatches } from "../../http/browser-keys.js";
import type { ServerInterface } from "../../server/interface.js";
import { archiveRoutes } from "./routes/archive.js";
import { auditRoutes } from "./routes/audit.js";
import { balloonRoutes } from "./routes/balloon.js";
import { buildRoutes } from "./routes/builds.js";
import { codeRoutes } from "./routes/code.js";
import { commitRoutes } from "./routes/commit.js";
import { desktopStreamRoutes, streamTokenAdmits } from "./routes/desktop-stream.js";
import { desktopRoutes } from "./routes/desktop.js";
import { environmentRoutes } from "./routes/environments.js";
import { eventRoutes } from "./routes/events.js";
import { execWsRoutes } from "./routes/exec-ws.js";
import { execRoutes } from "./routes/exec.js";
import { fileRoutes } from "./routes/files.js";
import { imageRoutes } from "./routes/images.js";
import { metricRoutes } from "./routes/metrics.js";
import { networkRoutes } from "./routes/network.js";
import { processRoutes } from "./routes/processes.js";
import { sandboxRoutes } from "./routes/sandboxes.js";
import { secretRoutes } from "./routes/secrets.js";
import { snapshotRoutes } from "./routes/snapshots.js";
import { sshRoutes } from "./routes/ssh.js";
import { systemRoutes } from "./routes/system.js";
import { templateRoutes } from "./routes/templates.js";
import { volumeRoutes } from "./routes/volumes.js";
import { workloadRoutes } from "./routes/workloads.js";

export const API_PREFIX = "/api/v1";

export interface RestOptions {
  forge: Forge;
  version: string;
  /** The most output a buffered exec returns (exec.max_output_bytes). */
  maxOutputBytes?: number;
}

export function restInterface({ forge, version, maxOutputBytes }: RestOptions): ServerInterface {
  return {
    name: "rest",
    admits: (req, apiKey) => browserStreamKeyMatches(req.url, req.headers.cookie, apiKey) || streamTokenAdmits(forge, req),
    fromSandboxedPage: (req) => streamTokenAdmits(forge, req),
    async register(app: FastifyInstance) {
      await app.register(
        async (api) => {
          await api.register(sandboxRoutes, { forge });
          await api.register(workloadRoutes, { forge });
          await api.register(execRoutes, { forge, maxOutputBytes: maxOutputBytes ?? 16 * 1024 * 1024 });
          await api.register(processRoutes, { forge });
          await api.register(execWsRoutes, { forge });
          await api.register(codeRoutes, { forge });
          await api.register(fileRoutes, { forge });
          await api.register(archiveRoutes, { forge });
          await api.register(eventRoutes, { forge });
          await api.register(templateRoutes, { forge });
          await api.register(snapshotRoutes, { forge });
          await api.register(networkRoutes, { forge });
          await api.register(sshRoutes, { forge });
          await api.register(balloonRoutes, { forge });
          await api.register(desktopRoutes, { forge });
          await api.register(desktopStreamRoutes, { forge });
          await api.register(imageRoutes, { forge });
          await api.register(commitRoutes, { forge });
          await api.register(volumeRoutes, { forge });
          await api.register(secretRoutes, { forge });
          await api.register(buildRoutes, { forge });
          await api.register(environmentRoutes, { forge });
          await api.register(auditRoutes, { forge });
          await api.register(metricRoutes, { forge });
          await api.register(systemRoutes, { forge, version, startedAt: Date.now() });
          api.get("/openapi.json", { schema: { hide: true } }, async () => app.swagger());
        },
        { prefix: API_PREFIX },
      );
      // Prometheus text format, for scrapers (behind the API key like the rest); the JSON form is /api/v1/metrics.
      app.get("/metrics", { schema: { tags: ["metrics"], produces: ["text/plain"] } }, async (_req, reply) => {
        const { text, contentType } = await forge.metrics.prometheus();
        reply.type(contentType);
        return text;
      });
    },
  };
}
