// The shapes E2B's control plane answers with, made from our sandbox records.
import { networkView } from "./network.js";
import { mountsView } from "./volumes.js";
import type { Forge } from "../../core/forge.js";
import type { SandboxRow } from "../../core/types.js";
import { templateIdOf } from "./templates.js";

/**
 * The envd version we advertise. The SDKs switch features on by it; each gate up to this
 * version is implemented: default user (0.4.0), closeStdin (0.5.2), octet-stream and gzip
 * uploads (0.5.7). Upload metadata (0.6.2) is not, so we stay below it.
 */
export const ENVD_VERSION = "0.6.1";
export const CLIENT_ID = "forgevm";
/** Access tokens' purposes: the sandbox's envd (and /execute), and its other ports (the code interpreter's /contexts). */
export const ENVD_TOKEN = "e2b-envd";
export const TRAFFIC_TOKEN = "e2b-traffic";

/** The state E2B knows a sandbox by. */
export function e2bState(row: SandboxRow): "running" | "paused" {
  return row.state === "paused" ? "paused" : "running";
}

/** `Sandbox`: what create and connect answer. */
export function sandboxView(forge: Forge, row: SandboxRow, domain: string) {
  return {
    sandboxID: row.id,
    templateID: templateIdOf(forge, row),
    clientID: CLIENT_ID,
    envdVersion: ENVD_VERSION,
    envdAccessToken: forge.sandboxes.accessToken(row.id, ENVD_TOKEN),
    trafficAccessToken: forge.sandboxes.accessToken(row.id, TRAFFIC_TOKEN),
    domain,
  };
}

/** `ListedSandbox`: one entry of a listing. */
export function listedView(forge: Forge, row: SandboxRow) {
  return {
    sandboxID: row.id,
    templateID: templateIdOf(forge, row),
    clientID: CLIENT_ID,
    cpuCount: row.vcpus,
    memoryMB: row.memory_mb,
    diskSizeMB: row.disk_mb,
    envdVersion: ENVD_VERSION,
    startedAt: row.created_at,
    endAt: row.expires_at,
    state: e2bState(row),
    metadata: row.metadata ?? {},
    volumeMounts: mountsView(row),
  };
}

/** `SandboxDetail`: what getInfo answers. */
export function detailView(forge: Forge, row: SandboxRow, domain: string) {
  const net = row.network;
  return {
    ...listedView(forge, row),
    // E2B answers none for a paused sandbox: it has no ports to serve until it runs.
    domain: row.state === "paused" ? null : domain,
    envdAccessToken: forge.sandboxes.accessToken(row.id, ENVD_TOKEN),
    allowInternetAccess: net ? net.mode !== "none" : false,
    ...(networkView(net) ? { network: networkView(net) } : {}),
    lifecycle: { onTimeout: row.lifecycle?.on_expiry === "pause" ? "pause" : "kill", autoResume: !!row.lifecycle?.auto_resume },
  };
}
