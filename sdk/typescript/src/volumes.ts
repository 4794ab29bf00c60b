// Named volumes on the server: data that outlives sandboxes, mounted with `volumes` at spawn.
import type { Transport } from "./http.js";
import type { VolumeInfo } from "./types.js";

export class Volumes {
  /** @internal */
  constructor(private readonly http: Transport) {}

  list(): Promise<VolumeInfo[]> {
    return this.http.json("GET", "/volumes");
  }

  /** Creates an empty volume of `size_mb` (default 1024). */
  create(name: string, opts: { size_mb?: number; labels?: Record<string, string> } = {}): Promise<VolumeInfo> {
    return this.http.json("POST", "/volumes", { body: { name, ...opts } });
  }

  get(name: string): Promise<VolumeInfo> {
    return this.http.json("GET", `/volumes/${encodeURIComponent(name)}`);
  }

  /** Deletes a volume and its data (refused while a sandbox mounts it). */
  async remove(name: string): Promise<void> {
    await this.http.json("DELETE", `/volumes/${encodeURIComponent(name)}`);
  }
}
