// Named volumes (volumes.ts) and host directories mounted live into running sandboxes (host-dirs/).
import type { HostDirMount } from "../../store/sandboxes.js";
import type { Paths } from "../../config/paths.js";
import type { SandboxStore } from "../../store/sandboxes.js";
import type { Sandbox } from "../guest/sandbox.js";
import type { DiskSpace } from "../host/disk-space.js";
import type { HostDirs } from "../host-dirs/host-dirs.js";
import type { Providers } from "../providers.js";
import type { Volumes } from "../volumes.js";
import type { VolumeInfo } from "../volumes.js";
import type { SandboxLookup } from "./lookup.js";
import { join } from "node:path";
import { VolumeContent } from "../volume-content/content.js";
import type { VolumeFileOps } from "../volume-content/types.js";

/** What the volume and host-directory operations use. */
export interface VolumesDeps {
  readonly volumes: Volumes;
  readonly hostDirs: HostDirs;
  readonly providers: Providers;
  readonly sandboxes: SandboxStore;
  readonly disk: DiskSpace;
  readonly paths: Paths;
  readonly table: { readonly live: ReadonlyMap<string, Sandbox> };
}

export class VolumesFacade {
  private readonly content: VolumeContent;

  constructor(
    private readonly core: VolumesDeps,
    private readonly sandboxes: SandboxLookup,
  ) {
    this.content = new VolumeContent(core.volumes, (id) => core.table.live.get(id) ?? null, join(core.paths.dataDir, "volumes", ".content"));
  }

  /** Creates a named volume (an ext4 filesystem of `sizeMb`, sparse on the host), its root directory `owner`'s (root's by default). */
  async create(name: string, sizeMb?: number, labels?: Record<string, string>, owner?: { uid: number; gid: number }): Promise<VolumeInfo> {
    this.core.disk.require("a volume");
    return this.core.volumes.create(name, sizeMb, labels, owner);
  }

  /** Named volumes, with the sandboxes that mount each. */
  async list(): Promise<VolumeInfo[]> {
    return this.core.volumes.list();
  }

  /** One volume by name. */
  async get(name: string): Promise<VolumeInfo> {
    return this.core.volumes.info(name);
  }

  /**
   * Runs `fn` on a volume's files, through the running sandbox that mounts it read-write, else on
   * its image on the host (volume-content/content.ts); `write` when it changes them.
   */
  files<T>(name: string, write: boolean, fn: (files: VolumeFileOps) => Promise<T>): Promise<T> {
    if (write) this.core.disk.require("a write to a volume");
    return this.content.with(name, write, fn);
  }

  /** Deletes a volume and its data; refused while a sandbox mounts it. */
  async remove(name: string): Promise<void> {
    return this.core.volumes.remove(name);
  }

  /** Mounts a host directory (inside the config's mounts.host_dirs) into a running sandbox, live. */
  async mountHostDir(id: string, host: string, path: string, readOnly = false): Promise<HostDirMount[]> {
    const sb = this.sandboxes.running(id);
    const row = this.core.sandboxes.get(sb.id);
    if (row) this.core.providers.require(this.core.providers.of(row), "volumes", `sandbox ${sb.id}`);
    return this.core.hostDirs.mount(sb, host, path, readOnly);
  }

  /** Unmounts a host directory from a running sandbox. */
  async unmountHostDir(id: string, path: string): Promise<HostDirMount[]> {
    return this.core.hostDirs.unmount(this.sandboxes.running(id), path);
  }
}
