// Daytona's view of a sandbox (SandboxDto), from our row. Labels are the sandbox's metadata; what
// Daytona keeps besides (target, public, the auto-* intervals) is metadata under `daytona.`, which
// labels never show and setLabels never drops. Any sandbox has this view, however it was made.
import type { FastifyRequest } from "fastify";
import type { SandboxRow } from "../../core/types.js";
import { requestOrigin } from "../../http/request-origin.js";

export const EXTRA = "daytona.";
export const ORGANIZATION = "forgevm";
/** Daytona's default auto-stop, in minutes; 0 is off. */
export const DEFAULT_AUTO_STOP_MIN = 15;

/** The labels of a sandbox: its metadata without Daytona's own keys. */
export function labelsOf(row: SandboxRow): Record<string, string> {
  return Object.fromEntries(Object.entries(row.metadata ?? {}).filter(([k]) => !k.startsWith(EXTRA)));
}

/** One of Daytona's own values kept in a sandbox's metadata. */
export function extraOf(row: SandboxRow, key: string): string | undefined {
  return row.metadata?.[EXTRA + key];
}

/** Daytona's state for ours. */
export function stateOf(row: SandboxRow): string {
  switch (row.state) {
    case "creating":
      return "creating";
    case "running":
      return "started";
    case "paused":
      return "paused";
    case "stopped":
    case "created":
      return "stopped";
    case "destroyed":
      return "destroyed";
    default:
      return "error";
  }
}

/** The base of this server's Daytona routes as the client reached it (`http://host:port/daytona`). */
export function baseUrl(req: FastifyRequest, prefix: string): string {
  return `${requestOrigin(req)}${prefix}`;
}

const minutes = (row: SandboxRow, key: string, dflt: number) => {
  const v = extraOf(row, key);
  return v !== undefined && Number.isFinite(Number(v)) ? Number(v) : dflt;
};

/** The SandboxDto: every field the SDKs require (Python's strict models included), typed as they expect. */
export function sandboxDto(row: SandboxRow, base: string) {
  const gib = (mb: number) => Math.round((mb / 1024) * 100) / 100;
  return {
    id: row.id,
    name: row.name ?? row.id,
    organizationId: ORGANIZATION,
    target: extraOf(row, "target") ?? "local",
    state: stateOf(row),
    desiredState: row.state === "running" ? "started" : stateOf(row),
    toolboxProxyUrl: `${base}/toolbox`,
    labels: labelsOf(row),
    env: row.env ?? {},
    user: row.exec_user ?? "root",
    snapshot: row.template ?? row.image,
    public: extraOf(row, "public") === "true",
    networkBlockAll: (row.network?.mode ?? "none") === "none",
    networkAllowList: row.network?.mode === "allowlist" ? row.network.allow.join(",") : undefined,
    cpu: row.vcpus,
    gpu: 0,
    memory: gib(row.memory_mb),
    disk: gib(row.disk_mb),
    autoStopInterval: row.idle_action === "stop" && row.idle_ms ? Math.round(row.idle_ms / 60_000) : 0,
    autoPauseInterval: row.idle_action === "pause" && row.idle_ms ? Math.round(row.idle_ms / 60_000) : 0,
    autoArchiveInterval: minutes(row, "autoArchiveInterval", 10080),
    autoDeleteInterval: minutes(row, "autoDeleteInterval", -1),
    createdAt: row.created_at,
    updatedAt: row.created_at,
    lastActivityAt: row.created_at,
    errorReason: row.error ?? undefined,
    sandboxClass: "small",
    daemonVersion: "forgevm",
    volumes: (row.volumes ?? []).map((v) => ({ volumeId: v.name, mountPath: v.path })),
    autoDestroyAt: Number.isFinite(Date.parse(row.expires_at)) ? row.expires_at : undefined,
  };
}
