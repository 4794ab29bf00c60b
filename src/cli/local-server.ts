// The CLI's own server, for when no server owns the data directory: the core opens here, behind
// the same REST app `forgevm serve` runs, on a loopback port that only this process is told of and
// a key made for it, and the command talks to it through the SDK like to any server (as Docker's
// CLI always talks to its daemon). It is not announced in owner.json: another command finds the
// data directory taken by this process, as it would any owner that does not serve.
import { randomBytes } from "node:crypto";
import { Client } from "forgevm";
import { buildApp } from "../compose/app.js";
import type { loadConfig } from "../config/config.js";
import { forgeOptions } from "../core/forge-options.js";
import type { McpPolicy } from "../interfaces/mcp/policy.js";

/** A server of this process's own on a data directory. */
export interface LocalServer {
  readonly url: string;
  readonly apiKey: string;
  readonly client: Client;
  /** Stops serving and closes the core (its sandboxes end, as when `forgevm serve` stops); idempotent. */
  close(): Promise<void>;
}

/** Opens the core on the config's data directory and serves it on 127.0.0.1 (a free port) behind a fresh key. */
export async function startLocalServer(cfg: ReturnType<typeof loadConfig>, version: string, opts: { reaper?: boolean; mcp?: McpPolicy } = {}): Promise<LocalServer> {
  // Loaded here, not at start: most commands talk to a server and never open the core.
  const { Forge } = await import("../core/forge.js");
  const forge = await Forge.open({ ...forgeOptions(cfg, process.env), reapIntervalMs: opts.reaper ? 1000 : 0 });
  const apiKey = randomBytes(24).toString("base64url");
  let app: Awaited<ReturnType<typeof buildApp>> | null = null;
  try {
    app = await buildApp({
      forge,
      version,
      apiKey,
      bodyLimitBytes: cfg.server.body_limit_mb * 1024 * 1024,
      maxOutputBytes: cfg.exec.max_output_bytes,
      listenHost: "127.0.0.1",
      mcp: opts.mcp,
    });
    const url = await app.listen({ host: "127.0.0.1", port: 0 });
    let closing: Promise<void> | null = null;
    const served = app;
    return {
      url,
      apiKey,
      // Spawns, builds and pulls run as long as they need here: the server is this process's own.
      client: new Client({ baseUrl: url, apiKey, timeout: 60_000 }),
      close: () => {
        closing ??= (async () => {
          await served.close();
          await forge.close();
        })();
        return closing;
      },
    };
  } catch (e) {
    await app?.close();
    await forge.close();
    throw e;
  }
}
