// Where a command goes. Commands that talk to a server use the TypeScript SDK, at --server, else
// FORGEVM_URL, else the server that owns this data directory, else 127.0.0.1:7423. Commands that
// work on a data directory (run, images, pull, import, rmi, doctor) go through the server that
// owns it when one does, and otherwise open the core here, under the same config as a server.
import type { Command } from "commander";
import { Client } from "forgevm";
import type { loadConfig } from "../config/config.js";
import { forgeOptions } from "../core/forge-options.js";
import type { Forge } from "../core/forge.js";
import { currentOwner, DataDirInUseError } from "../core/host/owner.js";

export const DEFAULT_URL = "http://127.0.0.1:7423";

interface GlobalOptions {
  server?: string;
  apiKey?: string;
  dataDir?: string;
  config?: string;
}

export class Cli {
  private cfg: ReturnType<typeof loadConfig> | null = null;
  private load: typeof loadConfig | null = null;

  constructor(private readonly program: Command) {}

  /**
   * Loads the config reader before a command's action runs (main.ts): it brings the schema
   * validator, which costs more than the rest of a start, and `version` or `--help` need none of it.
   */
  async prepare(): Promise<void> {
    this.load ??= (await import("../config/config.js")).loadConfig;
  }

  private get opts(): GlobalOptions {
    return this.program.opts() as GlobalOptions;
  }

  /** The configuration the local core would run with: --config, else the usual files, then FORGEVM_*. */
  config(): ReturnType<typeof loadConfig> {
    if (!this.cfg) {
      if (!this.load) throw new Error("the CLI read its config before prepare()");
      this.cfg = this.load({ file: this.opts.config });
      if (this.opts.dataDir) this.cfg.data_dir = this.opts.dataDir;
    }
    return this.cfg;
  }

  get dataDir(): string {
    return this.config().data_dir;
  }

  /** A server named by --server or FORGEVM_URL, or serving this data directory; null when there is none. */
  async serverUrl(): Promise<{ url: string; apiKey?: string } | null> {
    const named = this.opts.server ?? process.env.FORGEVM_URL;
    if (named) return { url: named, apiKey: this.opts.apiKey };
    const owner = await currentOwner(this.dataDir).catch(() => null);
    if (owner?.url) return { url: owner.url, apiKey: this.opts.apiKey ?? (this.configKey() || undefined) };
    return null;
  }

  // The key in the config the owning server most likely runs with (same files, same env).
  private configKey(): string {
    try {
      return this.config().auth.api_key;
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

  /** For data-directory commands: the owning (or named) server's client, or null to run the core here. */
  async serverIfAny(): Promise<Client | null> {
    const s = await this.serverUrl();
    if (s) return new Client({ baseUrl: s.url, apiKey: s.apiKey, timeout: 60_000 });
    const owner = await currentOwner(this.dataDir);
    if (owner) throw new DataDirInUseError(this.dataDir, owner);
    return null;
  }

  /** Opens the core on this data directory (no server owns it), runs `fn`, closes it. */
  async withLocalForge<T>(fn: (forge: Forge) => Promise<T>, opts: { reaper?: boolean } = {}): Promise<T> {
    const forge = await this.openLocal(opts);
    try {
      return await fn(forge);
    } finally {
      await forge.close();
    }
  }

  /** The core on this data directory, with the config's settings (no reaper unless asked). */
  async openLocal(opts: { reaper?: boolean } = {}): Promise<Forge> {
    // Loaded here, not at start: most commands talk to a server and never open the core.
    const { Forge } = await import("../core/forge.js");
    return Forge.open({ ...forgeOptions(this.config(), process.env), reapIntervalMs: opts.reaper ? 1000 : 0 });
  }
}
