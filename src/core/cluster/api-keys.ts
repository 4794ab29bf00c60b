// The cluster's API keys: made at a front by the operator (with the key from the config), each
// shown once and kept only as its SHA-256, revocable. A front accepts them besides the operator's
// key and sends the operator's key on to the nodes, which know no other. A front checks against a
// copy of the live hashes it refreshes every few seconds, so a revoked key stops working within
// that time on every front, and the database is not asked on every request.
import { createHash, randomBytes } from "node:crypto";
import type { ApiKeyRow, Catalogue } from "../../store/catalogue.js";

const REFRESH_MS = 2000;

export type { ApiKeyRow };

const sha256 = (s: string) => createHash("sha256").update(s).digest("hex");

export class ClusterKeys {
  private hashes = new Set<string>();
  private fetchedAt = 0;
  private refreshing: Promise<void> | null = null;

  constructor(private readonly catalogue: Catalogue) {}

  /** Makes a key; the key itself is in the answer and nowhere else. */
  async create(name: string): Promise<ApiKeyRow & { key: string }> {
    const key = `fvk_${randomBytes(24).toString("hex")}`;
    const row = await this.catalogue.addKey(`key-${randomBytes(4).toString("hex")}`, name, sha256(key));
    this.fetchedAt = 0;
    return { ...row, key };
  }

  list(): Promise<ApiKeyRow[]> {
    return this.catalogue.keys();
  }

  async revoke(id: string): Promise<boolean> {
    const done = await this.catalogue.revokeKey(id);
    this.fetchedAt = 0;
    return done;
  }

  /** Whether `given` is a live cluster key (as of at most a few seconds ago). */
  async accepts(given: string): Promise<boolean> {
    if (!given.startsWith("fvk_")) return false;
    if (Date.now() - this.fetchedAt > REFRESH_MS) {
      this.refreshing ??= this.catalogue
        .liveKeyHashes()
        .then((h) => {
          this.hashes = new Set(h);
          this.fetchedAt = Date.now();
        })
        .finally(() => {
          this.refreshing = null;
        });
      await this.refreshing;
    }
    // Looked up by its hash: how long that takes says nothing about a real key.
    return this.hashes.has(sha256(given));
  }
}
