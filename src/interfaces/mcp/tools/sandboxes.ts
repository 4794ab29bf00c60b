// Sandboxes: create, list, destroy, their memory (the balloon), and what can be read of one
// (console log, egress log).
import { Type } from "typebox";
import { ForgevmError } from "../../../http/errors.js";
import { checkImage, checkSize, narrowNetwork } from "../policy.js";
import { tool } from "../tool.js";
import { Duration, Env, Keep, Lines, SandboxId, SandboxSummary, ms, summary } from "./common.js";
import { MemoryMb, Vcpus } from "../../../schemas/fields.js";

const NetworkMode = Type.Union([Type.Literal("none"), Type.Literal("allowlist"), Type.Literal("full")], {
  description: 'none: loopback only; allowlist: only the hosts in "allow" (HTTP(S) through a proxy); full: the internet, never the host',
});

export const createSandbox = tool({
  name: "create_sandbox",
  changesSandboxes: true,
  title: "Create a sandbox",
  description: "Start a new isolated Linux VM (Debian with bash and Python by default) and return its sandbox_id; destroy it when done.",
  input: Type.Object(
    {
      image: Type.Optional(Type.String({ minLength: 1, maxLength: 512, description: "Image to boot (see the images tool); default: the server's default image" })),
      template: Type.Optional(Type.String({ minLength: 1, maxLength: 64, description: "A template (see the templates tool) whose settings fill in what is left out" })),
      memory_mb: Type.Optional(MemoryMb("Memory in MiB")),
      vcpus: Type.Optional(Vcpus("Virtual CPUs")),
      ttl: Type.Optional(Duration("How long it lives before it is destroyed")),
      network: Type.Optional(NetworkMode),
      allow: Type.Optional(
        Type.Array(Type.String({ minLength: 1, maxLength: 256 }), {
          maxItems: 256,
          description: 'Hosts the sandbox may reach with network "allowlist": "pypi.org", "*.github.com", "@pypi" presets',
        }),
      ),
      ports: Type.Optional(
        Type.Array(Type.String({ pattern: "^\\d{1,5}(:\\d{1,5})?$" }), { maxItems: 16, description: 'Guest ports to publish on the host\'s 127.0.0.1: "GUEST" or "HOST:GUEST"' }),
      ),
      env: Type.Optional(Env),
      secrets: Type.Optional(
        Type.Record(Type.String({ pattern: "^[A-Za-z_][A-Za-z0-9_]{0,127}$" }), Type.String({ maxLength: 65536 }), {
          description: "Tokens and passwords: in every command's environment and in /run/secrets/NAME, never stored (unlike env) and redacted from the audit log",
        }),
      ),
      keep: Type.Optional(Keep),
      idle_pause: Type.Optional(Duration("Pause it after this long with nothing in flight (no VM held while paused); the next tool call for it resumes it as it was")),
      forkable: Type.Optional(
        Type.Boolean({
          description: "For an agent that forks at every step: its RAM lives in a file of its own, so a fork stops it ~0.1 s whatever the count and copies share its pages",
        }),
      ),
    },
    { additionalProperties: false },
  ),
  output: Type.Object({
    ...SandboxSummary.properties,
    allow: Type.Array(Type.String()),
    ports: Type.Array(Type.Object({ host_port: Type.Integer(), guest_port: Type.Integer() })),
  }),
  annotations: { openWorldHint: false },
  async run(ctx, a) {
    const { forge, policy, session } = ctx;
    if (a.template) {
      checkImage(policy, a.template, "template");
      const t = forge.templates.get(a.template);
      checkSize(policy, { memoryMb: a.memory_mb ?? t.memory_mb, vcpus: a.vcpus ?? t.cpu_cores, ttlMs: ms(a.ttl, "ttl") ?? (t.ttl_seconds ? t.ttl_seconds * 1000 : undefined) });
    } else {
      const image = a.image ?? forge.defaults.image;
      checkImage(policy, image, "image", forge.images.canonicalName(image));
    }
    const ttlMs = ms(a.ttl, "ttl") ?? Math.min(forge.defaults.ttlMs, policy.maxTtlMs);
    // The image's own size where it says one (the desktop image's), else the defaults, within the policy.
    const own = a.template ? null : await forge.images.sandboxSize(a.image ?? forge.defaults.image);
    const memoryMb = a.memory_mb ?? (a.template ? undefined : Math.min(own?.memoryMb ?? forge.defaults.memoryMb, policy.maxMemoryMb));
    const vcpus = a.vcpus ?? (a.template ? undefined : Math.min(own?.vcpus ?? forge.defaults.vcpus, policy.maxVcpus));
    checkSize(policy, { memoryMb, vcpus, ttlMs });
    const net = narrowNetwork(policy, a, forge.network.defaultMode, (x, p) => forge.network.allowlistOutside(x, p));
    const sb = await ctx.agents.withSlots(session, 1, async () => {
      ctx.progress(0, 1, "starting the VM");
      const sb = await forge.sandboxes.spawn({
        image: a.template ? a.image : (a.image ?? forge.defaults.image),
        template: a.template,
        memoryMb,
        vcpus,
        ttlMs,
        network: net.network,
        allow: net.allow,
        ports: a.ports,
        env: a.env,
        secrets: a.secrets,
        metadata: session.metadata(a.keep),
        idle: a.idle_pause ? { afterMs: ms(a.idle_pause, "idle_pause")!, action: "pause" } : undefined,
        forkable: a.forkable,
      });
      // A call cancelled while the VM started leaves nothing behind.
      if (ctx.signal.aborted) {
        await forge.sandboxes.destroy(sb.id, "mcp", "failed");
        throw new ForgevmError("BAD_REQUEST", "create_sandbox was cancelled");
      }
      return sb;
    });
    ctx.progress(1, 1, "running");
    const row = forge.sandboxes.get(sb.id);
    const netRec = forge.network.get(sb.id);
    return {
      result: { ...summary(row, session), allow: netRec.allow, ports: netRec.ports.map((p) => ({ host_port: p.host_port, guest_port: p.guest_port })) },
      sandboxId: sb.id,
    };
  },
});

export const listSandboxes = tool({
  name: "list_sandboxes",
  title: "List sandboxes",
  description: "List the live sandboxes agents made (this session's and kept ones), newest first.",
  input: Type.Object({}, { additionalProperties: false }),
  output: Type.Object({ sandboxes: Type.Array(SandboxSummary) }),
  annotations: { readOnlyHint: true },
  async run(ctx) {
    return { result: { sandboxes: ctx.agents.sandboxes().map((r) => summary(r, ctx.session)) } };
  },
});

export const destroySandbox = tool({
  name: "destroy_sandbox",
  changesSandboxes: true,
  title: "Destroy a sandbox",
  description: "Stop a sandbox and delete its disk; everything in it is lost.",
  input: Type.Object({ sandbox_id: SandboxId }, { additionalProperties: false }),
  output: Type.Object({ sandbox_id: Type.String(), destroyed: Type.Boolean() }),
  annotations: { destructiveHint: true, idempotentHint: true },
  async run(ctx, a) {
    ctx.agents.row(a.sandbox_id);
    await ctx.forge.sandboxes.destroy(a.sandbox_id, "mcp");
    return { result: { sandbox_id: a.sandbox_id, destroyed: true }, sandboxId: a.sandbox_id };
  },
});

export const setMemory = tool({
  name: "set_memory",
  title: "Set a sandbox's memory",
  description: "Set how much memory a running sandbox may use, up to what it was created with, without a restart (no size_mb: say what it has).",
  input: Type.Object(
    { sandbox_id: SandboxId, size_mb: Type.Optional(Type.Integer({ minimum: 1, maximum: 1 << 20, description: "What it may use from now, in MiB" })) },
    { additionalProperties: false },
  ),
  output: Type.Object({ sandbox_id: Type.String(), memory_mb: Type.Integer(), actual_mb: Type.Integer(), guest_total_mb: Type.Integer(), guest_available_mb: Type.Integer() }),
  annotations: { idempotentHint: true },
  async run(ctx, a) {
    ctx.agents.row(a.sandbox_id);
    const b = await ctx.forge.sandboxes.balloon(a.sandbox_id, a.size_mb);
    return {
      result: { sandbox_id: a.sandbox_id, ...b },
      text: `${a.sandbox_id}: ${b.actual_mb} of its ${b.memory_mb} MiB (the guest sees ${b.guest_total_mb} MiB, ${b.guest_available_mb} available)`,
      sandboxId: a.sandbox_id,
    };
  },
});

export const logs = tool({
  name: "logs",
  title: "Console log",
  description: "The last lines of a sandbox's serial console (kernel and boot messages, crashes).",
  input: Type.Object({ sandbox_id: SandboxId, lines: Type.Optional(Lines) }, { additionalProperties: false }),
  output: Type.Object({ sandbox_id: Type.String(), lines: Type.Array(Type.String()) }),
  annotations: { readOnlyHint: true },
  async run(ctx, a) {
    ctx.agents.row(a.sandbox_id);
    const lines = await ctx.forge.sandboxes.logs(a.sandbox_id, a.lines ?? 100);
    return { result: { sandbox_id: a.sandbox_id, lines }, text: lines.join("\n") || "(the console log is empty)", sandboxId: a.sandbox_id };
  },
});

export const egressLog = tool({
  name: "egress_log",
  title: "Egress log",
  description: "The sandbox's last outgoing connections through its allowlist proxy, each allowed or denied with the reason.",
  input: Type.Object({ sandbox_id: SandboxId, lines: Type.Optional(Lines) }, { additionalProperties: false }),
  output: Type.Object({
    sandbox_id: Type.String(),
    entries: Type.Array(
      Type.Object(
        { ts: Type.String(), method: Type.String(), host: Type.String(), port: Type.Integer(), decision: Type.String(), reason: Type.String() },
        { additionalProperties: true },
      ),
    ),
  }),
  annotations: { readOnlyHint: true },
  async run(ctx, a) {
    ctx.agents.row(a.sandbox_id);
    const entries = await ctx.forge.network.egressLog(a.sandbox_id, a.lines ?? 100);
    const text = entries.map((e) => `${e.ts} ${e.decision.toUpperCase()} ${e.method} ${e.host}:${e.port} (${e.reason})`).join("\n");
    return { result: { sandbox_id: a.sandbox_id, entries: entries as never }, text: text || "(no outgoing connections yet)", sandboxId: a.sandbox_id };
  },
});

export const publishPort = tool({
  name: "publish_port",
  title: "Publish a port",
  description: "Make a port the sandbox listens on reachable at http://127.0.0.1:HOST_PORT on the host.",
  input: Type.Object(
    {
      sandbox_id: SandboxId,
      guest_port: Type.Integer({ minimum: 1, maximum: 65535, description: "The port inside the sandbox" }),
      host_port: Type.Optional(Type.Integer({ minimum: 0, maximum: 65535, description: "The host port (default: any free one)" })),
    },
    { additionalProperties: false },
  ),
  output: Type.Object({ sandbox_id: Type.String(), host: Type.String(), host_port: Type.Integer(), guest_port: Type.Integer(), url: Type.String() }),
  async run(ctx, a) {
    ctx.agents.row(a.sandbox_id);
    const m = await ctx.forge.network.publishPort(a.sandbox_id, `${a.host_port ?? 0}:${a.guest_port}`);
    return {
      result: { sandbox_id: a.sandbox_id, host: m.host_ip, host_port: m.host_port, guest_port: m.guest_port, url: `http://${m.host_ip}:${m.host_port}/` },
      sandboxId: a.sandbox_id,
    };
  },
});
