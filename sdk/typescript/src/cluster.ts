// A cluster, through a front: its nodes, and its API keys (the operator's key manages them).
import type { Transport } from "./http.js";
import type { ApiKeyInfo, ClusterNode, NewApiKey } from "./types.js";

export class Cluster {
  readonly keys: ClusterKeys;

  /** @internal */
  constructor(private readonly http: Transport) {
    this.keys = new ClusterKeys(http);
  }

  /** The nodes with their state (`up`, `down`), heartbeat age and load. */
  nodes(): Promise<ClusterNode[]> {
    return this.http.json("GET", "/cluster/nodes");
  }
}

export class ClusterKeys {
  /** @internal */
  constructor(private readonly http: Transport) {}

  list(): Promise<ApiKeyInfo[]> {
    return this.http.json("GET", "/cluster/keys");
  }

  /** Makes a key for `name`; the answer's `key` is the only place the key is ever shown. */
  create(name: string): Promise<NewApiKey> {
    return this.http.json("POST", "/cluster/keys", { body: { name } });
  }

  /** Revokes a key: every front refuses it within a few seconds. */
  async revoke(id: string): Promise<void> {
    await this.http.json("DELETE", `/cluster/keys/${encodeURIComponent(id)}`);
  }
}
