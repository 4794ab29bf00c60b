// Wire shapes of the ForgeVM REST API (snake_case, as the server sends them).

export type SandboxState = "created" | "creating" | "running" | "paused" | "stopped" | "destroyed" | "error";

export interface SandboxInfo {
  id: string;
  state: SandboxState;
  provider: string;
  /** In a cluster: the node it lives on. */
  node?: string;
  /** Said by sandboxes whose provider is no security boundary (local). */
  warning?: string;
  image: string;
  memory_mb: number;
  vcpus: number;
  owner_id?: string;
  vm_id?: string;
  created_at: string;
  /** null: it lives until it is destroyed (ttl "0", or a service with a restart policy). */
  expires_at: string | null;
  metadata?: Record<string, string>;
  error?: string;
  network?: NetworkInfo;
  /** Its name, when it was given one (usable wherever an id is). */
  name?: string;
  /** Its main process, when it runs one. */
  main?: MainInfo;
  /** Its idle stop ("30m"), when its idle action is "stop" (the older name of `idle`). */
  idle_stop?: string;
  /** What it does once idle. */
  idle?: IdleSpec;
  /** Why it is paused (state "paused"): "request", "timeout" or "idle". */
  paused_reason?: string;
  /** Its RAM is a file of its own: forks stop it only to copy that file, pauses copy nothing. */
  forkable?: boolean;
  /** Named volumes it mounts. */
  volumes?: VolumeMount[];
  /** Host directories it mounts (live). */
  host_dirs?: HostDirMount[];
}

/** One line a sandbox's main process wrote. */
export interface LogLine {
  ts: string;
  stream: "stdout" | "stderr";
  line: string;
}

/** A process running in a sandbox. */
export interface GuestProcess {
  pid: number;
  ppid: number;
  /** User name from the guest's /etc/passwd, else the uid. */
  user: string;
  /** R running, S sleeping, D disk wait, Z zombie, T stopped. */
  state: string;
  rss_bytes: number;
  cpu_seconds: number;
  command: string;
}

/** A sandbox's main process: command, restart policy, and how its last run went. */
export interface MainInfo {
  command: string[];
  restart: string;
  restarts: number;
  running: boolean;
  exit_code: number | null;
  started_at: string | null;
  finished_at: string | null;
}

/** A published port: host address and port → guest port. */
export interface PortMapping {
  host_ip: string;
  host_port: number;
  guest_port: number;
}

/** A sandbox's network: mode, egress allowlist, published ports. */
export interface NetworkInfo {
  mode: "none" | "allowlist" | "full";
  allow: string[];
  ports: PortMapping[];
  /** The proxy the guest's HTTP(S)_PROXY point at (allowlist mode). */
  proxy?: string;
  /** Package files fetched over HTTP go through the host's package cache. */
  cache?: boolean;
}

/** One egress decision of the sandbox's proxy. */
export interface EgressEntry {
  ts: string;
  method: string;
  host: string;
  port: number;
  decision: "allow" | "deny";
  reason: string;
  rule?: string;
  address?: string;
  error?: string;
}

/** One metric sample (or bucket average): host side from the VMM, guest side from the agent; null where not sampled. */
export interface MetricSample {
  ts: number;
  cpu_pct?: number | null;
  rss_bytes?: number | null;
  pss_bytes?: number | null;
  disk_read_bps?: number | null;
  disk_write_bps?: number | null;
  guest_cpu_pct?: number | null;
  mem_used_bytes?: number | null;
  mem_total_bytes?: number | null;
  disk_used_bytes?: number | null;
  disk_total_bytes?: number | null;
  load1?: number | null;
  processes?: number | null;
  net_rx_bps?: number | null;
  net_tx_bps?: number | null;
}

/** A series of samples: `since` onwards in buckets of `step_ms`. */
export interface MetricHistory {
  sandbox?: string;
  since: string;
  step_ms: number;
  interval_ms: number;
  samples: MetricSample[];
}

/** The newest sample of the host and of every running sandbox. */
export interface LiveStats {
  interval_ms: number;
  host: MetricSample | null;
  sandboxes: { id: string; name: string | null; image: string; sample: MetricSample }[];
}

export interface SpawnOptions {
  /** Image name; the server's default when left out. */
  image?: string;
  provider?: string;
  memory_mb?: number;
  vcpus?: number;
  disk_mb?: number;
  /** Lifetime as a duration string, e.g. "30m". */
  ttl?: string;
  template?: string;
  owner_id?: string;
  metadata?: Record<string, string>;
  env?: Record<string, string>;
  /** Who commands run as by default ("image" for the image's USER). */
  user?: string;
  /** "none" (loopback only, the default), "allowlist" (listed hosts through the egress proxy) or "full" (a network device onto the internet, never the host). */
  network?: "none" | "allowlist" | "full";
  /** Egress allowlist: hosts, *.domains, IPs/CIDRs, with :port, and @presets such as "@pypi". */
  allow?: string[];
  /** Published ports, "[ADDRESS:]HOST:GUEST" (127.0.0.1 unless an address is given). */
  ports?: string[];
  /** Secret values: every command's environment and /run/secrets/NAME; never stored by the server. */
  secrets?: Record<string, string>;
  /** A name to use instead of the id anywhere. */
  name?: string;
  /** false: define it without starting it (state "created"); `client.start(id)` boots it. */
  start?: boolean;
  /** Stop it (disk kept) after this long without exec, file calls or published-port traffic ("30m"): `idle` with action "stop". */
  idle_stop?: string;
  /** Pause (or stop) it once idle; any call for a paused sandbox resumes it first. */
  idle?: IdleSpec;
  /** Run a main process: the image's ENTRYPOINT with `command` (else its CMD); restart "no", "on-failure[:N]", "always" or "unless-stopped". */
  main?: { command?: string[]; restart?: string };
  /** Named volumes to mount: "NAME:/path" or "NAME:/path:ro" (a missing volume is created). */
  volumes?: string[];
  /** Allowlist network: package files fetched over HTTP go through the host's package cache. */
  cache?: boolean;
  /** Keep its RAM in a file of its own: forks stop it only to copy that file (copies share its pages), pauses copy nothing. */
  forkable?: boolean;
}

/** What a sandbox does once idle: after `after` ("30s") with nothing in flight, "pause" (resumed by the next call, the default), "stop" or "none". */
export interface IdleSpec {
  after: string;
  action?: "pause" | "stop" | "none";
}

/** A host directory mounted in a sandbox. */
export interface HostDirMount {
  host: string;
  path: string;
  read_only: boolean;
}

/** A named volume mounted in a sandbox. */
export interface VolumeMount {
  name: string;
  path: string;
  read_only: boolean;
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

/** A named volume: data that outlives sandboxes. */
export interface VolumeInfo {
  name: string;
  size_mb: number;
  created_at: string;
  labels?: Record<string, string>;
  /** Bytes its file holds on the host (it is sparse). */
  used_bytes: number;
  mounted_by: { sandbox: string; path: string; read_only: boolean }[];
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

export interface ExecResult {
  exit_code: number;
  stdout: string;
  stderr: string;
  /** Duration string, e.g. "107ms". */
  duration: string;
  timed_out?: boolean;
  truncated?: boolean;
}

export interface StreamChunk {
  stream: "stdout" | "stderr";
  data: string;
}

export interface FileInfo {
  path: string;
  name: string;
  size: number;
  /** Permission bits in octal, e.g. "644". */
  mode: string;
  is_dir: boolean;
  mod_time: string;
}

/** What an archive upload wrote. */
export interface ArchiveResult {
  /** Files, directories and links written. */
  entries: number;
  /** Bytes of file content written. */
  bytes: number;
}

export interface HealthInfo {
  status: string;
  version: string;
  uptime: string;
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

export interface SnapshotInfo {
  id: string;
  name?: string;
  kind: "sandbox" | "fork" | "base" | "pause";
  state: string;
  source_id?: string;
  image: string;
  template?: string;
  memory_mb: number;
  vcpus: number;
  disk_mb: number;
  format: string;
  size_bytes: number;
  created_at: string;
}

/** A template as the server stores it; `vcpus`/`cpu_cores` and `ttl`/`ttl_seconds` are the same fields by two names. */
export interface Template {
  name: string;
  version?: string;
  image?: string;
  description?: string;
  /** Commands run once, before the template's base snapshot. */
  setup?: string[];
  /** Egress allowlist of its sandboxes (and of its setup commands). */
  allowed_hosts?: string[];
  memory_mb?: number;
  cpu_cores?: number;
  vcpus?: number;
  ttl_seconds?: number;
  /** Duration string, e.g. "30m". */
  ttl?: string;
  env?: Record<string, string>;
  /** Secrets its sandboxes need; the values come with each spawn (or from the server's FORGEVM_SECRET_<NAME>). */
  secrets?: { name: string; inject_at?: "env" | "file" | "both" }[];
  /** Warm sandboxes kept ready. */
  pool_size?: number;
  /** What its sandboxes do once idle. */
  idle?: IdleSpec;
  /** Its sandboxes keep their RAM in a file of their own (fast forks and pauses). */
  forkable?: boolean;
  provider?: string;
  metadata?: Record<string, string>;
  created_at?: string;
  updated_at?: string;
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

/** A local image on the server. */
export interface ImageInfo {
  name: string;
  digest?: string;
  size: number;
  created_at: string;
  source: string;
  in_use: boolean;
  /** How many layers its manifest lists. */
  layers?: number;
  /** The image a commit made it from. */
  parent?: string;
}

/** What a commit changes in the new image's config (Docker's commit --change subset). */
export interface ImageChanges {
  cmd?: string[];
  entrypoint?: string[];
  env?: Record<string, string>;
  workdir?: string;
  user?: string;
  labels?: Record<string, string>;
  /** "80" or "80/tcp" */
  expose?: string[];
}

export interface CommitOptions {
  changes?: ImageChanges;
  /** One layer holding the whole filesystem instead of one on top of the image's. */
  squash?: boolean;
  comment?: string;
  /** Stop the guest's processes while its disk is read (default true). */
  pause?: boolean;
}

export interface CommitResult {
  image: ImageInfo;
  layer: { digest: string; size: number; entries: number; whiteouts: number };
  frozen_ms: number;
  disk_pause_ms: number;
  duration_ms: number;
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

/** A build running on the server (or finished within the hour). */
export interface BuildJob {
  id: string;
  tag: string;
  state: "running" | "done" | "error" | "cancelled";
  steps: { stage: number; line: number; instruction: string; status: "pending" | "running" | "cached" | "done" | "error"; duration_ms?: number }[];
  log: string[];
  log_total: number;
  image?: string;
  digest?: string;
  error?: string;
  error_code?: string;
  started_at: string;
  finished_at?: string;
}

export interface PushResult {
  reference: string;
  digest: string;
  uploaded_bytes: number;
  blobs: { digest: string; size: number; status: "exists" | "mounted" | "uploaded" }[];
}

/** An image pull running on the server. */
export interface PullJob {
  id: string;
  image: string;
  state: "running" | "done" | "error";
  /** The latest progress lines. */
  progress: string[];
  /** How many progress lines there have been in all. */
  progress_total: number;
  error?: string;
  error_code?: string;
  digest?: string;
  started_at: string;
  finished_at?: string;
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

/** One tool call an agent made through MCP (arguments with secrets and contents redacted). */
export interface AuditEntry {
  seq: number;
  time: string;
  interface: string;
  session: string;
  tool: string;
  arguments: Record<string, unknown> | null;
  outcome: "ok" | "error" | "refused" | "cancelled";
  error: string | null;
  sandbox_id: string | null;
  duration_ms: number;
}

/** A provider's health and what it found. */
export interface ProviderDetails extends ProviderInfo {
  sandbox_count: number;
  /** What it can do beyond exec and files. */
  features?: { snapshots: boolean; reattach: boolean; volumes: boolean; commit: boolean; isolation: "vm" | "namespaces" };
  config: Record<string, unknown>;
  problems: string[];
}

/** A result of running code: the value of its last expression (is_main_result), or a figure it drew, in every format it has. */
export interface CodeResult {
  is_main_result: boolean;
  text?: string;
  html?: string;
  markdown?: string;
  svg?: string;
  /** Base64 PNG. */
  png?: string;
  jpeg?: string;
  latex?: string;
  json?: unknown;
  javascript?: string;
}

/** The exception code raised. */
export interface CodeError {
  name: string;
  value: string;
  traceback: string;
}

/** What running code produced. */
export interface Execution {
  results: CodeResult[];
  stdout: string;
  stderr: string;
  /** The exception the code raised, or null. */
  error: CodeError | null;
  execution_count: number;
  /** The context it ran in. */
  context: string;
  duration: string;
}

/** A stateful code context: its variables, imports and working directory persist between runs. */
export interface CodeContext {
  id: string;
  language: string;
  cwd: string;
  /** Who its code runs as (null: the sandbox's default user). */
  user: string | null;
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

/** An environment: a base image plus the Debian and Python packages a project needs. */
export interface EnvironmentSpec {
  id: string;
  owner_id: string;
  name: string;
  base_image: string;
  python_packages: string[];
  apt_packages: string[];
  python_version?: string;
  created_at: string;
  updated_at: string;
}

/** What `environments.createSpec` sends. */
export interface EnvironmentSpecRequest {
  owner_id?: string;
  name: string;
  base_image: string;
  python_packages?: string[];
  apt_packages?: string[];
  python_version?: string;
}

/** One builder step of an environment build (an instruction of its generated Dockerfile). */
export interface EnvironmentBuildStep {
  stage: number;
  line: number;
  instruction: string;
  status: "pending" | "running" | "cached" | "done" | "error";
  duration_ms?: number;
}

/** Where a build's image went: the local store or a registry connection. */
export interface EnvironmentArtifact {
  target: string;
  image_ref: string;
  digest?: string;
  status: "pending" | "pushing" | "ready" | "failed" | "canceled";
  error?: string;
  created_at: string;
  updated_at: string;
}

/** A build of an environment: queued → building → ready | failed | canceled. */
export interface EnvironmentBuild {
  id: string;
  spec_id: string;
  owner_id: string;
  status: "queued" | "building" | "ready" | "failed" | "canceled";
  current_step: string | null;
  log: string;
  image_size_bytes: number;
  digest_local?: string;
  error?: string;
  visibility?: string;
  steps: EnvironmentBuildStep[];
  created_at: string;
  finished_at?: string;
  updated_at: string;
  artifacts: EnvironmentArtifact[];
}

/** What to spawn from a build. */
export interface EnvironmentSpawnConfig {
  build_id: string;
  build_status: EnvironmentBuild["status"];
  ready: boolean;
  provider: string;
  image: string;
  target: string;
  digest: string | null;
  note: string;
}

/** A registry login builds push with; the secret is never shown. */
export interface RegistryConnection {
  id: string;
  owner_id: string;
  provider: string;
  registry: string;
  username: string;
  is_default: boolean;
  secret_storage: "encrypted" | "operator";
  secret_ref?: string;
  created_at: string;
  updated_at: string;
}

/** What `environments.putRegistryConnection` sends: `secret_ref` is the token, or "secret:NAME" for the operator's. */
export interface RegistryConnectionRequest {
  id?: string;
  owner_id?: string;
  provider: "ghcr" | "dockerhub" | "registry";
  username: string;
  secret_ref: string;
  is_default?: boolean;
  registry?: string;
}
