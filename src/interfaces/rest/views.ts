// Store rows and guest replies → the JSON shapes of the REST contract.
import type { DirEntry, FileStat, MainRecord, NetworkRecord, SandboxRow, SnapshotRow } from "../../core/types.js";
import { formatDuration, NO_EXPIRY } from "../../schemas/durations.js";
import { familiarName } from "../../core/images/image-reference.js";
import { providerWarning } from "../../core/providers.js";
import { badRequest } from "../../http/errors.js";
import { GUEST_PROXY_ADDR, GUEST_PROXY_PORT } from "../../schemas/guest-egress.js";
import type { SandboxT, SnapshotT } from "../../schemas/rest.js";
import { shellQuote } from "../../util/shell-quote.js";

export function sandboxView(r: SandboxRow): SandboxT {
  return {
    id: r.id,
    state: r.state,
    provider: r.provider,
    ...(r.node ? { node: r.node } : {}),
    ...(providerWarning(r.provider) ? { warning: providerWarning(r.provider) } : {}),
    image: familiarName(r.image),
    memory_mb: r.memory_mb,
    vcpus: r.vcpus,
    ...(r.owner_id ? { owner_id: r.owner_id } : {}),
    created_at: r.created_at,
    expires_at: r.expires_at === NO_EXPIRY ? null : r.expires_at,
    ...(r.metadata ? { metadata: r.metadata } : {}),
    ...(r.error ? { error: r.error.split("\n")[0] } : {}),
    ...(r.destroyed_at ? { destroyed_at: r.destroyed_at } : {}),
    ...(r.end_reason ? { end_reason: r.end_reason } : {}),
    ...(r.ended_by ? { ended_by: r.ended_by } : {}),
    ...(r.vm_id ? { vm_id: r.vm_id } : {}),
    network: networkView(r.network),
    ...(r.name ? { name: r.name } : {}),
    ...(r.exec_user && r.exec_user !== "root" ? { user: r.exec_user } : {}),
    ...(r.idle_ms && r.idle_action === "stop" ? { idle_stop: formatDuration(r.idle_ms) } : {}),
    ...(r.idle_ms && r.idle_action ? { idle: { after: formatDuration(r.idle_ms), action: r.idle_action } } : {}),
    ...(r.state === "paused" && r.paused_reason ? { paused_reason: r.paused_reason } : {}),
    ...(r.forkable ? { forkable: true } : {}),
    ...(r.init ? { init: r.init } : {}),
    ...(r.volumes?.length ? { volumes: r.volumes } : {}),
    ...(r.host_dirs?.length ? { host_dirs: r.host_dirs } : {}),
    ...(r.main ? { main: mainView(r.main, r.state === "running" && !!r.main.started_at && r.main.finished_at === null) } : {}),
  };
}

function mainView(m: MainRecord, running: boolean) {
  return {
    command: m.command,
    restart: m.restart === "on-failure" && m.max_restarts !== undefined ? `on-failure:${m.max_restarts}` : m.restart,
    restarts: m.restarts,
    running,
    exit_code: m.exit_code,
    started_at: m.started_at,
    finished_at: m.finished_at,
    // A run's health, while that run lasts (a paused sandbox shows what was found before it paused).
    ...(m.health && m.finished_at === null ? { health: m.health } : {}),
  };
}

export function networkView(n: NetworkRecord | null) {
  const { rules, nic: _nic, ...rec } = n ?? { mode: "none" as const, allow: [], ports: [] };
  return {
    ...rec,
    ...(rec.mode === "allowlist" ? { proxy: `http://${GUEST_PROXY_ADDR}:${GUEST_PROXY_PORT}` } : {}),
    ...(rules ? { egress_rules: Object.fromEntries(Object.entries(rules).map(([host, headers]) => [host, { headers }])) } : {}),
  };
}

export function snapshotView(r: SnapshotRow): SnapshotT {
  return {
    id: r.id,
    ...(r.name ? { name: r.name } : {}),
    kind: r.kind,
    state: r.state,
    ...(r.source_id ? { source_id: r.source_id } : {}),
    image: familiarName(r.image),
    ...(r.template ? { template: r.template } : {}),
    memory_mb: r.memory_mb,
    vcpus: r.vcpus,
    disk_mb: r.disk_mb,
    format: r.format,
    size_bytes: r.size_bytes,
    created_at: r.created_at,
  };
}

export function fileInfoView(path: string, name: string, st: FileStat | DirEntry) {
  return {
    path,
    name,
    size: st.size,
    mode: (st.mode & 0o777).toString(8),
    is_dir: st.type === "dir",
    mod_time: new Date(st.mtime_ms).toISOString(),
  };
}

/** The shell command of an exec request: `command` with each of `args` quoted and appended. */
export function commandLine(command: string, args?: string[]): string {
  return args?.length ? `${command} ${args.map(shellQuote).join(" ")}` : command;
}

/** Bytes from a base64 field; a 400 naming the field when it is not base64. */
export function decodeBase64(text: string, field: string): Buffer {
  if (!/^[A-Za-z0-9+/\r\n]*={0,2}\s*$/.test(text)) throw badRequest(`${field} is not valid base64`);
  return Buffer.from(text, "base64");
}
