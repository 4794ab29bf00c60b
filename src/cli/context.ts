// Where a command goes. Commands talk to a server through the TypeScript SDK, at --server, else
// FORGEVM_URL, else the server that owns this data directory, else 127.0.0.1:7423. Commands that
// work on a data directory (run, images, pull, import, rmi, doctor, build, volumes, mcp) go through
// the server that owns it when one does, and otherwise through a server this process starts on
// it (local-server.ts), under the same config: the same requests either way.
import { resolve } from "node:path";
import type { Command } from "commander";
import { Client } from "forgevm";
import type { loadConfig } from "../config/config.js";
import { currentOwner, DataDirInUseError } from "../core/host/owner.js";
import type { McpPolicy } from "../interfaces/mcp/policy.js";
import type { LocalServer } from "./local-server.js";

export const DEFAULT_URL = "http://127.0.0.1:7423";

interface GlobalOptions {
  server?: string;
  apiKey?: string;
  dataDir?: string;
  config?: string;
}

export class Cli {
  private cfg: ReturnType<typeof loadConfig> | null = null;
  private local: LocalServer | null = null;

  constructor(
    private readonly program: Command,
    private readonly version: string,
  ) {}

  /**
   * The configuration the local core would run with: --config, else the usual files, then
   * FORGEVM_*. Its reader is loaded on first use: it brings the schema validator, which costs more
   * than the rest of a start (~0.5 s), and a command talking to a server named by --server or
   * FORGEVM_URL needs none of it.
   */
  async config(): Promise<ReturnType<typeof loadConfig>> {
    if (!this.cfg) {
      const { loadConfig } = await import("../config/config.js");
      this.cfg = loadConfig({ file: this.opts.config });
      if (this.opts.dataDir) this.cfg.data_dir = this.opts.dataDir;
    }
    return this.cfg;
  }

  private get opts(): GlobalOptions {
    return this.program.opts() as GlobalOptions;
  }

  async dataDir(): Promise<string> {
    return (await this.config()).data_dir;
  }

  /** A server named by --server or FORGEVM_URL, or serving this data directory; null when there is none. */
  async serverUrl(): Promise<{ url: string; apiKey?: string } | null> {
    const named = this.opts.server ?? process.env.FORGEVM_URL;
    if (named) return { url: named, apiKey: this.opts.apiKey };
    const owner = await currentOwner(await this.dataDir()).catch(() => null);
    if (owner?.url) return { url: owner.url, apiKey: this.opts.apiKey ?? ((await this.configKey()) || undefined) };
    return null;
  }

  /**
   * The global options with which another `forgevm` process, started later (ssh's ProxyCommand),
   * reaches the server this one does: a named server as named, else the same data directory and
   * config. An API key is never written out: it comes from the environment or the config then.
   */
  sameServerArgs(): string[] {
    const named = this.opts.server ?? process.env.FORGEVM_URL;
    if (named) return ["--server", named];
    return [...(this.opts.dataDir ? ["--data-dir", resolve(this.opts.dataDir)] : []), ...(this.opts.config ? ["--config", resolve(this.opts.config)] : [])];
  }

  // The key in the config the owning server most likely runs with (same files, same env).
  private async configKey(): Promise<string> {
    try {
      return (await this.config()).auth.api_key;
    } catch {
      return "";
    }
  }

  /** The server commands talk to: its URL and API key. */
  async endpoint(): Promise<{ url: string; apiKey?: string }> {
    return (await this.serverUrl()) ?? { url: DEFAULT_URL, apiKey: this.opts.apiKey };
  }

  /** The SDK client of the server commands talk to. */
  async client(): Promise<Client> {
    const s = await this.endpoint();
    return new Client({ baseUrl: s.url, apiKey: s.apiKey, timeout: 60_000 });
  }

  /**
   * For data-directory commands: the client of the owning (or named) server, else of a server this
   * process starts on the data directory (local-server.ts), which `close` stops. One path either way.
   */
  async dataDirClient(opts: { reaper?: boolean; mcp?: McpPolicy } = {}): Promise<Client> {
    return (await this.dataDirServer(opts)).client;
  }

  /** As dataDirClient, with the server's address and key (for the commands that open WebSockets or relay). */
  async dataDirServer(opts: { reaper?: boolean; mcp?: McpPolicy } = {}): Promise<{ client: Client; url: string; apiKey?: string }> {
    const s = await this.serverUrl();
    if (s) return { client: new Client({ baseUrl: s.url, apiKey: s.apiKey, timeout: 60_000 }), ...s };
    if (this.local) return this.local;
    const dataDir = await this.dataDir();
    const owner = await currentOwner(dataDir);
    if (owner) throw new DataDirInUseError(dataDir, owner);
    const { startLocalServer } = await import("./local-server.js");
    this.local = await startLocalServer(await this.config(), this.version, opts);
    // Ctrl-C or a kill ends the command's sandboxes with the core, as a stopping server does.
    for (const [signal, code] of [
      ["SIGINT", 130],
      ["SIGTERM", 143],
    ] as const)
      process.once(signal, () => void this.exit(code));
    return this.local;
  }

  /** Stops this process's own server, if it started one (main.ts, once a command is done). */
  async close(): Promise<void> {
    const local = this.local;
    this.local = null;
    await local?.close();
  }

  /** Ends the process with `code`, after this process's own server (and its sandboxes) are gone. */
  async exit(code: number): Promise<never> {
    await this.close().catch((e: Error) => console.error(`forgevm: ${e.message}`));
    process.exit(code);
  }
}
