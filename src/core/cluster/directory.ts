// What a front knows of the cluster, all of it in the catalogue: the nodes and their state, where
// each sandbox lives, where a new one goes. A front keeps nothing of its own, so any number of
// them can run and any can die. Every front also marks down the nodes that stopped heart-beating
// (the same idempotent statement), so there is no single watcher to lose.
import { Catalogue, type CatalogueTemplate, type NodeRow } from "../../store/catalogue.js";
import { ClusterKeys } from "./api-keys.js";
import { ClusterEventFeed } from "./event-feed.js";
import { ignore } from "../../util/ignore.js";

export type { ClusterEvent } from "../../store/catalogue.js";
export type { NodeRow };

/** How long the cluster's events are kept, as a node keeps its own. */
const EVENTS_KEPT_MS = 24 * 3600_000;

export class ClusterDirectory {
  private watch: NodeJS.Timeout | null = null;
  private trim: NodeJS.Timeout | null = null;
  /** Every node's events, as one feed. */
  readonly events: ClusterEventFeed;
  /** The cluster's API keys. */
  readonly keys: ClusterKeys;

  private constructor(
    private readonly catalogue: Catalogue,
    private readonly nodeTimeoutMs: number,
  ) {
    this.events = new ClusterEventFeed(catalogue);
    this.keys = new ClusterKeys(catalogue);
  }

  /** Connects to the catalogue and starts marking silent nodes down. */
  static async open(database: string, nodeTimeoutMs: number): Promise<ClusterDirectory> {
    const d = new ClusterDirectory(await Catalogue.open(database), nodeTimeoutMs);
    d.watch = setInterval(() => void d.catalogue.markDown(nodeTimeoutMs).catch(ignore("retried at the next tick")), Math.max(250, nodeTimeoutMs / 4));
    d.watch.unref();
    d.trim = setInterval(() => void d.catalogue.trimEvents(EVENTS_KEPT_MS).catch(ignore("retried at the next tick")), 60_000);
    d.trim.unref();
    return d;
  }

  /** The nodes, with how long ago each last heartbeat came, and their figures less what is reserved on them. */
  async nodes(): Promise<(NodeRow & { heartbeat_age_ms: number })[]> {
    await this.catalogue.markDown(this.nodeTimeoutMs);
    const now = Date.now();
    const [nodes, held] = await Promise.all([this.catalogue.nodes(), this.catalogue.reserved()]);
    return nodes.map((n) => ({
      ...n,
      free_memory_mb: Math.max(0, n.free_memory_mb - (held.get(n.id)?.memory_mb ?? 0)),
      used_vcpus: n.used_vcpus + (held.get(n.id)?.vcpus ?? 0),
      heartbeat_age_ms: Math.max(0, now - n.heartbeat_at.getTime()),
    }));
  }

  /** The nodes that are up, by id. */
  async upNodes(): Promise<(NodeRow & { heartbeat_age_ms: number })[]> {
    return (await this.nodes()).filter((n) => n.state === "up");
  }

  /** A node for a new sandbox with its room reserved (see Catalogue.reserve), or null when none has room. */
  place(want: { memoryMb: number; vcpus: number; image: string | null }, exclude: string[] = []): Promise<{ node: NodeRow; reservation: number } | null> {
    return this.catalogue.reserve(want, exclude);
  }

  /** Binds a create's idempotency key to `nodeId` unless it is bound already; the node it is bound to. */
  bindKey(key: string, nodeId: string): Promise<string> {
    return this.catalogue.bindKey(key, nodeId);
  }

  /** Lets go of a key bound to a node that never got its create. */
  unbindKey(key: string, nodeId: string): Promise<void> {
    return this.catalogue.unbindKey(key, nodeId);
  }

  /** The node a create's idempotency key went to, if any. */
  keyNode(key: string): Promise<string | undefined> {
    return this.catalogue.keyNode(key);
  }

  /** Marks a placement's create answered (its room is given back once the node counts it), or gives the room back at once when it `failed`. */
  release(reservation: number, failed = false): Promise<void> {
    return this.catalogue.release(reservation, failed);
  }

  /** Where a sandbox lives; undefined for one the catalogue does not know. */
  async locate(sandboxId: string): Promise<{ node: NodeRow; state: string } | undefined> {
    return this.catalogue.locate(sandboxId);
  }

  /** Sandboxes whose node is down: lost until it comes back. */
  async lost(): Promise<{ sandbox_id: string; node_id: string }[]> {
    return (await this.catalogue.placements()).filter((p) => p.node_state === "down");
  }

  /** The template as the cluster knows it (undefined when never written, `deleted` when removed). */
  template(name: string): Promise<CatalogueTemplate | undefined> {
    return this.catalogue.template(name);
  }

  /** Records a template written (its body) or deleted (null) through a node, for every node to mirror. */
  putTemplate(name: string, body: Record<string, unknown> | null): Promise<void> {
    return this.catalogue.putTemplate(name, body);
  }

  async close(): Promise<void> {
    if (this.watch) clearInterval(this.watch);
    if (this.trim) clearInterval(this.trim);
    this.events.stop();
    await this.catalogue.close();
  }
}
