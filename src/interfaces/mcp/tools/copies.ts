// Copies of sandboxes: fork (running copies now), snapshot (a saved state), restore (copies of one).
import { Type } from "typebox";
import { ForgevmError } from "../../../http/errors.js";
import type { Sandbox } from "../../../core/guest/sandbox.js";
import { checkImage, checkSize, narrowNetwork } from "../policy.js";
import { SESSION_KEY } from "../sessions.js";
import { tool, type ToolContext } from "../tool.js";
import { Duration, Keep, SandboxId, ms } from "./common.js";
import { ignore } from "../../../util/ignore.js";

const Count = Type.Integer({ minimum: 1, maximum: 32, description: "How many copies (default 1)" });
const Copies = Type.Object({ sandbox_ids: Type.Array(Type.String()), duration_ms: Type.Integer() });

/** Copies made while the call was cancelled are destroyed: a cancelled call leaves nothing. */
async function unlessCancelled(ctx: ToolContext, what: string, made: Sandbox[]): Promise<Sandbox[]> {
  if (!ctx.signal.aborted) return made;
  await Promise.all(made.map((s) => ctx.forge.sandboxes.destroy(s.id, "mcp", "failed").catch(ignore("the sandbox may be gone already; the copy's error is the one reported"))));
  throw new ForgevmError("BAD_REQUEST", `${what} was cancelled`);
}

export const fork = tool({
  name: "fork",
  changesSandboxes: true,
  title: "Fork a sandbox",
  description: "Make running copies of a sandbox as it is now (memory, processes, files); each copy gets its own sandbox_id.",
  input: Type.Object({ sandbox_id: SandboxId, count: Type.Optional(Count), keep: Type.Optional(Keep) }, { additionalProperties: false }),
  output: Copies,
  async run(ctx, a) {
    ctx.agents.row(a.sandbox_id);
    const count = a.count ?? 1;
    const t0 = performance.now();
    const made = await ctx.agents.withSlots(ctx.session, count, async () => {
      ctx.progress(0, count, `forking ${a.sandbox_id}`);
      const r = await ctx.forge.snapshots.fork(a.sandbox_id, { count, metadata: ctx.session.metadata(a.keep) });
      return unlessCancelled(ctx, "fork", r.sandboxes);
    });
    ctx.progress(count, count, "copies running");
    return { result: { sandbox_ids: made.map((s) => s.id), duration_ms: Math.round(performance.now() - t0) }, sandboxId: a.sandbox_id };
  },
});

export const snapshot = tool({
  name: "snapshot",
  title: "Snapshot a sandbox",
  description: "Save a sandbox's whole state (memory and disk) under a name; it keeps running. Restore starts copies of it.",
  input: Type.Object(
    { sandbox_id: SandboxId, name: Type.Optional(Type.String({ pattern: "^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$", description: "A name to restore it by" })) },
    { additionalProperties: false },
  ),
  output: Type.Object({ snapshot_id: Type.String(), name: Type.Union([Type.String(), Type.Null()]), sandbox_id: Type.String(), size_bytes: Type.Integer() }),
  async run(ctx, a) {
    ctx.agents.row(a.sandbox_id);
    ctx.progress(0, 1, `saving ${a.sandbox_id}`);
    const s = await ctx.forge.snapshots.take(a.sandbox_id, a.name);
    ctx.progress(1, 1, "saved");
    return { result: { snapshot_id: s.id, name: s.name, sandbox_id: a.sandbox_id, size_bytes: s.size_bytes }, sandboxId: a.sandbox_id };
  },
});

export const restore = tool({
  name: "restore",
  changesSandboxes: true,
  title: "Restore a snapshot",
  description: "Start new sandboxes from a snapshot an agent took, each exactly as the sandbox was when it was saved.",
  input: Type.Object(
    {
      snapshot: Type.String({ minLength: 1, maxLength: 128, description: "The snapshot's id or name" }),
      count: Type.Optional(Count),
      ttl: Type.Optional(Duration("How long each copy lives")),
      keep: Type.Optional(Keep),
    },
    { additionalProperties: false },
  ),
  output: Copies,
  async run(ctx, a) {
    const { forge, policy } = ctx;
    const snap = forge.snapshots.get(a.snapshot);
    // Only what agents saved: a person's snapshot may hold what agents must not see.
    const source = snap.source_id ? forge.sandboxes.find(snap.source_id) : null;
    if (!source?.metadata?.[SESSION_KEY]) throw new ForgevmError("NOT_FOUND", `snapshot ${a.snapshot} was not taken by an agent; agents may restore only their own snapshots`);
    checkImage(policy, snap.image);
    const ttlMs = ms(a.ttl, "ttl") ?? Math.min(forge.defaults.ttlMs, policy.maxTtlMs);
    checkSize(policy, { memoryMb: snap.memory_mb, vcpus: snap.vcpus, ttlMs });
    // The copies' network is their source's, if the policy still allows it.
    const net = narrowNetwork(policy, { network: source.network?.mode ?? "none", allow: source.network?.allow }, forge.network.defaultMode, (x, p) =>
      forge.network.allowlistOutside(x, p),
    );
    const count = a.count ?? 1;
    const t0 = performance.now();
    const made = await ctx.agents.withSlots(ctx.session, count, async () => {
      ctx.progress(0, count, `restoring ${a.snapshot}`);
      const r = await forge.snapshots.restore(a.snapshot, { count, ttlMs, network: net.network, allow: net.allow, metadata: ctx.session.metadata(a.keep) });
      return unlessCancelled(ctx, "restore", r);
    });
    ctx.progress(count, count, "copies running");
    return { result: { sandbox_ids: made.map((s) => s.id), duration_ms: Math.round(performance.now() - t0) } };
  },
});
