// The operator's policy for agents on MCP: what they may spawn, how large, with what network,
// which images, and which host directories files may move through. Agents can only narrow it:
// every check here runs on the server, after the agent's arguments, and a refusal names the
// rule (the config key) that made it.
import { realpath } from "node:fs/promises";
import { dirname, basename, join, resolve, sep } from "node:path";
import { ConfigError, type Config } from "../../config/config.js";
import { parseDuration } from "../../schemas/durations.js";
import { ForgevmError } from "../../http/errors.js";

export type NetworkMode = "none" | "allowlist" | "full";
const RANK: Record<NetworkMode, number> = { none: 0, allowlist: 1, full: 2 };

export interface McpPolicy {
  /** The widest network agents may ask for. */
  network: NetworkMode;
  /** With network "allowlist": what agents' allowlists must stay within. */
  allow: string[];
  maxSandboxes: number;
  maxSandboxesPerSession: number;
  maxMemoryMb: number;
  maxVcpus: number;
  maxTtlMs: number;
  /** Image and template name patterns ("*" matches anything); empty: any. */
  images: string[];
  /** Host directories upload and download may use (absolute, as configured). */
  hostDirs: string[];
  sessionIdleMs: number;
  maxOutputBytes: number;
  maxReadBytes: number;
}

/** A refusal by the operator's policy: the rule is the config key that made it. */
export class PolicyError extends ForgevmError {
  constructor(
    readonly rule: string,
    message: string,
  ) {
    super("FORBIDDEN", `refused by the operator's policy (${rule}): ${message}`, { rule });
  }
}

/** The policy of a config file's `mcp` section. */
export function policyFromConfig(m: Config["mcp"]): McpPolicy {
  const duration = (v: string, key: string) => {
    try {
      return parseDuration(v, key);
    } catch (e) {
      throw new ConfigError(`config key "${key}": ${(e as Error).message}`);
    }
  };
  return {
    network: m.network,
    allow: m.allow,
    maxSandboxes: m.max_sandboxes,
    maxSandboxesPerSession: m.max_sandboxes_per_session,
    maxMemoryMb: m.max_memory_mb,
    maxVcpus: m.max_vcpus,
    maxTtlMs: duration(m.max_ttl, "mcp.max_ttl"),
    images: m.images,
    hostDirs: m.host_dirs.map((d) => resolve(d)),
    sessionIdleMs: duration(m.session_idle, "mcp.session_idle"),
    maxOutputBytes: m.max_output_bytes,
    maxReadBytes: m.max_read_bytes,
  };
}

function glob(pattern: string): RegExp {
  return new RegExp(`^${pattern.replace(/[.+?^${}()|[\]\\]/g, "\\$&").replace(/\*/g, ".*")}$`);
}

/** Whether the policy lets agents use this image or template name. */
export function imageAllowed(p: McpPolicy, name: string): boolean {
  return p.images.length === 0 || p.images.some((pat) => glob(pat).test(name));
}

/** Refuses an image or template outside `mcp.images` (any of its spellings may match). */
export function checkImage(p: McpPolicy, name: string, what: "image" | "template" = "image", ...aliases: string[]): void {
  if (![name, ...aliases].some((n) => imageAllowed(p, n))) throw new PolicyError("mcp.images", `${what} "${name}" is not one agents may use (allowed: ${p.images.join(", ")})`);
}

/** Refuses sizes beyond the limits. */
export function checkSize(p: McpPolicy, s: { memoryMb?: number; vcpus?: number; ttlMs?: number }): void {
  if (s.memoryMb !== undefined && s.memoryMb > p.maxMemoryMb) throw new PolicyError("mcp.max_memory_mb", `memory_mb ${s.memoryMb} is more than the ${p.maxMemoryMb} allowed`);
  if (s.vcpus !== undefined && s.vcpus > p.maxVcpus) throw new PolicyError("mcp.max_vcpus", `vcpus ${s.vcpus} is more than the ${p.maxVcpus} allowed`);
  if (s.ttlMs !== undefined && s.ttlMs > p.maxTtlMs)
    throw new PolicyError("mcp.max_ttl", `ttl ${Math.round(s.ttlMs / 1000)}s is longer than the ${Math.round(p.maxTtlMs / 1000)}s allowed`);
}

/**
 * The network a spawn gets: what the agent asked for when it is within the pinned policy, else a
 * refusal. Without a request it is the pinned network (its allowlist included); with nothing
 * pinned ("full"), the server's default.
 */
export function narrowNetwork(
  p: McpPolicy,
  asked: { network?: string; allow?: string[] },
  serverDefault: string,
  outside: (asked: string[], pinned: string[]) => string[],
): { network: NetworkMode; allow?: string[] } {
  const mode = (asked.network ?? (asked.allow?.length ? "allowlist" : undefined)) as NetworkMode | undefined;
  if (mode !== undefined && !(mode in RANK)) throw new ForgevmError("BAD_REQUEST", `network must be one of none, allowlist, full, got "${mode}"`);
  if (mode === undefined) {
    if (p.network === "allowlist") return { network: "allowlist", allow: p.allow };
    if (p.network === "none") return { network: "none" };
    return { network: (serverDefault in RANK ? serverDefault : "none") as NetworkMode };
  }
  if (RANK[mode] > RANK[p.network]) throw new PolicyError("mcp.network", `network "${mode}" is wider than the "${p.network}" the operator pinned`);
  if (mode !== "allowlist") return { network: mode };
  const allow = asked.allow?.length ? asked.allow : p.network === "allowlist" ? p.allow : [];
  if (p.network === "allowlist") {
    const beyond = outside(allow, p.allow);
    if (beyond.length)
      throw new PolicyError("mcp.allow", `allow entries ${beyond.map((e) => `"${e}"`).join(", ")} reach beyond the pinned allowlist (${p.allow.join(", ") || "empty"})`);
  }
  return { network: "allowlist", allow };
}

function inside(path: string, dir: string): boolean {
  return path === dir || path.startsWith(dir.endsWith(sep) ? dir : dir + sep);
}

/**
 * The real host path for an upload (an existing file) or a download (a file to write, whose
 * directory exists), inside one of `mcp.host_dirs` after every symlink is resolved; anything else
 * is refused. The file itself is then opened without following a final symlink (files.ts).
 */
export async function hostPath(p: McpPolicy, given: string, purpose: "read" | "write"): Promise<string> {
  if (p.hostDirs.length === 0) throw new PolicyError("mcp.host_dirs", "no host directory is shared with agents (the operator sets mcp.host_dirs)");
  if (typeof given !== "string" || given === "" || given.includes("\0")) throw new ForgevmError("BAD_REQUEST", "host_path must be a path");
  const roots = await Promise.all(p.hostDirs.map((d) => realpath(d).catch(() => null)));
  // Relative paths are taken in the first shared directory.
  const abs = resolve(p.hostDirs[0], given);
  let real: string;
  try {
    real = purpose === "read" ? await realpath(abs) : join(await realpath(dirname(abs)), basename(abs));
  } catch {
    throw new ForgevmError("NOT_FOUND", `host_path ${given}: ${purpose === "read" ? "no such file" : "no such directory"} in the shared directories`);
  }
  if (!roots.some((r) => r !== null && inside(real, r) && real !== r)) {
    throw new PolicyError("mcp.host_dirs", `host_path ${given} is outside the directories shared with agents (${p.hostDirs.join(", ")})`);
  }
  return real;
}

/** The policy in words, for the prompt and for `tools/list` readers. */
export function describePolicy(p: McpPolicy): string {
  const net = p.network === "allowlist" ? `allowlist within [${p.allow.join(", ")}]` : p.network;
  return [
    `- network: at most ${net} (none < allowlist < full)`,
    `- sandboxes: at most ${p.maxSandboxesPerSession} per session, ${p.maxSandboxes} in total`,
    `- each sandbox: at most ${p.maxMemoryMb} MiB, ${p.maxVcpus} vCPUs, ${Math.round(p.maxTtlMs / 60_000)} min to live`,
    `- images and templates: ${p.images.length ? p.images.join(", ") : "any"}`,
    `- host directories for upload/download: ${p.hostDirs.length ? p.hostDirs.join(", ") : "none"}`,
    `- exec output: ${p.maxOutputBytes} bytes per stream (head and tail kept); read_file: ${p.maxReadBytes} bytes`,
  ].join("\n");
}
