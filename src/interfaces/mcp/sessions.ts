// Who owns what on MCP. Every sandbox an agent makes carries its session in its metadata; agents
// reach only such sandboxes (never the ones people made over REST or the CLI), the limits count
// them, and a session that ends takes its sandboxes with it unless they were marked `keep`.
import { randomUUID } from "node:crypto";
import type { Forge } from "../../core/forge.js";
import { sandboxGone } from "../../http/errors.js";
import type { SandboxRow } from "../../core/types.js";
import { PolicyError, type McpPolicy } from "./policy.js";
import { ignore } from "../../util/ignore.js";

export const SESSION_KEY = "forgevm.mcp.session";
export const KEEP_KEY = "forgevm.mcp.keep";

const LIVE = ["created", "creating", "running", "paused", "stopped"] as const;

/** What all MCP sessions of one process share: the core, the policy, and the slots being filled. */
export class Agents {
  /** Sandboxes being made right now, by session: counted before they show in the store. */
  private readonly pending = new Map<string, number>();

  constructor(
    readonly forge: Forge,
    readonly policy: McpPolicy,
  ) {}

  /** Live sandboxes agents made, newest first. */
  sandboxes(): SandboxRow[] {
    return this.forge.sandboxes.list(undefined, [...LIVE]).filter((r) => r.metadata?.[SESSION_KEY]);
  }

  /** The stored record of a sandbox agents may use; a clear error for any other. */
  row(id: string): SandboxRow {
    if (typeof id !== "string" || id === "") throw sandboxGone(String(id), "sandbox_id is required");
    const row = this.forge.sandboxes.get(id);
    if (!row.metadata?.[SESSION_KEY]) throw sandboxGone(id, `sandbox ${id} was not made through MCP; agents may use only the sandboxes agents made`);
    return row;
  }

  /**
   * Runs `make` with `n` sandbox slots held for `session`, refusing when the per-session or total
   * limit would be passed (sandboxes still starting count too).
   */
  async withSlots<T>(session: McpSession, n: number, make: () => Promise<T>): Promise<T> {
    // A sandbox being made is in `pending` and, once its row exists, in the store as "creating":
    // counted once, whichever shows it.
    const count = (rows: SandboxRow[], pending: number) => Math.max(rows.length, rows.filter((r) => r.state !== "creating").length + pending);
    const live = this.sandboxes();
    const all = count(
      live,
      [...this.pending.values()].reduce((a, b) => a + b, 0),
    );
    const mine = count(
      live.filter((r) => r.metadata?.[SESSION_KEY] === session.id),
      this.pending.get(session.id) ?? 0,
    );
    const p = this.policy;
    if (mine + n > p.maxSandboxesPerSession) {
      throw new PolicyError(
        "mcp.max_sandboxes_per_session",
        `this session has ${mine} sandboxes; ${n} more would pass the ${p.maxSandboxesPerSession} allowed (destroy one first)`,
      );
    }
    if (all + n > p.maxSandboxes) {
      throw new PolicyError("mcp.max_sandboxes", `agents have ${all} sandboxes; ${n} more would pass the ${p.maxSandboxes} allowed in total`);
    }
    this.pending.set(session.id, (this.pending.get(session.id) ?? 0) + n);
    try {
      return await make();
    } finally {
      const left = (this.pending.get(session.id) ?? n) - n;
      if (left > 0) this.pending.set(session.id, left);
      else this.pending.delete(session.id);
    }
  }

  /** Starts a session; `end()` it when its transport closes. */
  open(id: string = randomUUID()): McpSession {
    return new McpSession(id, this);
  }
}

/** One MCP connection: an agent's view of its sandboxes. */
export class McpSession {
  private ended: Promise<void> | null = null;
  lastSeen = Date.now();

  constructor(
    readonly id: string,
    readonly agents: Agents,
  ) {}

  /** The metadata that marks a sandbox as this session's. */
  metadata(keep = false): Record<string, string> {
    return keep ? { [SESSION_KEY]: this.id, [KEEP_KEY]: "true" } : { [SESSION_KEY]: this.id };
  }

  /** This session's live sandboxes. */
  own(): SandboxRow[] {
    return this.agents.sandboxes().filter((r) => r.metadata?.[SESSION_KEY] === this.id);
  }

  /** Destroys this session's sandboxes that were not marked `keep`; once. */
  end(): Promise<void> {
    this.ended ??= (async () => {
      const doomed = this.own().filter((r) => r.metadata?.[KEEP_KEY] !== "true");
      await Promise.all(doomed.map((r) => this.agents.forge.sandboxes.destroy(r.id, "mcp", "session end").catch(ignore("the sandbox may be gone already"))));
    })();
    return this.ended;
  }
}
