// The SDK's own types: options with callbacks or camelCase fields, and shapes the server's
// schemas do not describe (the cluster front, the event stream). The wire shapes the schemas
// describe are generated into wire.ts.
import type { CodeContext, CodeError, CodeResult, ImageChanges, SandboxInfo } from "./wire.js";

export * from "./wire.js";

/** A sandbox's state. */
export type SandboxState = SandboxInfo["state"];

/** One line a sandbox's main process wrote. */
export interface LogLine {
  ts: string;
  stream: "stdout" | "stderr";
  line: string;
}

/** A node of a cluster, as a front lists it. */
export interface ClusterNode {
  id: string;
  url: string;
  state: "up" | "down" | "draining";
  heartbeat_age_ms: number;
  memory_mb: number;
  free_memory_mb: number;
  vcpus: number;
  used_vcpus: number;
  running: number;
  images: string[];
  version: string;
}

/** A cluster API key as listed (never the key itself). */
export interface ApiKeyInfo {
  id: string;
  name: string;
  created_at: string;
  revoked_at: string | null;
}

/** A cluster API key just made: `key` is shown this once. */
export interface NewApiKey extends ApiKeyInfo {
  key: string;
}

export interface ExecOptions {
  /** Arguments, each shell-quoted and appended to the command. */
  args?: string[];
  env?: Record<string, string>;
  workdir?: string;
  /** Duration string ("30s") or milliseconds. */
  timeout?: string | number;
  user?: string;
  /** Fed to the command's standard input: text, or bytes (sent base64). */
  stdin?: string | Uint8Array;
}

export interface StreamChunk {
  stream: "stdout" | "stderr";
  data: string;
}

export interface ProviderInfo {
  name: string;
  healthy: boolean;
  default: boolean;
  /** "vm": a VM per sandbox; "namespaces": Linux namespaces on the host's kernel (no security boundary). */
  isolation?: "vm" | "namespaces";
  /** Said by a provider that is no security boundary. */
  warning?: string;
}

export interface VMPoolStatus {
  enabled: boolean;
  vms?: number;
  max_vms?: number;
  total_users?: number;
  max_users_per_vm?: number;
  [key: string]: unknown;
}

export interface ClientOptions {
  /** e.g. "http://localhost:7423"; else built from host and port. */
  baseUrl?: string;
  host?: string;
  port?: number;
  /** Sent as X-API-Key. */
  apiKey?: string;
  /** Sent as X-User-ID: the owner of the sandboxes this client spawns and lists. */
  userId?: string;
  /** Per-request timeout in milliseconds (default 30000; spawns and execs get longer, see README). */
  timeout?: number;
}

export interface CommitOptions {
  changes?: ImageChanges;
  /** One layer holding the whole filesystem instead of one on top of the image's. */
  squash?: boolean;
  comment?: string;
  /** Stop the guest's processes while its disk is read (default true). */
  pause?: boolean;
}

export interface BuildOptions {
  /** NAME[:TAG] of the image. */
  tag: string;
  /** The Dockerfile's path in the context (default "Dockerfile"). */
  dockerfile?: string;
  buildArgs?: Record<string, string>;
  /** Network of RUN steps: "none" (default), "allowlist" (with `allow`) or "full". */
  network?: string;
  allow?: string[];
  noCache?: boolean;
  /** Build up to this stage. */
  target?: string;
  memory_mb?: number;
}

/** One event from the server's stream (`GET /events`). */
export interface EventInfo {
  /** Resume after this one with `events({ after: id })`. */
  id: string;
  type: string;
  sandbox_id: string | null;
  timestamp: string;
  [field: string]: unknown;
}

/** A provider's health and what it found. */
export interface ProviderDetails extends ProviderInfo {
  sandbox_count: number;
  /** What it can do beyond exec and files. */
  features?: { snapshots: boolean; reattach: boolean; volumes: boolean; commit: boolean; isolation: "vm" | "namespaces" };
  config: Record<string, unknown>;
  problems: string[];
}

export interface RunCodeOptions {
  /** python (default), javascript or bash; leave out with `context`. */
  language?: string;
  /** A context (or its id) made with createCodeContext; default: the language's default context. */
  context?: string | CodeContext;
  /** Environment of this run only. */
  env?: Record<string, string>;
  /** Interrupt the code after this long ("30s" or ms); the context keeps its state. */
  timeout?: string | number;
  /** Called with output as the code prints it (the run is streamed when any callback is given). */
  onStdout?: (text: string) => void;
  onStderr?: (text: string) => void;
  onResult?: (result: CodeResult) => void;
  onError?: (error: CodeError) => void;
}
